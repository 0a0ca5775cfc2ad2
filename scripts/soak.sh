#!/usr/bin/env bash
# Soak benchmark (not a test): does a long run stay flat? Peak memory and
# the run directory's size against the run's length, two ways:
#
#  1. the built-in engine's virtual clock: `sim plan` at $RATE requests/s
#     ($IN tokens in, $OUT out: a load the engine keeps up with, so no
#     queue grows inside the simulated server) for 10, 30, 60 and 120
#     minutes of simulated time (records rotated at 16 MiB, 16 MiB of
#     segments kept), each a process of its own, its peak RSS (VmHWM)
#     from results.json;
#  2. real time: `bench --duration forever` against `sim exact` (a process
#     of its own) at $REAL_RATE requests/s for $REAL (10m; records rotated
#     at $REAL_ROTATE, $REAL_KEEP of segments kept), its resident
#     memory and directory size sampled every $EVERY seconds, then SIGTERM:
#     the directory must be complete (results.json, the windows adding up).
#
# Markdown on stdout.
#
#   scripts/soak.sh > /tmp/soak.md
#   REAL=2m REAL_RATE=50 scripts/soak.sh        # shorter
#   PARTS=virtual scripts/soak.sh               # the virtual clock only
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --bin tokenscope
bin=target/release/tokenscope
work="$(mktemp -d)"
server_pid=""
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
RATE="${RATE:-150}"
IN="${IN:-128}"
OUT="${OUT:-32}"
DURATIONS="${DURATIONS:-10m 30m 60m 120m}"
REAL="${REAL:-10m}"
REAL_RATE="${REAL_RATE:-100}"
EVERY="${EVERY:-30}"
REAL_ROTATE="${REAL_ROTATE:-4MiB}"
REAL_KEEP="${REAL_KEEP:-8MiB}"
parts="${PARTS:-virtual real}"
export TOKENSCOPE_DB="$work/history.db"

mib() { python3 -c "import sys; print(f'{int(sys.argv[1]) / 2**20:.1f}')" "$1"; }
field() { python3 -c "import json,sys; v=json.load(open(sys.argv[1])); [v := (v or {}).get(k) for k in sys.argv[2].split('.')]; print(v if v is not None else '-')" "$1" "$2"; }

if [[ " $parts " == *" virtual "* ]]; then
  echo "## Virtual clock: sim plan at $RATE requests/s"
  echo
  echo "Llama-3.1-8B on one H100 (the built-in engine), $IN tokens in, $OUT out; \`--rotate-records 16MiB --keep-records 16MiB\`; windows of 1 minute."
  echo
  echo "| simulated | requests | peak RSS (MiB) | directory (MiB) | segments made / removed | windows |"
  echo "|---|---|---|---|---|---|"
  for d in $DURATIONS; do
    out="$work/plan-$d"
    "$bin" sim plan --rate "$RATE" --duration "$d" --input-tokens "$IN" --output-tokens "$OUT" \
      --rotate-records 16MiB --keep-records 16MiB --windows 1m --quiet --no-history --out "$out" > /dev/null
    rss=$(field "$out/results.json" client.peak_rss_mb)
    n=$(field "$out/results.json" counts.requests)
    seg="$(field "$out/results.json" records.segments) / $(field "$out/results.json" records.removed_segments)"
    size=$(du -sb "$out" | cut -f1)
    windows=$(wc -l < "$out/windows.jsonl")
    printf '| %s | %s | %.1f | %s | %s | %s |\n' "$d" "$n" "$rss" "$(mib "$size")" "$seg" "$windows"
  done
  echo
fi

if [[ " $parts " == *" real "* ]]; then
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$bin" sim exact --port "$port" --threads 1 --ttft 50ms --itl 10ms > "$work/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1 && break
    sleep 0.1
  done
  out="$work/forever"
  "$bin" bench --url "http://127.0.0.1:$port" --rate "$REAL_RATE" --duration forever \
    --input-tokens 64 --output-tokens 64 --windows 10s --rotate-records "$REAL_ROTATE" --keep-records "$REAL_KEEP" \
    --no-metrics --quiet --no-history --out "$out" > "$work/bench.log" 2>&1 &
  pid=$!
  seconds=$(python3 -c "import re,sys; m=re.fullmatch(r'(\d+)(s|m|h)?', sys.argv[1]); print(int(m[1]) * {'s':1,'m':60,'h':3600,None:1}[m[2]])" "$REAL")
  echo "## Real time: bench --duration forever at $REAL_RATE requests/s for $REAL"
  echo
  echo "Against \`sim exact\` (50 ms TTFT, 10 ms ITL, 64 tokens out); \`--windows 10s --rotate-records $REAL_ROTATE --keep-records $REAL_KEEP\`; sampled every ${EVERY} s."
  echo
  echo "| elapsed (s) | resident (MiB) | directory (MiB) | windows written |"
  echo "|---|---|---|---|"
  for ((t = EVERY; t <= seconds; t += EVERY)); do
    sleep "$EVERY"
    rss_kb=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
    size=$(du -sb "$out" | cut -f1)
    windows=$(wc -l < "$out/windows.jsonl")
    printf '| %d | %.1f | %s | %s |\n' "$t" "$(echo "$rss_kb / 1024" | bc -l)" "$(mib "$size")" "$windows"
  done
  kill -TERM "$pid"
  wait "$pid" || true
  requests=$(field "$out/results.json" counts.requests)
  in_windows=$(python3 -c "import json,sys; print(sum(json.loads(l)['requests'] for l in open(sys.argv[1])))" "$out/windows.jsonl")
  echo
  echo "Stopped by SIGTERM: results.json partial=$(field "$out/results.json" partial), $requests requests (the windows add up to $in_windows), peak RSS $(field "$out/results.json" client.peak_rss_mb) MB, segments made / removed $(field "$out/results.json" records.segments) / $(field "$out/results.json" records.removed_segments), client lag p99 $(field "$out/results.json" latency.client_lag_ms.p99) ms."
fi
