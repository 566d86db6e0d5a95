#!/usr/bin/env bash
# Side-by-side dump latency on the same 50-thread target, same run:
# pyobs dump vs py-spy dump, austin -w and pystack remote (anchors; from PyPI
# into a cached venv: py-spy 0.4.3, austin-dist 3.7.0 — 4.x needs a newer
# glibc — and pystack) and, for the 3.15 target, CPython's own Tachyon
# (python3.15 -m profiling.sampling dump).
# Prints wall ms per dump (median of N runs) and the ratio to pyobs.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-20}
CACHE=${PYOBS_PYTHONS_CACHE:-/var/cache/pyobs-pythons}
MANIFEST=${MANIFEST:-$(scripts/pythons.sh | tail -n 1)}
make -s build
VENV=$CACHE/bench-venv
[ -x "$VENV/bin/pip" ] || python3 -m venv "$VENV" >/dev/null
for pkg in py-spy==0.4.3:py-spy austin-dist==3.7.0:austin pystack:pystack; do
  [ -x "$VENV/bin/${pkg#*:}" ] || "$VENV/bin/pip" install -q "${pkg%%:*}" >/dev/null 2>&1 || echo "${pkg%%:*} not installable: anchor skipped" >&2
done

median_ms() { # runs "$@" N times, prints the median wall time in ms ("failed" if it fails)
  local i t0 t1 ts=()
  if ! "$@" >/dev/null 2>&1; then echo failed; return; fi
  for ((i = 0; i < N; i++)); do
    t0=$(date +%s%N); "$@" >/dev/null 2>&1 || true; t1=$(date +%s%N)
    ts+=($(( (t1 - t0) / 1000 )))
  done
  printf '%s\n' "${ts[@]}" | sort -n | awk '{a[NR]=$1} END {printf "%.2f", a[int((NR+1)/2)]/1000}'
}

row() { # label tool ms base
  local r="-"
  [ "$3" = failed ] || r=$(printf '%.2f' "$(echo "$3 / $4" | bc -l)")
  printf '%-12s %-28s %10s %8s\n' "$1" "$2" "$3" "$r"
}

printf '%-12s %-28s %10s %8s\n' target tool ms/dump ratio
for label in ${LABELS:-pyenv-3.10 pyenv-3.12 pyenv-3.13 sid-3.14 sid-3.15}; do
  argv=$(awk -F'\t' -v l="$label" '$1 == l {print $3}' "$MANIFEST")
  [ -n "$argv" ] || continue
  # shellcheck disable=SC2086
  $argv testdata/targets/many_threads.py 50 20 > /tmp/bench-target.$$ &
  pid=$!
  for _ in $(seq 100); do grep -q READY /tmp/bench-target.$$ 2>/dev/null && break; sleep 0.1; done
  base=$(median_ms bin/pyobs dump -p "$pid")
  row "$label" "pyobs dump" "$base" "$base"
  row "$label" "pyobs dump --lock" "$(median_ms bin/pyobs dump --lock -p "$pid")" "$base"
  if [ -x "$VENV/bin/py-spy" ]; then
    row "$label" "py-spy dump" "$(median_ms "$VENV/bin/py-spy" dump --pid "$pid")" "$base"
    row "$label" "py-spy dump --nonblocking" "$(median_ms "$VENV/bin/py-spy" dump --nonblocking --pid "$pid")" "$base"
  fi
  [ -x "$VENV/bin/austin" ] && row "$label" "austin -w" "$(median_ms "$VENV/bin/austin" -w "$pid")" "$base"
  [ -x "$VENV/bin/pystack" ] && row "$label" "pystack remote" "$(median_ms "$VENV/bin/pystack" remote "$pid")" "$base"
  if [ "$label" = sid-3.15 ]; then
    # shellcheck disable=SC2086
    row "$label" "tachyon (3.15) dump" "$(median_ms $argv -m profiling.sampling dump "$pid")" "$base"
  fi
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -f /tmp/bench-target.$$
done
