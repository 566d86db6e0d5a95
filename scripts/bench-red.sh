#!/usr/bin/env bash
# Throughput of the red_http.py ThreadingHTTPServer (pyenv 3.12, /fast/
# requests answered at once: the syscall-heaviest case per unit of work)
# under the same closed-loop keep-alive load, without and with
# `pyobs red` attached, alternated ROUNDS times. Prints req/s of each run,
# each round's ratio with/without, the median of those ratios and the ratio
# of the sums, plus what pyobs red reported about itself.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-5}
CONNS=${CONNS:-4}
MANIFEST=$(scripts/pythons.sh | tail -n 1)
make -s build
go build -o bin/red-loadgen ./internal/red/loadgen
argv=$(awk -F'\t' '$1 == "pyenv-3.12" {print $3}' "$MANIFEST")
[ -n "$argv" ] || argv=python3
out=$(mktemp)
# shellcheck disable=SC2086
$argv testdata/targets/red_http.py http > "$out" &
pid=$!
trap 'kill $pid 2>/dev/null; rm -f "$out" /tmp/bench-red.json.$$' EXIT
for _ in $(seq 100); do grep -q PORT "$out" 2>/dev/null && break; sleep 0.1; done
port=$(awk '/PORT/ {print $2}' "$out")
bin/red-loadgen -port "$port" -conns "$CONNS" -d 1s >/dev/null # warm up

rate() { awk '{print $1}'; }
nreq() { awk '{print $3}'; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; } # the server's utime+stime
tck=$(getconf CLK_TCK)
us_per_req() { echo "($2 - $1) * 1000000 / $tck / $3" | bc -l; } # ticks0 ticks1 requests
printf '%-6s %-14s %12s %s\n' round mode req/s client
sum0=0; sum1=0; ratios=()
for r in $(seq "$ROUNDS"); do
  c0=$(cpu_ticks)
  base=$(bin/red-loadgen -port "$port" -conns "$CONNS" -d "${SECS}s")
  c1=$(cpu_ticks)
  printf '%-6s %-14s %12s %s; server CPU %.0f µs/req\n' "$r" "without" "$(echo "$base" | rate)" "$base" "$(us_per_req "$c0" "$c1" "$(echo "$base" | nreq)")"
  bin/pyobs red -p "$pid" -d "$((SECS + 2))s" --format json -o /tmp/bench-red.json.$$ &
  red=$!
  sleep 1
  c0=$(cpu_ticks)
  with=$(bin/red-loadgen -port "$port" -conns "$CONNS" -d "${SECS}s")
  c1=$(cpu_ticks)
  wait $red
  printf '%-6s %-14s %12s %s; server CPU %.0f µs/req\n' "$r" "with pyobs red" "$(echo "$with" | rate)" "$with" "$(us_per_req "$c0" "$c1" "$(echo "$with" | nreq)")"
  ratios+=("$(echo "$(echo "$with" | rate) / $(echo "$base" | rate)" | bc -l)")
  printf '%-6s %-14s %12.3f\n' "$r" "ratio" "${ratios[-1]}"
  sum0=$(echo "$sum0 + $(echo "$base" | rate)" | bc -l)
  sum1=$(echo "$sum1 + $(echo "$with" | rate)" | bc -l)
  python3 - /tmp/bench-red.json.$$ "$port" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
p = [p for p in r["ports"] if p["port"] == int(sys.argv[2])][0]
print(f"       pyobs red: {p['rate_per_s']:.1f} req/s over {r['window_s']:.2f} s, p50 {p['duration']['p50_ms']:.2f} ms, "
      f"p99 {p['duration']['p99_ms']:.2f} ms, events {r['events']}, drops {r['drops']}, observer CPU {r['observer_cpu_s']:.2f} s")
PY
done
med=$(printf '%s\n' "${ratios[@]}" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}')
printf 'throughput ratio with/without pyobs red: median of rounds %.3f, of sums %.3f\n' "$med" "$(echo "$sum1 / $sum0" | bc -l)"
