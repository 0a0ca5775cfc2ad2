#!/usr/bin/env bash
# Validates the simulated engine against published measurements
# (shared/reference/engine-model.md §9) and times the planner. Prints Markdown.
#
#   scripts/validate-sim.sh > /tmp/validation.md
#
# ShareGPT-like lengths: lognormal prompts of mean 230 (std 250) tokens and
# outputs of mean 194 (std 200) — the published offline runs imply a mean
# output of 194 tokens (4132 tok/s ÷ 21.27 req/s).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
bin=target/release/tokenscope
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
shape=(--input-tokens lognormal:230,250 --output-tokens lognormal:194,200 --seed 1 --quiet --json)
q() { python3 -c "import json,sys; d=json.load(open('$1')); print(eval(sys.argv[1], {}, {'d': d}))" "$2"; }
err() { python3 -c "print('%+.0f %%' % (($1 - $2) / $2 * 100))"; }

echo "| scenario | metric | published | simulated | error |"
echo "|---|---|---|---|---|"
points=0
# One open-loop point: GPU, model, TP, req/s, prompts, the published E2E,
# TTFT and TPOT medians, the row's label and the engine preset (--engine;
# VALIDATE_ENGINE=vllm runs every point under vLLM's rules, for comparison);
# prints three rows.
point() {
  points=$((points + 1))
  local gpu=$1 model=$2 tp=$3 rate=$4 n=$5 label=$9 engine=${VALIDATE_ENGINE:-${10:-vllm}} r="$work/point-$points.json"
  "$bin" sim plan --engine "$engine" --gpu "$gpu" --model "$model" --tp "$tp" --rate "$rate" --requests "$n" "${shape[@]}" --db "$work/history.db" --out "${r%.json}" > "$r"
  for m in "E2E p50 (ms):e2e_ms:$6" "TTFT p50 (ms):ttft_ms:$7" "TPOT p50 (ms):tpot_ms:$8"; do
    IFS=: read -r metric key pub <<< "$m"
    sim=$(q "$r" "round(d['latency']['$key']['p50'], 2)")
    echo "| $label, $rate req/s | $metric | $pub | $sim | $(err "$sim" "$pub") |"
  done
}
point a100-80gb llama-3.1-8b 1 4 1200 1691.97 100.48 14.14 "Llama-3.1-8B, 1×A100 80GB, vLLM 0.6.0"
point a100-80gb llama-3.1-8b 1 8 2400 2137.16 120.39 17.09 "Llama-3.1-8B, 1×A100 80GB, vLLM 0.6.0"
# The same benchmark's SGLang 0.3.0 runs, under SGLang's rules (prefill
# batches first, overlap scheduling).
point a100-80gb llama-3.1-8b 1 4 1200 1564.17 31.98 13.17 "Llama-3.1-8B, 1×A100 80GB, SGLang 0.3.0" sglang
point a100-80gb llama-3.1-8b 1 8 2400 2175.02 35.68 17.85 "Llama-3.1-8B, 1×A100 80GB, SGLang 0.3.0" sglang
point h100-sxm llama-3.1-70b 4 4 1200 3005.24 53.94 25.03 "Llama-3.1-70B, 4×H100 SXM, SGLang 0.3.0" sglang
point h100-sxm llama-3.1-70b 4 8 2400 4064.98 58.11 33.07 "Llama-3.1-70B, 4×H100 SXM, SGLang 0.3.0" sglang
"$bin" sim plan --gpu a100-80gb --rate 100000 --requests 5000 "${shape[@]}" --db "$work/history.db" --out "$work/a100-off" > "$work/a100-off.json"
sim=$(q "$work/a100-off.json" "round(d['throughput']['output_tokens_per_s'])")
echo "| Llama-3.1-8B, 1×A100 80GB, vLLM 0.6.0, 5000 prompts at once | output tok/s | 4132.37 | $sim | $(err "$sim" 4132.37) |"
"$bin" sim plan --gpu h100-sxm --max-num-seqs 256 --rate 100000 --requests 5000 "${shape[@]}" --db "$work/history.db" --out "$work/h100" > "$work/h100.json"
sim=$(q "$work/h100.json" "round(d['throughput']['output_tokens_per_s'])")
tpot=$(q "$work/h100.json" "round(d['latency']['tpot_ms']['p50'], 2)")
echo "| Llama-3.1-8B, 1×H100 SXM, max-num-seqs 256, 5000 prompts (Lambda, vLLM 0.6.0 multi-step 10) | output tok/s | 8088.35 | $sim | $(err "$sim" 8088.35) |"
echo "| same, vLLM 0.5.4 (chunked prefill) | output tok/s | 3032.04 | $sim | $(err "$sim" 3032.04) |"
echo "| same, vLLM 0.6.0 multi-step 10 | TPOT p50 (ms) | 25.57 | $tpot | $(err "$tpot" 25.57) |"
echo "| same, vLLM 0.5.4 (chunked prefill) | TPOT p50 (ms) | 64.06 | $tpot | $(err "$tpot" 64.06) |"

echo
echo "Planner speed: one hour at 20 req/s (Llama-3.1-8B, 1×H100 SXM), one core:"
echo
echo '```'
start=$(date +%s.%N)
taskset -c 0 "$bin" sim plan --rate 20 --duration 1h --quiet --db "$work/history.db" --out "$work/hour" > /dev/null
end=$(date +%s.%N)
n=$(wc -l < "$work/hour/requests.jsonl")
python3 -c "print(f'{$n} requests simulated and written in {$end - $start:.2f} s')"
echo '```'
