#!/usr/bin/env bash
# Tracing a process and the child it spawns, side by side in one run: a
# parent python (P os.write calls to /dev/null of its own) runs a child
# python through subprocess (fork, then exec of a new interpreter) that
# makes N 1-byte os.write calls to /dev/null and times its own loop (wall:
# perf_counter; CPU: thread_time, which the kernel's BPF programs are
# part of and the machine's other tenants are not). Runs:
#   bare | pyobs trace -- CMD (eBPF, held before exec, children followed) |
#   pyobs trace --engine ptrace -- CMD (the parent alone: ptrace follows no
#   fork) | strace -f -c -- CMD
# Prints the median and minimum of the child's loop time over R runs, the
# median of its loop CPU, the ratios to bare, and the calls each tracer
# counted for the child (pyobs: every syscall on the child's own line;
# strace -c: the write total, the parent's included). pyobs's one-time load+attach, paid while the
# command is held before its exec, is printed apart (median attach_s).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-100000}
P=${P:-5000}
R=${R:-5}
LABEL=${LABEL:-pyenv-3.12}
MANIFEST=${MANIFEST:-$(scripts/pythons.sh | tail -n 1)}
make -s build
read -r -a PY <<<"$(awk -F'\t' -v l="$LABEL" '$1 == l {print $3}' "$MANIFEST")"
[ ${#PY[@]} -gt 0 ] || { echo "no $LABEL in $MANIFEST" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

cat >"$OUT/parent.py" <<'PYEOF'
import json, os, subprocess, sys
n_parent, n_child, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
fd = os.open("/dev/null", os.O_WRONLY)
for _ in range(n_parent):
    os.write(fd, b"p")
subprocess.run(json.loads(os.environ["CHILD_ARGV"]) + [str(n_child), out], check=True)
PYEOF
cat >"$OUT/child.py" <<'PYEOF'
import os, sys, time
n, out = int(sys.argv[1]), sys.argv[2]
fd = os.open("/dev/null", os.O_WRONLY)
w, b = os.write, b"c"
t0, c0 = time.perf_counter(), time.thread_time()
for _ in range(n):
    w(fd, b)
dt, dc = time.perf_counter() - t0, time.thread_time() - c0
rep = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.pwrite(rep, ("%d %.9f %.9f\n" % (os.getpid(), dt, dc)).encode(), 0)
PYEOF
CHILD_ARGV=$(python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "${PY[@]}" "$OUT/child.py")
export CHILD_ARGV
CMD=("${PY[@]}" "$OUT/parent.py" "$P" "$N" "$OUT/rep")

# run_one MODE: one run; prints "wall cpu calls attach" of the child's loop.
run_one() {
  local calls=- attach=-
  rm -f "$OUT/rep"
  case $1 in
  bare) "${CMD[@]}" ;;
  pyobs)
    bin/pyobs trace --format json -o "$OUT/t.json" -- "${CMD[@]}" 2>/dev/null
    calls=$(python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); pid = int(open(sys.argv[2]).read().split()[0]); print(sum(p["calls"] for p in d["processes"] if p["pid"] == pid))' "$OUT/t.json" "$OUT/rep")
    attach=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["attach_s"])' "$OUT/t.json") ;;
  pyobs-ptrace)
    bin/pyobs trace --engine ptrace --format json -o "$OUT/t.json" -- "${CMD[@]}" 2>/dev/null
    calls=0 ;;
  strace)
    strace -f -c -o "$OUT/s.txt" "${CMD[@]}"
    calls=$(awk '$NF == "write" {print $4}' "$OUT/s.txt") ;;
  esac
  [ -s "$OUT/rep" ] || { echo "failed - - -"; return; }
  read -r _ wall cpu <"$OUT/rep"
  echo "$wall $cpu $calls $attach"
}

col() { # COLUMN: "median min" of that column of $OUT/ok
  cut -d' ' -f"$1" "$OUT/ok" | sort -g | awk '{a[NR]=$1} END {printf "%s %s", a[int((NR+1)/2)], a[1]}'
}

stats() { # MODE: "wall-median wall-min cpu-median calls attach-median"
  local i wm wn cm cn am an
  for ((i = 0; i < R; i++)); do run_one "$1"; done | grep -v failed >"$OUT/ok" || true
  [ -s "$OUT/ok" ] || { echo "failed failed failed - -"; return; }
  read -r wm wn <<<"$(col 1)"
  read -r cm cn <<<"$(col 2)"
  read -r am an <<<"$(col 4)"
    [ "$am" = - ] || am=$(printf '%.3fs' "$am")
  printf '%.4f %.4f %.4f %s %s' "$wm" "$wn" "$cm" "$(tail -n 1 "$OUT/ok" | cut -d' ' -f3)" "$am"
}

ratio() { [ "$1" = failed ] && echo - || printf '%.2f×' "$(echo "$1 / $2" | bc -l)"; }

echo "$LABEL: parent $P writes, child $N os.write(/dev/null) calls; the child's loop over $R runs, ratio to bare"
read -r bw bmin bc _ _ <<<"$(stats bare)"
printf '%-40s %9s %7s %9s %7s %9s %7s %9s %8s\n' run wall-med ratio wall-min ratio cpu-med ratio calls attach
for mode in bare pyobs pyobs-ptrace strace; do
  w=$bw mn=$bmin c=$bc k=- a=-
  [ $mode = bare ] || read -r w mn c k a <<<"$(stats $mode)"
  case $mode in
  pyobs) name="pyobs trace -- CMD (eBPF, children)" ;;
  pyobs-ptrace) name="pyobs trace --engine ptrace -- CMD" ;;
  strace) name="strace -f -c -- CMD" ;;
  *) name=bare ;;
  esac
  printf '%-40s %9s %7s %9s %7s %9s %7s %9s %8s\n' "$name" "$w" "$(ratio "$w" "$bw")" "$mn" "$(ratio "$mn" "$bmin")" "$c" "$(ratio "$c" "$bc")" "$k" "$a"
done
echo "calls: pyobs: the child's own line (every syscall: its $N writes and its start-up); ptrace: 0, the child is not traced; strace -c: the write row, the parent's $P included"
