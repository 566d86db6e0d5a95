#!/usr/bin/env bash
# Target slowdown at 1 kHz, paired: in each round the same fixed work
# (testdata/targets/fixed_work.py) runs once bare and once under each
# sampler, in a shuffled order, and each sampler's wall time is divided by
# the bare run's of the same round. A VM's drift (other tenants, frequency)
# then cancels within a round instead of landing on one profiler.
# Samplers: pyobs record -F 1000 (stacks walked in the kernel), austin -i 1ms
# (3.7.0, reads without stopping), py-spy record --rate 1000 --nonblocking
# (0.4.3). Prints every round, then per sampler the median ratio and its
# quartiles, and pyobs's wall time over each peer's, paired per round.
#   ROUNDS (12), ITER (1000000, ~2 s bare), LABELS (pyenv-3.12 pyenv-3.13),
#   MANIFEST (scripts/pythons.sh's, by default).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-12}
ITER=${ITER:-1000000}
LABELS=${LABELS:-"pyenv-3.12 pyenv-3.13"}
CACHE=${PYOBS_PYTHONS_CACHE:-/var/cache/pyobs-pythons}
MANIFEST=${MANIFEST:-$(scripts/pythons.sh | tail -n 1)}
VENV=$CACHE/bench-venv
make -s build
for pkg in py-spy==0.4.3:py-spy austin-dist==3.7.0:austin; do
  [ -x "$VENV/bin/${pkg#*:}" ] && continue
  [ -x "$VENV/bin/pip" ] || python3 -m venv "$VENV" >/dev/null
  "$VENV/bin/pip" install -q "${pkg%%:*}" >/dev/null 2>&1 || echo "${pkg%%:*} not installable: its column is empty" >&2
done
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# run PYTHON PROFILER: the target's own wall time for the work, with
# PROFILER ("none", or a command with PID in it) attached before it starts.
run() {
  local py=$1 prof=$2 fifo=$TMP/in out=$TMP/out pid ppid=""
  rm -f "$fifo"; mkfifo "$fifo"
  "$py" testdata/targets/fixed_work.py "$ITER" < "$fifo" > "$out" &
  pid=$!
  exec 9> "$fifo"
  for _ in $(seq 200); do grep -q READY "$out" 2>/dev/null && break; sleep 0.05; done
  if [ "$prof" != none ]; then
    # shellcheck disable=SC2086
    ${prof//PID/$pid} > /dev/null 2>&1 &
    ppid=$!
  fi
  sleep 1 # attached (pyobs loads its programs, the others find the runtime)
  echo go >&9; exec 9>&-
  wait "$pid"
  [ -n "$ppid" ] && { wait "$ppid" || true; }
  tail -n 1 "$out"
}

for label in $LABELS; do
  py=$(awk -F'\t' -v l="$label" '$1 == l {print $3}' "$MANIFEST")
  [ -n "$py" ] || { echo "$label: not in $MANIFEST" >&2; continue; }
  declare -A cmd=(
    [none]=none
    [pyobs]="bin/pyobs record -p PID -F 1000 --format folded -o $TMP/pyobs.folded"
  )
  [ -x "$VENV/bin/austin" ] && cmd[austin]="$VENV/bin/austin -i 1ms -p PID -o $TMP/austin.out"
  [ -x "$VENV/bin/py-spy" ] && cmd[py-spy-nb]="$VENV/bin/py-spy record --rate 1000 --nonblocking --format raw -p PID -o $TMP/pyspy.txt"
  names=$(printf '%s\n' "${!cmd[@]}" | sort | tr '\n' ' ')
  echo "# $label ($py), ITER=$ITER, $ROUNDS rounds; wall seconds per run, order shuffled each round"
  : > "$TMP/rounds"
  for r in $(seq "$ROUNDS"); do
    line="round=$r"
    for name in $(printf '%s\n' $names | shuf); do
      line="$line $name=$(run "$py" "${cmd[$name]}")"
    done
    echo "$line" | tee -a "$TMP/rounds"
  done
  python3 - "$TMP/rounds" <<'PY'
import statistics, sys
rounds = [dict(kv.split("=") for kv in l.split()) for l in open(sys.argv[1])]
def q(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 4], statistics.median(xs), xs[(3 * n) // 4]
names = sorted(k for k in rounds[0] if k not in ("round", "none"))
print("%-10s %28s" % ("sampler", "slowdown vs bare: q1 median q3"))
for k in names:
    lo, med, hi = q([float(r[k]) / float(r["none"]) for r in rounds])
    print("%-10s %8.3f× %8.3f× %8.3f×" % (k, lo, med, hi))
for k in names:
    if k == "pyobs":
        continue
    lo, med, hi = q([float(r["pyobs"]) / float(r[k]) for r in rounds])
    worse = sum(float(r["pyobs"]) > float(r[k]) for r in rounds)
    print("pyobs / %-9s %.3f (q1 %.3f, q3 %.3f); pyobs slower in %d of %d rounds" % (k, med, lo, hi, worse, len(rounds)))
PY
  unset cmd
done
