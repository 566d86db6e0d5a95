#!/usr/bin/env bash
# dump --native and the --native merge on static .dynsym-only builds:
# 1. Wall time of one whole `pyobs dump`, `dump --lock` and `dump --native`
#    command (median of N runs) and the target's stopped time as the dump
#    reports it (median), on testdata/targets/many_threads.py 10 20 (10
#    threads parked 21+ frames deep); py-spy dump --native as the anchor
#    where its cached venv exists (it stops the target too).
# 2. record --native -F 499 for 5 s of testdata/targets/native_mixed.py
#    qsort on each interpreter: samples, merge mismatches, glued by address,
#    returned before read (the footer's account).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-15}
CACHE=${PYOBS_PYTHONS_CACHE:-/var/cache/pyobs-pythons}
MANIFEST=$(scripts/pythons.sh | tail -n 1)
make -s build
VENV=$CACHE/bench-venv
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"; [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null || true' EXIT

median() { sort -n | awk '{a[NR]=$1} END {printf "%.2f", a[int((NR+1)/2)]}'; }

wall_ms() { # median wall ms of N runs of "$@" ("failed" if it fails)
  local i t0 t1
  if ! "$@" >/dev/null 2>&1; then echo failed; return; fi
  for ((i = 0; i < N; i++)); do
    t0=$(date +%s%N); "$@" >/dev/null 2>&1 || true; t1=$(date +%s%N)
    echo $(( (t1 - t0) / 1000 ))
  done | median | awk '{printf "%.1f", $1/1000}'
}

stopped_us() { # median target_stopped_us of N dumps with flags "$@"
  local i
  for ((i = 0; i < N; i++)); do
    if bin/pyobs dump --format json "$@" > "$TMP/d.json" 2> "$TMP/d.err"; then
      python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["read"]["target_stopped_us"])' "$TMP/d.json"
    else
      echo "dump $* failed: $(cat "$TMP/d.err")" >&2
    fi
  done | median
}

start() { # label script args...: starts the target, sets pid
  local argv
  argv=$(awk -F'\t' -v l="$1" '$1 == l {print $3}' "$MANIFEST")
  shift
  [ -n "$argv" ] || return 1
  # shellcheck disable=SC2086
  $argv "$@" > "$TMP/out" &
  pid=$!
  for _ in $(seq 100); do grep -q READY "$TMP/out" 2>/dev/null && break; sleep 0.1; done
}

printf '%-12s %-24s %10s %12s\n' target tool ms/dump stopped_µs
for label in pyenv-3.11 pyenv-3.12 pyenv-3.13 sid-3.14; do
  start "$label" "testdata/targets/many_threads.py" 10 20 || continue
  printf '%-12s %-24s %10s %12s\n' "$label" "pyobs dump" "$(wall_ms bin/pyobs dump -p "$pid")" 0
  printf '%-12s %-24s %10s %12s\n' "$label" "pyobs dump --lock" "$(wall_ms bin/pyobs dump --lock -p "$pid")" "$(stopped_us --lock -p "$pid")"
  printf '%-12s %-24s %10s %12s\n' "$label" "pyobs dump --native" "$(wall_ms bin/pyobs dump --native -p "$pid")" "$(stopped_us --native -p "$pid")"
  if [ -x "$VENV/bin/py-spy" ]; then
    printf '%-12s %-24s %10s %12s\n' "$label" "py-spy dump --native" "$(wall_ms "$VENV/bin/py-spy" dump --native --pid "$pid")" "-"
  fi
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
done

echo
printf '%-12s %8s %10s %8s %8s\n' target samples mismatches glued gone
for label in pyenv-3.11 pyenv-3.12 pyenv-3.13 sid-3.14; do
  start "$label" testdata/targets/native_mixed.py qsort || continue
  sleep 1
  bin/pyobs record --native -p "$pid" -d 5s -F 499 --format json -o "$TMP/r.json" 2>/dev/null
  python3 -c "import json; m=json.load(open('$TMP/r.json'))['meta']; print('%-12s %8d %10d %8d %8d' % ('$label', m['samples'], m.get('merge_mismatch', 0), m.get('merge_linked', 0), m.get('merge_gone', 0)))"
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
done
