#!/usr/bin/env bash
# Target slowdown under `pyobs offcpu` on a context-switch-heavy workload:
# testdata/targets/offcpu_pingpong.py, two threads passing a byte through
# two pipes ROUNDS times (fixed work; the target times itself). Rows: no
# observer, pyobs offcpu --engine bpf, --engine perf, and `perf sched
# record` when perf is installed (it needs tracefs mounted), REPS times
# interleaved, medians. Columns: the target's wall
# time, its slowdown, the target's switch rate and the machine's sched_switch
# rate (from pyobs's footer), and the observer's CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
# ROUNDS:WORK pairs: as fast as it goes (~250k switch-outs/s here), and
# with ~12 µs of Python work per pass (~50k context switches/s here).
WORKLOADS=${WORKLOADS:-300000:0 50000:400}
LABEL=${LABEL:-pyenv-3.12}
MANIFEST=$(scripts/pythons.sh | tail -n 1)
make -s build
read -r -a PY < <(awk -F'\t' -v l="$LABEL" '$1 == l {print $3}' "$MANIFEST")
[ ${#PY[@]} -gt 0 ] || { echo "interpreter $LABEL not in $MANIFEST" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# run_one: start the target, attach $PROF (PID substituted), release the
# target, wait for both; prints "WALL CPU".
run_one() {
  local fifo=$TMP/in out=$TMP/out pid ppid cpu=0
  rm -f "$fifo"; mkfifo "$fifo"
  "${PY[@]}" testdata/targets/offcpu_pingpong.py "$ROUNDS" "$WORK" < "$fifo" > "$out" &
  pid=$!
  exec 9> "$fifo"
  for _ in $(seq 100); do grep -q READY "$out" 2>/dev/null && break; sleep 0.05; done
  if [ -n "$PROF" ]; then
    # shellcheck disable=SC2086
    python3 -c 'import resource,subprocess,sys; subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); r=resource.getrusage(resource.RUSAGE_CHILDREN); print("%.3f" % (r.ru_utime+r.ru_stime))' ${PROF//PID/$pid} > "$TMP/cpu" &
    ppid=$!
    sleep 0.7
  fi
  echo go >&9; exec 9>&-
  wait "$pid"
  if [ -n "$PROF" ]; then wait "$ppid" || true; cpu=$(cat "$TMP/cpu"); fi
  echo "$(tail -n 1 "$out" | awk '{print $4}') $cpu"
}

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR ? a[int((NR+1)/2)] : "-")}'; }

# Interleaved repetitions, medians: this 2-core VM is shared and noisy.
REPS=${REPS:-5}
printf '%-16s %-22s %9s %9s %12s %14s %8s   %s\n' target observer "wall s" slowdown "target sw/s" "machine sw/s" "CPU s" "all walls"
for wl in $WORKLOADS; do
  ROUNDS=${wl%%:*} WORK=${wl##*:}
  unset WALL CPU TSW MSW
  declare -A WALL CPU TSW MSW
  configs=(none bpf perf)
  command -v perf >/dev/null && configs+=(perf-sched)
  for _ in $(seq "$REPS"); do
    for c in "${configs[@]}"; do
      case $c in
        none) PROF="" ;;
        bpf|perf) PROF="bin/pyobs offcpu -p PID --engine $c --format json -o $TMP/o.json" ;;
        perf-sched) PROF="perf sched record -o $TMP/perf.data -p PID" ;;
      esac
      rm -f "$TMP/o.json"
      read -r wall cpu < <(run_one)
      WALL[$c]+="$wall "; CPU[$c]+="$cpu "
      if [ -s "$TMP/o.json" ]; then
        read -r tsw msw < <(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))["result"]
tsw = r["switches"] / float(sys.argv[2])  # per second of the target run
if not r.get("bpf"):
    tsw /= 2  # the perf engine counts switch-in and switch-out records
print("%.0f %s" % (tsw, "%.0f" % r["bpf"]["sched_switch_rate"] if r.get("bpf") else "-"))' "$TMP/o.json" "$wall")
        TSW[$c]+="$tsw "; MSW[$c]+="$msw "
      fi
    done
  done
  base=$(echo "${WALL[none]}" | median)
  for c in "${configs[@]}"; do
    w=$(echo "${WALL[$c]}" | median)
    name=$c; [ "$c" = bpf ] || [ "$c" = perf ] && name="pyobs offcpu ($c)"; [ "$c" = perf-sched ] && name="perf sched record"
    slow=-; [ "$c" = none ] || slow=$(python3 -c "print('%.1f%%' % (100*($w/$base-1)))")
    printf '%-16s %-22s %9s %9s %12s %14s %8s   %s\n' "$LABEL w=$WORK" "$name" "$w" "$slow" "$(echo "${TSW[$c]:-}" | median)" \
      "$(echo "${MSW[$c]:-}" | median)" "$(echo "${CPU[$c]}" | median)" "${WALL[$c]}"
  done
done
command -v perf >/dev/null || echo "perf is not installed: the perf sched record anchor is skipped"
