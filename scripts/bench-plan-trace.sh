#!/usr/bin/env bash
# How long `sim plan` takes to plan a one-hour production trace: a
# Mooncake-style JSONL of 20,000 requests over 3,600 s (half of them reuse a
# prefix of earlier requests' 512-token blocks), generated here with a fixed
# seed, replayed at its recorded times on the default deployment.
# Prints the CPU seconds (user + system) of the whole command: reading the
# file, the simulation, and writing the run directory. The target is < 2 s.
# Usage: scripts/bench-plan-trace.sh [REQUESTS]   (needs a release build)
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-20000}"
bin=target/release/tokenscope
[ -x "$bin" ] || cargo build --release -q
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

awk -v n="$n" 'BEGIN {
  srand(1); next_id = 0; roots = 0
  for (i = 0; i < n; i++) {
    t = int(i * 3600000 / n + rand() * 100)
    blocks = 1 + int(rand() * 12)
    k = 0
    if (roots > 0 && rand() < 0.5) {
      r = int(rand() * roots); k = 1 + int(rand() * rootlen[r])
      if (k > blocks) k = blocks
      for (j = 0; j < k; j++) ids[j] = root[r, j]
    }
    for (j = k; j < blocks; j++) ids[j] = next_id++
    if (rand() < 0.2) { for (j = 0; j < blocks; j++) root[roots, j] = ids[j]; rootlen[roots++] = blocks }
    list = ids[0]; for (j = 1; j < blocks; j++) list = list ", " ids[j]
    input = (blocks - 1) * 512 + 1 + int(rand() * 512)
    printf "{\"timestamp\": %d, \"input_length\": %d, \"output_length\": %d, \"hash_ids\": [%s]}\n", t, input, 20 + int(rand() * 280), list
  }
}' > "$work/trace.jsonl"

TIMEFORMAT='%U %S'
{ time "$bin" sim plan --dataset "$work/trace.jsonl" --replay-trace --quiet --db "$work/history.db" --out "$work/run" > /dev/null ; } 2> "$work/time"
read -r user sys < "$work/time"
cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.2f", u + s }')
engine=$(grep -o '"prefix_cache_hits_tokens": *[0-9]*\|"prefix_cache_queries_tokens": *[0-9]*' "$work/run/results.json" | sort -u | tr -d ' "' | tr '\n' ' ')
echo "sim plan of a one-hour trace of $n requests: $cpu CPU-s (user $user, sys $sys); engine $engine"
