#!/usr/bin/env bash
# Benchmark of the client's own cost (not a test): how much CPU tokenscope
# spends per streamed token, how many tokens/s it ingests on one core, and how
# precise its clock is with many streams. Writes a Markdown report to stdout.
#
# The exact server runs as a separate process pinned to CPU 1, the client to
# CPU 0 with one worker thread, so the client's numbers are its own.
#
#   scripts/bench-client.sh > /tmp/bench.md
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
bin=target/release/tokenscope
work="$(mktemp -d)"
server_pid=""
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

start_server() { # args for `sim exact`
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  taskset -c 1 "$bin" sim exact --port "$port" --threads 1 "$@" > "$work/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    sleep 0.1
  done
  url="http://127.0.0.1:$port"
}
stop_server() { kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""; }
# CPU seconds the server process has used so far.
server_cpu() { awk '{printf "%.2f", ($14 + $15) / 100}' "/proc/$server_pid/stat"; }

field() { python3 -c "import json,sys; d=json.load(open('$1')); print(eval(sys.argv[1], {}, {'d': d}))" "$2"; }

echo "## Client cost: throughput (server sends as fast as it can: TTFT 0, ITL 0)"
echo
echo "| concurrency | requests × tokens | output tokens/s achieved | client CPU cores | CPU µs / token | tokens per client CPU-second |"
echo "|---|---|---|---|---|---|"
start_server --ttft 0ms --itl 0ms
for spec in "1 400" "64 800" "1024 2048"; do
  set -- $spec
  out="$work/tp-$1"
  taskset -c 0 "$bin" bench --url "$url" --quiet --client-threads 1 --concurrency "$1" --requests "$2" \
    --output-tokens 2048 --input-tokens 16 --model tokenscope-exact --api openai-chat --out "$out" > /dev/null
  r="$out/results.json"
  printf '| %s | %s × 2048 | %.0f | %.2f | %.2f | %.0f |\n' "$1" "$2" \
    "$(field "$r" 'd["throughput"]["output_tokens_per_s"]')" \
    "$(field "$r" 'd["client"]["cpu_cores"]')" \
    "$(field "$r" 'd["client"]["cpu_us_per_output_token"]')" \
    "$(field "$r" '1e6 / d["client"]["cpu_us_per_output_token"]')"
done
stop_server

echo
echo "## Timing error (server: TTFT 100 ms, ITL 20 ms, 256 tokens; 5 s ramp-up, one warm-up round)"
echo
echo "| concurrency | TTFT p50 − 100 ms | TTFT p99 − 100 ms | ITL p50 − 20 ms | ITL p99 − 20 ms | TPOT p99 − 20 ms | client CPU cores | server CPU cores | server's own lateness p50 / p99 |"
echo "|---|---|---|---|---|---|---|---|---|"
start_server --ttft 100ms --itl 20ms
for c in 1 64 1024; do
  out="$work/t-$c"
  n=$(( c < 4 ? 4 : c ))
  curl -sf "$url/stats?reset" > /dev/null
  cpu0=$(server_cpu); t0=$(date +%s.%N)
  taskset -c 0 "$bin" bench --url "$url" --quiet --client-threads 1 --concurrency "$c" --requests "$n" --warmup "$c" \
    --ramp-up 5s --output-tokens 256 --input-tokens 16 --model tokenscope-exact --api openai-chat --out "$out" > /dev/null
  cpu1=$(server_cpu); t1=$(date +%s.%N)
  curl -sf "$url/stats" > "$work/stats-$c.json"
  r="$out/results.json"
  printf '| %s | %+.3f ms | %+.3f ms | %+.3f ms | %+.3f ms | %+.3f ms | %.2f | %.2f | %.3f / %.3f ms |\n' "$c" \
    "$(field "$r" 'd["latency"]["ttft_ms"]["p50"] - 100')" \
    "$(field "$r" 'd["latency"]["ttft_ms"]["p99"] - 100')" \
    "$(field "$r" 'd["latency"]["itl_ms"]["p50"] - 20')" \
    "$(field "$r" 'd["latency"]["itl_ms"]["p99"] - 20')" \
    "$(field "$r" 'd["latency"]["tpot_ms"]["p99"] - 20')" \
    "$(field "$r" 'd["client"]["cpu_cores"]')" \
    "$(python3 -c "print(($cpu1 - $cpu0) / ($t1 - $t0))")" \
    "$(field "$work/stats-$c.json" 'd["lateness_us"]["p50"] / 1e3')" \
    "$(field "$work/stats-$c.json" 'd["lateness_us"]["p99"] / 1e3')"
done
stop_server
