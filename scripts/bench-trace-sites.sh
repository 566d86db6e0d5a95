#!/usr/bin/env bash
# What naming the Python path of a failing call costs a traced process
# family: a parent python runs a child python (subprocess: fork, then exec
# of a new interpreter) that makes N failing os.rmdir calls (ENOENT: each
# one an event with its whole Python stack walked in the kernel) and
# times its own loop (thread_time: its CPU, the kernel's BPF programs
# included). Runs, alternated R times:
#   bare | pyobs trace -e rmdir --kernel-walk=false -- CMD (counts only) |
#   pyobs trace -e rmdir -- CMD (every failing call named) |
#   strace -f -c -e rmdir -- CMD
# Prints per mode the median of the child's loop CPU per call (ns), its
# ratio to bare, the calls pyobs named for the child, and pyobs's
# one-time load+attach (attach_s, paid while the command is held).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-20000}
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
subprocess.run(json.loads(os.environ["CHILD_ARGV"]) + sys.argv[1:], check=True)
PYEOF
cat >"$OUT/child.py" <<'PYEOF'
import os, sys, time
n, out = int(sys.argv[1]), sys.argv[2]
def child_fail():
    try:
        os.rmdir("/nonexistent-pyobs-bench")
    except FileNotFoundError:
        pass
c0 = time.thread_time()
for _ in range(n):
    child_fail()
dc = time.thread_time() - c0
with open(out, "w") as f:
    f.write("%d %.9f\n" % (os.getpid(), dc))
PYEOF
CHILD_ARGV=$(python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "${PY[@]}" "$OUT/child.py")
export CHILD_ARGV
CMD=("${PY[@]}" "$OUT/parent.py" "$N" "$OUT/rep")

# run_one MODE: prints "cpu_ns_per_call named attach_s" for one run.
run_one() {
  local named=- attach=-
  rm -f "$OUT/rep"
  case $1 in
  bare) "${CMD[@]}" ;;
  counts | named)
    local walk=true
    [ "$1" = counts ] && walk=false
    bin/pyobs trace -e rmdir --kernel-walk=$walk --format json -o "$OUT/t.json" -- "${CMD[@]}" 2>/dev/null
    read -r named attach < <(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
n = sum(p["calls"] for s in d["syscalls"] if s["name"] == "rmdir" for p in s.get("top_paths", [])
        if any(f["function"] == "child_fail" for f in p["frames"]))
print(n, d["attach_s"])' "$OUT/t.json") ;;
  strace) strace -f -c -e trace=rmdir -o "$OUT/s.txt" "${CMD[@]}" ;;
  esac
  read -r _ cpu <"$OUT/rep"
  awk -v c="$cpu" -v n="$N" -v m="$named" -v a="$attach" 'BEGIN {printf "%.1f %s %s\n", c / n * 1e9, m, a}'
}

modes=(bare counts named strace)
for _ in $(seq "$R"); do
  for m in "${modes[@]}"; do
    echo "$m $(run_one "$m")" >>"$OUT/all"
  done
done
med() { # MODE COLUMN: the median of that column of the mode's rows
  awk -v m="$1" -v c="$2" '$1 == m {print $c}' "$OUT/all" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}
bare=$(med bare 2)
echo "$LABEL: a child python's $N failing os.rmdir calls, $R alternated runs (medians):"
for m in "${modes[@]}"; do
  awk -v m="$m" -v ns="$(med "$m" 2)" -v b="$bare" -v named="$(med "$m" 3)" -v at="$(med "$m" 4)" \
    'BEGIN {printf "  %-7s %8.1f ns CPU per call  %5.2fx bare  named %s of the child'"'"'s calls  attach %s s\n", m, ns, ns / b, named, at}'
done
