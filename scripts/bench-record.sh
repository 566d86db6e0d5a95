#!/usr/bin/env bash
# Side-by-side sampling profilers on one deep, fast-changing, fixed-work
# target (testdata/targets/fixed_work.py), same run, same machine:
#   pyobs record at 99 Hz, 1 kHz and 20 kHz; py-spy (pyenv target; installed
#   from PyPI into a cached venv); Tachyon, CPython 3.15's own sampler
#   (`python3.15 -m profiling.sampling attach -r 20khz -a`) on the 3.15 target.
# Columns: samples, achieved rate (per second of the target's run), observer
# CPU per sample (µs), torn+failed+late % (pyobs only: the others don't say),
# and the target's slowdown: its own wall time with the profiler vs without.
set -euo pipefail
cd "$(dirname "$0")/.."
ITER=${ITER:-1000000}
CACHE=${PYOBS_PYTHONS_CACHE:-/var/cache/pyobs-pythons}
MANIFEST=$(scripts/pythons.sh | tail -n 1)
make -s build
VENV=$CACHE/bench-venv
if [ ! -x "$VENV/bin/py-spy" ]; then
  python3 -m venv "$VENV" >/dev/null && "$VENV/bin/pip" install -q py-spy >/dev/null 2>&1 || echo "py-spy not installable: anchor skipped" >&2
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# run_one ARGV... : start the target, attach the profiler command in $PROF
# (with PID substituted), release the target, wait; prints target wall time
# and profiler CPU seconds.
run_one() {
  local fifo=$TMP/in out=$TMP/out pid ppid cpu
  rm -f "$fifo"; mkfifo "$fifo"
  "$@" testdata/targets/fixed_work.py "$ITER" < "$fifo" > "$out" &
  pid=$!
  exec 9> "$fifo"
  for _ in $(seq 100); do grep -q READY "$out" 2>/dev/null && break; sleep 0.05; done
  if [ -n "$PROF" ]; then
    # shellcheck disable=SC2086
    python3 -c 'import resource,subprocess,sys; subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); r=resource.getrusage(resource.RUSAGE_CHILDREN); print("%.4f" % (r.ru_utime+r.ru_stime))' ${PROF//PID/$pid} > "$TMP/cpu" &
    ppid=$!
    sleep 0.5
  fi
  echo go >&9; exec 9>&-
  wait "$pid"
  [ -n "$PROF" ] && wait "$ppid"
  cpu=0; [ -n "$PROF" ] && cpu=$(cat "$TMP/cpu")
  echo "$(tail -n 1 "$out") $cpu"
}

count_folded() { awk '{n += $NF} END {print n+0}' "$1" 2>/dev/null || echo 0; }

printf '%-10s %-26s %9s %10s %12s %9s %9s\n' target profiler samples rate/s "µs CPU/smp" "bad %" slowdown
bench() { # label argv
  local label=$1; shift
  local base; PROF=""
  # The baseline is the median of three runs without a profiler.
  base=$(for _ in 1 2 3; do run_one "$@" | cut -d' ' -f1; done | sort -n | sed -n 2p)
  printf '%-10s %-26s %9s %10s %12s %9s %9s\n' "$label" "(none: ${base}s)" - - - - -
  for hz in 99 1000 20000; do
    PROF="bin/pyobs record -p PID -F $hz --format json -o $TMP/p.json"
    read -r wall cpu < <(run_one "$@")
    python3 - "$TMP/p.json" "$label" "pyobs -F $hz" "$wall" "$base" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["meta"]
wall, base = float(sys.argv[4]), float(sys.argv[5])
n = max(m["samples"], 1)
bad = 100 * (m["torn"] + m["failed"] + m.get("late", 0)) / n
print("%-10s %-26s %9d %10.0f %12.1f %9.2f %8.1f%%" % (sys.argv[2], sys.argv[3], m["samples"], m["samples"] / wall, 1e6 * m["observer_cpu_s"] / n, bad, 100 * (wall / base - 1)))
PY
  done
  if [ "$label" != sid-3.15 ] && [ -x "$VENV/bin/py-spy" ]; then
    for hz in 1000 20000; do
      PROF="$VENV/bin/py-spy record --pid PID --rate $hz --format raw -o $TMP/spy.txt"
      read -r wall cpu < <(run_one "$@")
      n=$(count_folded "$TMP/spy.txt")
      python3 -c "import sys; n=max($n,1); print('%-10s %-26s %9d %10.0f %12.1f %9s %8.1f%%' % ('$label', 'py-spy --rate $hz', $n, $n/$wall, 1e6*$cpu/n, 'n/a', 100*($wall/$base-1)))"
    done
  fi
  if [ "$label" = sid-3.15 ]; then
    # shellcheck disable=SC2206
    argv=($@)
    PROF="${argv[*]} -m profiling.sampling attach -r 20khz -a --collapsed -o $TMP/t.txt PID"
    read -r wall cpu < <(run_one "$@")
    n=$(count_folded "$TMP/t.txt")
    python3 -c "import sys; n=max($n,1); print('%-10s %-26s %9d %10.0f %12.1f %9s %8.1f%%' % ('$label', 'tachyon -r 20khz', $n, $n/$wall, 1e6*$cpu/n, 'n/a', 100*($wall/$base-1)))"
  fi
}

for label in pyenv-3.12 sid-3.15; do
  argv=$(awk -F'\t' -v l="$label" '$1 == l {print $3}' "$MANIFEST")
  [ -n "$argv" ] || continue
  # shellcheck disable=SC2086
  bench "$label" $argv
done
