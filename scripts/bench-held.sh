#!/usr/bin/env bash
# How long `-- CMD` waits before its exec while the bpf engines load:
# `record -- python -c pass` and `offcpu -- python -c pass` on every
# interpreter, R runs each, medians of the whole command's wall time and of
# the JSON's held_s (the command's wait). The walker's layout is read from
# the command's files (held_layout "read from ..."); the row "through sh"
# runs the same interpreter through /bin/sh, whose files name no
# interpreter: the layout then comes once the interpreter is up (the
# program the verifier checks for every version).
#
# usage: [R=3] [LABELS="pyenv-3.10 ..."] scripts/bench-held.sh
set -euo pipefail
cd "$(dirname "$0")/.."
R=${R:-3}
MANIFEST=${MANIFEST:-$(scripts/pythons.sh | tail -n 1)}
LABELS=${LABELS:-$(awk -F'\t' '$1 !~ /^ft-/ {print $1}' "$MANIFEST")}
make -s build
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) printf "%.2f", v[int((NR + 1) / 2)] }'; }

# one CMD LABEL [WRAP...]: R runs of `pyobs CMD -- [WRAP] python -c pass`;
# prints "wall-median held-median layout".
one() {
  local cmd=$1 label=$2
  shift 2
  local argv walls=() helds=() layout=""
  read -r -a argv < <(awk -F'\t' -v l="$label" '$1 == l {print $3}' "$MANIFEST")
  for ((i = 0; i < R; i++)); do
    local t0 t1
    t0=$(date +%s.%N)
    bin/pyobs "$cmd" --format json -o "$TMP/out.json" -- "$@" "${argv[@]}" -c pass >/dev/null 2>&1
    t1=$(date +%s.%N)
    walls+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')")
    read -r h l < <(python3 - "$TMP/out.json" "$cmd" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
m = d["meta"] if sys.argv[2] == "record" else d["result"]["bpf"]
print(m.get("held_s", 0), m.get("held_layout", "").split(" (")[0].replace(" ", "_"))
EOF
    )
    helds+=("$h")
    layout=$l
  done
  echo "$(printf '%s\n' "${walls[@]}" | median) $(printf '%s\n' "${helds[@]}" | median) $layout"
}

printf '%-12s %-7s %8s %8s  %s\n' interpreter command whole held_s layout
for label in $LABELS; do
  for cmd in record offcpu; do
    read -r w h l < <(one "$cmd" "$label")
    printf '%-12s %-7s %7ss %7ss  %s\n' "$label" "$cmd" "$w" "$h" "${l//_/ }"
  done
done
# shellcheck disable=SC2086 # the first of the labels, whatever spaces or lines part them
read -r label _ <<<"$(echo $LABELS)"
for cmd in record offcpu; do
  read -r w h l < <(one "$cmd" "$label" /bin/sh -c 'exec "$0" "$@"')
  printf '%-12s %-7s %7ss %7ss  %s\n' "$label/sh" "$cmd" "$w" "$h" "${l//_/ }"
done
