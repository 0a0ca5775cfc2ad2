#!/usr/bin/env python3
"""Regenerate what the test command checks tokenscope's peer exports and
imports against, from the peers' own code at pinned versions.

Run it with the Python of a venv where the peers are installed (their full
stacks: GuideLLM pulls in torch), which the test command never needs:

    python3 -m venv /tmp/peers && /tmp/peers/bin/pip install \
        guidellm==0.8.1 aiperf==0.13.0 h2 vllm==0.34.0
    /tmp/peers/bin/python scripts/peers/refresh.py --tokenscope target/release/tokenscope

It writes, into crates/tokenscope/tests/fixtures/peers/, named by version:

- JSON Schemas of the loaders' own models (pydantic's validation schema):
  GuideLLM's GenerativeBenchmarksReport, AIPerf's JsonExportData and its
  per-request MetricRecordInfo; vLLM's result keys (vLLM's bench result
  is a plain dict, so its schema is written here from its keys);
- results made by the peers themselves: GuideLLM, AIPerf and `vllm bench
  serve` (with and without --save-detailed) each run against tokenscope's
  built-in exact server (12 requests, a tenth of them answered 500), for
  `report`, `compare` and `history import` to read.

For a new release, change the pins below and rerun; the test names the
files by these versions.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GUIDELLM = "0.8.1"
AIPERF = "0.13.0"
VLLM = "0.34.0"
OUT = Path(__file__).resolve().parents[2] / "crates/tokenscope/tests/fixtures/peers"
REQUESTS = 12


def write(name, doc):
    path = OUT / name
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"wrote {path} ({path.stat().st_size} bytes)")


def schemas():
    from aiperf.common.models.export_models import JsonExportData
    from aiperf.common.models.record_models import MetricRecordInfo
    from guidellm.benchmark import GenerativeBenchmarksReport

    write(f"guidellm-{GUIDELLM}.benchmarks.schema.json",
          GenerativeBenchmarksReport.model_json_schema(mode="validation"))
    write(f"aiperf-{AIPERF}.profile_export_aiperf.schema.json",
          JsonExportData.model_json_schema(mode="validation"))
    write(f"aiperf-{AIPERF}.profile_export.record.schema.json",
          MetricRecordInfo.model_json_schema(mode="validation"))
    write(f"vllm-{VLLM}.result.schema.json", vllm_schema())


def vllm_schema():
    """`vllm bench serve --save-result --save-detailed`'s keys
    (vllm/benchmarks/serve.py, `main_async` and `benchmark`), with the
    types vLLM writes; `vllm bench sweep plot` reads them by name."""
    num = {"type": "number"}
    stats = {f"{s}_{m}_ms": num for m in ("ttft", "tpot", "itl", "e2el")
             for s in ("mean", "median", "std", "p99")}
    per_request = {
        "input_lens": {"type": "array", "items": {"type": "integer"}},
        "output_lens": {"type": "array", "items": {"type": "integer"}},
        "ttfts": {"type": "array", "items": num},
        "itls": {"type": "array", "items": {"type": "array", "items": num}},
        "latencies": {"type": "array", "items": num},
        "start_times": {"type": "array", "items": num},
        "errors": {"type": "array", "items": {"type": "string"}},
    }
    props = {
        "date": {"type": "string", "pattern": "^[0-9]{8}-[0-9]{6}$"},
        "endpoint_type": {"type": "string"},
        "backend": {"type": "string"},
        "label": {"type": ["string", "null"]},
        "model_id": {"type": "string"},
        "tokenizer_id": {"type": ["string", "null"]},
        "num_prompts": {"type": "integer"},
        "request_rate": {"oneOf": [num, {"const": "inf"}]},
        "burstiness": {"oneOf": [{"type": "number", "exclusiveMinimum": 0}, {"const": "inf"}]},
        "max_concurrency": {"type": ["integer", "null"]},
        "duration": num,
        "completed": {"type": "integer"},
        "failed": {"type": "integer"},
        "total_input_tokens": {"type": "integer"},
        "total_output_tokens": {"type": "integer"},
        "request_throughput": num,
        "request_goodput": {"type": ["number", "null"]},
        "output_throughput": num,
        "total_token_throughput": num,
        "max_output_tokens_per_s": num,
        "max_concurrent_requests": {"type": "integer"},
        "rtfx": num,
        **stats,
        **per_request,
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"vLLM {VLLM} bench serve result (--save-result --save-detailed)",
        "type": "object",
        "properties": props,
        "required": sorted(props),
    }


def exact_server(tokenscope, port):
    proc = subprocess.Popen(
        [tokenscope, "sim", "exact", "--port", str(port), "--ttft", "50ms",
         "--itl", "10ms", "--output-tokens", "16", "--error-500", "0.1",
         "--fault-seed", "3"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    return proc


def tiny_tokenizer(where):
    """A byte-level BPE trained here: the peers need a Hugging Face
    tokenizer directory and nothing may come from the hub."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    words = [w * k for w in "abcdefghijklmnopqrstuvwxyz" for k in range(1, 5)]
    text = [" ".join(words[(i * 7 + j) % len(words)] for j in range(40)) for i in range(200)]
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(text, trainers.BpeTrainer(
        vocab_size=600, special_tokens=["[UNK]", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                            unk_token="[UNK]").save_pretrained(where)
    return where


def run_guidellm(bin_dir, url, tok, work):
    out = work / "benchmarks.json"
    subprocess.run(
        [bin_dir / "guidellm", "run",
         "--backend", f"kind=openai_http,target={url},model=tokenscope-exact",
         "--profile", "kind=concurrent,streams=2",
         "--constraint", f"kind=max_requests,count={REQUESTS}",
         "--tokenizer", f"kind=hf_auto,model={tok}",
         "--data", "kind=synthetic_text,prompt_tokens=32,output_tokens=16",
         "--output", f"kind=json,path={out}", "--disable-console-interactive"],
        check=True, stdout=subprocess.DEVNULL)
    shutil.copy(out, OUT / f"guidellm-{GUIDELLM}-benchmarks.json")


def run_aiperf(bin_dir, url, tok, work):
    art = work / "aiperf"
    subprocess.run(
        [bin_dir / "aiperf", "profile", "--model", "tokenscope-exact", "--url", url,
         "--endpoint-type", "chat", "--streaming", "--concurrency", "2",
         "--request-count", str(REQUESTS), "--tokenizer", tok, "--isl", "32",
         "--osl", "16", "--use-server-token-count", "--artifact-dir", art,
         "--ui-type", "none"],
        check=True, stdout=subprocess.DEVNULL)
    for name in ("profile_export_aiperf.json", "profile_export.jsonl"):
        shutil.copy(art / name, OUT / f"aiperf-{AIPERF}-{name}")


def run_vllm(url, tok, work, detailed):
    out = work / ("vllm-detailed" if detailed else "vllm")
    subprocess.run(
        [sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "serve",
         "--backend", "openai-chat", "--base-url", url, "--endpoint", "/v1/chat/completions",
         "--model", "tokenscope-exact", "--tokenizer", tok, "--dataset-name", "random",
         "--random-input-len", "32", "--random-output-len", "16",
         "--num-prompts", str(REQUESTS), "--max-concurrency", "2", "--temperature", "0",
         "--metric-percentiles", "50,90,99", "--percentile-metrics", "ttft,tpot,itl,e2el",
         "--save-result", "--result-dir", out] + (["--save-detailed"] if detailed else []),
        check=True, stdout=subprocess.DEVNULL)
    (result,) = out.glob("*.json")
    name = "result-detailed.json" if detailed else "result.json"
    shutil.copy(result, OUT / f"vllm-{VLLM}-{name}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenscope", required=True, help="the tokenscope binary")
    ap.add_argument("--port", type=int, default=18931)
    ap.add_argument("--schemas-only", action="store_true")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    schemas()
    if args.schemas_only:
        return
    bin_dir = Path(sys.executable).parent
    server = exact_server(os.path.abspath(args.tokenscope), args.port)
    try:
        with tempfile.TemporaryDirectory() as work:
            work = Path(work)
            tok = tiny_tokenizer(str(work / "tok"))
            url = f"http://127.0.0.1:{args.port}"
            run_guidellm(bin_dir, url, tok, work)
            run_aiperf(bin_dir, url, tok, work)
            run_vllm(url, tok, work, detailed=True)
            run_vllm(url, tok, work, detailed=False)
    finally:
        server.terminate()


if __name__ == "__main__":
    main()
