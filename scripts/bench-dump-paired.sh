#!/usr/bin/env bash
# pyobs dump against austin -w in paired rounds, for #22's bar: a dump of
# a 50-thread process no slower than Austin's. The medians of
# scripts/bench-dump.sh move by a millisecond or two between runs on a
# shared VM; here each round times both tools back to back (perf stat -r 3
# each, wall time), and the ratio of each round is kept, so a slow minute
# slows both sides of its rounds.
#
# usage: [N=60] [LABEL=pyenv-3.12] scripts/bench-dump-paired.sh
# Prints the medians of each tool and of the per-round ratio (quartiles
# too), and in how many rounds pyobs was the faster.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-60}
LABEL=${LABEL:-pyenv-3.12}
CACHE=${PYOBS_PYTHONS_CACHE:-/var/cache/pyobs-pythons}
MANIFEST=${MANIFEST:-$(scripts/pythons.sh | tail -n 1)}
make -s build
VENV=$CACHE/bench-venv
[ -x "$VENV/bin/pip" ] || python3 -m venv "$VENV" >/dev/null
[ -x "$VENV/bin/austin" ] || "$VENV/bin/pip" install -q austin-dist==3.7.0 >/dev/null
command -v perf >/dev/null || { echo "bench-dump-paired: needs perf (linux-perf)" >&2; exit 1; }

argv=$(awk -F'\t' -v l="$LABEL" '$1 == l {print $3}' "$MANIFEST")
[ -n "$argv" ] || { echo "bench-dump-paired: no interpreter $LABEL in $MANIFEST" >&2; exit 1; }
out=$(mktemp)
# shellcheck disable=SC2086
$argv testdata/targets/many_threads.py 50 20 >"$out" &
pid=$!
trap 'kill $pid 2>/dev/null; rm -f "$out"' EXIT
for _ in $(seq 100); do grep -q READY "$out" && break; sleep 0.1; done

wall_ms() { # mean wall time of 3 runs of "$@", in ms
  perf stat -r 3 "$@" 2>&1 >/dev/null | awk '/seconds time elapsed/ {printf "%.3f", $1 * 1000}'
}

rows=()
for ((i = 0; i < N; i++)); do
  p=$(wall_ms bin/pyobs dump -p "$pid")
  a=$(wall_ms "$VENV/bin/austin" -w "$pid")
  rows+=("$p $a")
done
pick() { # column $1 of the rows, sorted, then the value at fraction $2 (0.5: the median)
  printf '%s\n' "${rows[@]}" | awk -v c="$1" '{ v = (c == 3) ? $1 / $2 : $c; printf "%.6f\n", v }' | sort -g |
    awk -v q="$2" '{ v[NR] = $1 } END { printf "%.3f", v[int(q * (NR - 1)) + 1] }'
}
faster=$(printf '%s\n' "${rows[@]}" | awk '$1 < $2 { n++ } END { print n + 0 }')
echo "$LABEL, 50 threads, $N paired rounds (perf stat -r 3 each):"
echo "  pyobs dump  median $(pick 1 0.5) ms"
echo "  austin -w   median $(pick 2 0.5) ms"
echo "  pyobs/austin per round: median $(pick 3 0.5) (quartiles $(pick 3 0.25)-$(pick 3 0.75)); pyobs faster in $faster of $N rounds"
