#!/usr/bin/env bash
# Validates the simulated engine against 71 published measurements (the
# SGLang team's, Lambda's, NVIDIA NIM's and vLLM's nightly benchmarks; the
# list with its sources is scripts/validate_sim.py) and NIM's 2024
# TensorRT-LLM table at TP 1–8 and concurrency 1 (held out on 2026-12-05,
# fitted since 2026-12-06), then against 42 held out (TensorRT-LLM's own
# throughput table, NIM's rows past saturation) and 69 held out since
# 2026-12-05 (NIM 1.8.0's Llama-3.1-8B closed loops), and times the planner.
# Prints Markdown.
#
#   scripts/validate-sim.sh > /tmp/validation.md
#
# `scripts/validate_sim.py BIN --rules-off` runs the same points without
# engine presets or multi-step scheduling, e.g. on an older build;
# `--phases` sets each closed loop of fixed lengths against both starts.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
bin=target/release/tokenscope
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# The published points, their sources and the error table with each
# metric's median and worst error: scripts/validate_sim.py.
python3 scripts/validate_sim.py "$bin"
echo
echo "Planner speed: one hour at 20 req/s (Llama-3.1-8B, 1×H100 SXM), one core:"
echo
echo '```'
start=$(date +%s.%N)
taskset -c 0 "$bin" sim plan --rate 20 --duration 1h --quiet --db "$work/history.db" --out "$work/hour" > /dev/null
end=$(date +%s.%N)
# An hour-long run rotates its records into compressed segments
# (docs/results-schema.md): the count is the results' own.
n=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['counts']['requests'])" "$work/hour/results.json")
python3 -c "print(f'{$n} requests simulated and written in {$end - $start:.2f} s')"
echo '```'
