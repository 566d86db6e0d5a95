#!/usr/bin/env bash
# Native (mixed Python + C) stacks, side by side on one fixed-work target
# (testdata/targets/fixed_work.py on pyenv 3.12), same run, same machine:
#   pyobs record --native at 99 Hz, 1 kHz and 20 kHz (16 KiB stack copies);
#   perf record --call-graph dwarf (default 8 KiB copies; `apt-get install
#   linux-perf`), and py-spy record --native (installed from PyPI into a
#   cached venv). Columns: samples, observer CPU per sample (µs), bytes
#   written per sample (perf: perf.data size / samples), and the target's
#   slowdown (its own wall time with the profiler vs the median of three
#   runs without).
set -euo pipefail
cd "$(dirname "$0")/.."
ITER=${ITER:-1000000}
LABEL=${LABEL:-pyenv-3.12}
CACHE=${PYOBS_PYTHONS_CACHE:-/var/cache/pyobs-pythons}
MANIFEST=$(scripts/pythons.sh | tail -n 1)
make -s build
VENV=$CACHE/bench-venv
PERF=$(command -v perf || ls /usr/bin/perf_* 2>/dev/null | head -n 1 || true)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# shellcheck disable=SC2207
ARGV=($(awk -F'\t' -v l="$LABEL" '$1 == l {print $3}' "$MANIFEST"))
[ ${#ARGV[@]} -gt 0 ] || { echo "no $LABEL in $MANIFEST" >&2; exit 1; }

# run_one: start the target, attach $PROF (PID substituted), release the
# target, wait; prints the target's wall time and the profiler's CPU seconds.
run_one() {
  local fifo=$TMP/in out=$TMP/out pid ppid cpu
  rm -f "$fifo"; mkfifo "$fifo"
  "${ARGV[@]}" testdata/targets/fixed_work.py "$ITER" < "$fifo" > "$out" &
  pid=$!
  exec 9> "$fifo"
  for _ in $(seq 100); do grep -q READY "$out" 2>/dev/null && break; sleep 0.05; done
  if [ -n "$PROF" ]; then
    # shellcheck disable=SC2086
    python3 -c 'import resource,subprocess,sys; subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); r=resource.getrusage(resource.RUSAGE_CHILDREN); print("%.4f" % (r.ru_utime+r.ru_stime))' ${PROF//PID/$pid} > "$TMP/cpu" &
    ppid=$!
    sleep 0.7
  fi
  echo go >&9; exec 9>&-
  wait "$pid"
  [ -n "$PROF" ] && wait "$ppid"
  cpu=0; [ -n "$PROF" ] && cpu=$(cat "$TMP/cpu")
  echo "$(tail -n 1 "$out") $cpu"
}

row() { # profiler samples cpu_s bytes wall base
  python3 -c "import sys; n=max(int('$2'),1); print('%-34s %8d %12.1f %12s %9.1f%%' % ('$1', int('$2'), 1e6*float('$3')/n, '$4', 100*(float('$5')/float('$6')-1)))"
}

printf '%-34s %8s %12s %12s %10s\n' profiler samples "µs CPU/smp" "bytes/smp" slowdown
PROF=""
base=$(for _ in 1 2 3; do run_one | cut -d' ' -f1; done | sort -n | sed -n 2p)
printf '%-34s %8s %12s %12s %10s\n' "(none: ${base}s)" - - - -
for hz in 99 1000 20000; do
  PROF="bin/pyobs record --native -p PID -F $hz --format json -o $TMP/p.json"
  read -r wall _ < <(run_one)
  read -r n cpu full < <(python3 -c "import json; m=json.load(open('$TMP/p.json'))['meta']; print(m['samples'], m['observer_cpu_s'], m.get('native_full', 0))")
  row "pyobs --native -F $hz ($full full)" "$n" "$cpu" "-" "$wall" "$base"
done
if [ -n "$PERF" ]; then
  for hz in 99 1000; do
    PROF="$PERF record -e task-clock -F $hz --call-graph dwarf -p PID -o $TMP/perf.data"
    read -r wall cpu < <(run_one)
    n=$("$PERF" report -i "$TMP/perf.data" --stdio -n --sort comm 2>/dev/null | awk '/^# Samples:/ {print $3; exit}' || true)
    n=${n:-0}; case $n in *K) n=$(( ${n%K} * 1000 ));; esac
    bytes=$(( $(stat -c %s "$TMP/perf.data") / (n > 0 ? n : 1) ))
    row "perf --call-graph dwarf -F $hz" "$n" "$cpu" "$bytes" "$wall" "$base"
  done
else
  echo "perf not installed (apt-get install linux-perf): skipped" >&2
fi
if [ -x "$VENV/bin/py-spy" ]; then
  for hz in 99 1000; do
    PROF="$VENV/bin/py-spy record --native --pid PID --rate $hz --format raw -o $TMP/spy.txt"
    read -r wall cpu < <(run_one)
    n=$(awk '{n += $NF} END {print n+0}' "$TMP/spy.txt" 2>/dev/null || echo 0)
    row "py-spy --native --rate $hz" "$n" "$cpu" "-" "$wall" "$base"
  done
fi
