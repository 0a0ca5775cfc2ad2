#!/usr/bin/env bash
# A/B of two builds on one exact server (on CPU 1), their clients alternated
# on CPU 0, 5 runs each: CPU per output token (user + system ÷ tokens).
#   OLD=/tmp/tokenscope-old NEW=target/release/tokenscope scripts/ab-client.sh
set -u
OLD=${OLD:?the older build}; NEW=${NEW:-target/release/tokenscope}
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
taskset -c 1 "$NEW" sim exact --port $port --threads 1 --ttft 100ms --itl 20ms > $work/srv.log 2>&1 &
srv=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.1; done
for i in 1 2 3 4 5; do
  for b in "$OLD" "$NEW"; do
    /usr/bin/time -f "%U %S" -o $work/time taskset -c 0 "$b" bench --url http://127.0.0.1:$port --quiet \
      --client-threads 1 --model tokenscope-exact --api openai-chat --input-tokens 16 --no-metrics \
      --db $work/h.db --out $work/r-$i --concurrency 1024 --requests 1024 --output-tokens 256 > /dev/null
    echo "$b $(awk '{printf "%.3f", ($1+$2)*1e6/(1024*256)}' $work/time)" | tee -a "$work/all"
    rm -rf $work/r-$i
  done
done
kill $srv
# The medians, µs per output token.
python3 - "$work/all" <<'PY'
import statistics, sys, collections
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    build, us = line.rsplit(" ", 1)
    runs[build].append(float(us))
for build, us in runs.items():
    print(f"{build}: median {statistics.median(us):.2f} µs per token (runs {min(us):.2f}–{max(us):.2f})")
PY
rm -rf "$work"
