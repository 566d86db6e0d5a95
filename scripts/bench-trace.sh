#!/usr/bin/env bash
# Syscall-tracing overhead, side by side in one run on the same target: a
# loop of N 1-byte os.write calls to /dev/null (testdata/targets/trace_mix.py,
# which times the loop itself and prints ELAPSED), run
#   bare | pyobs trace (tracepoint engine, -p) | pyobs trace (ptrace, -p) |
#   pyobs trace -- CMD (ptrace, spawn) | pyobs trace -e openat -- CMD (ptrace with
#   a seccomp filter: the loop's writes never stop) | strace -c -f (spawn) |
#   perf trace -s (if it runs)
# Attached runs start the target gated (--wait-usr1) and release it once the
# tracer is in place. Prints the median and the minimum loop time of R runs
# and their ratios to bare (on a shared VM the minimum is the steadier figure).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-100000}
R=${R:-5}
LABEL=${LABEL:-pyenv-3.12}
MANIFEST=$(scripts/pythons.sh | tail -n 1)
make -s build
read -r -a PY <<<"$(awk -F'\t' -v l="$LABEL" '$1 == l {print $3}' "$MANIFEST")"
[ ${#PY[@]} -gt 0 ] || { echo "no $LABEL in $MANIFEST" >&2; exit 1; }
TARGET=testdata/targets/trace_mix.py
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

elapsed() { grep -m1 '^ELAPSED' "$1" | awk '{print $2}'; }

# start_gated: starts the target waiting for SIGUSR1, sets TPID.
start_gated() {
  "${PY[@]}" "$TARGET" --writes "$N" --wait-usr1 >"$OUT/t.out" 2>&1 &
  TPID=$!
  for _ in $(seq 200); do grep -q READY "$OUT/t.out" 2>/dev/null && return; sleep 0.02; done
  echo "target did not start" >&2; exit 1
}

# run_one MODE: one run, prints the loop's seconds ("failed" when it fails).
run_one() {
  local mode=$1 tracer ready
  case $mode in
  bare)
    "${PY[@]}" "$TARGET" --writes "$N" >"$OUT/t.out" 2>&1 ;;
  strace)
    strace -c -f -o /dev/null "${PY[@]}" "$TARGET" --writes "$N" >"$OUT/t.out" 2>&1 ;;
  perf-trace)
    perf trace -s -o /dev/null "${PY[@]}" "$TARGET" --writes "$N" >"$OUT/t.out" 2>&1 || { echo failed; return; } ;;
  pyobs-spawn)
    bin/pyobs trace --engine ptrace -o /dev/null -- "${PY[@]}" "$TARGET" --writes "$N" >"$OUT/t.out" 2>"$OUT/p.err" ;;
  pyobs-seccomp)
    bin/pyobs trace --engine ptrace -e openat -o /dev/null -- "${PY[@]}" "$TARGET" --writes "$N" >"$OUT/t.out" 2>"$OUT/p.err" ;;
  pyobs-tracepoint | pyobs-ptrace)
    start_gated
    bin/pyobs trace --engine "${mode#pyobs-}" -p "$TPID" -o /dev/null 2>"$OUT/p.err" &
    tracer=$!
    for _ in $(seq 1000); do
      ready=0
      if [ "$mode" = pyobs-ptrace ]; then
        grep -q '^TracerPid:[[:space:]]*[1-9]' "/proc/$TPID/status" && ready=1
      else
        [ "$(find "/proc/$tracer/fd" -lname 'anon_inode:bpf_link' 2>/dev/null | wc -l)" -ge 2 ] && ready=1
      fi
      [ $ready = 1 ] && break
      sleep 0.01
    done
    kill -USR1 "$TPID"
    wait "$TPID" || true
    wait "$tracer" || true ;;
  esac
  elapsed "$OUT/t.out" || echo failed
}

stats() { # MODE: "median min" of R runs
  local i ts=()
  for ((i = 0; i < R; i++)); do ts+=("$(run_one "$1")"); done
  printf '%s\n' "${ts[@]}" | grep -v failed | sort -g |
    awk '{a[NR]=$1} END {if (NR) printf "%.3f %.3f", a[int((NR+1)/2)], a[1]; else print "failed failed"}'
}

ratio() { [ "$1" = failed ] && echo - || printf '%.2f×' "$(echo "$1 / $2" | bc -l)"; }

echo "$LABEL, $N os.write(/dev/null) calls; loop time of $R runs, ratio to bare"
read -r bmed bmin <<<"$(stats bare)"
printf '%-34s %8s %8s %8s %8s\n' run median ratio min ratio
for mode in bare pyobs-tracepoint pyobs-ptrace pyobs-spawn pyobs-seccomp strace perf-trace; do
  med=$bmed mn=$bmin
  [ $mode = bare ] || read -r med mn <<<"$(stats $mode)"
  case $mode in
  pyobs-tracepoint) name="pyobs trace --engine tracepoint -p" ;;
  pyobs-ptrace) name="pyobs trace --engine ptrace -p" ;;
  pyobs-spawn) name="pyobs trace -- CMD (ptrace)" ;;
  pyobs-seccomp) name="pyobs trace -e openat -- CMD" ;;
  strace) name="strace -c -f -- CMD" ;;
  perf-trace) name="perf trace -s -- CMD" ;;
  *) name=bare ;;
  esac
  printf '%-34s %8s %8s %8s %8s\n' "$name" "$med" "$(ratio "$med" "$bmed")" "$mn" "$(ratio "$mn" "$bmin")"
done
