//! `--engine`: which serving engine's scheduling rules and per-step CPU
//! overhead the simulator follows. The facts behind each are in
//! docs/engines.md (§1 vLLM, §2 SGLang, §3 TensorRT-LLM) and
//! docs/simulator.md; the overheads are assumptions to calibrate
//! (`sim calibrate` fits the step overhead of a measured server).

use std::str::FromStr;

/// TensorRT-LLM's request overhead on one GPU, s: the front end and the
/// C++ executor's intake, no hop between processes. Fitted, with
/// [`TRTLLM_TP_DOUBLING_S`], to NIM's 2024 TensorRT-LLM table at
/// concurrency 1 (72 rows: Llama-3 8B and 70B, A100 and H100, TP 1–8,
/// 200–7,000-token prompts): least squares of the log ratio over a grid of
/// 3–6 ms and 2–5 ms a doubling gave 4 and 3 ms. Llama-3-8B FP8 on one
/// H100 reads TTFT 8.9 ms for 200 tokens there, where the 10 ms default
/// (fitted on SGLang) alone was more. NIM 1.8.0's tables stay held out.
pub const TRTLLM_REQUEST_OVERHEAD_S: f64 = 0.004;
/// TensorRT-LLM's request cost per doubling of the tensor-parallel ranks,
/// s: the leader hands each new request to the other ranks, a broadcast of
/// log2(TP) hops, and they meet before its first step. Fitted with
/// [`TRTLLM_REQUEST_OVERHEAD_S`]: 70B's short prompts at TP 4 and 8 read
/// 10–19 % short without it.
pub const TRTLLM_TP_DOUBLING_S: f64 = 0.003;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Preset {
    /// vLLM V1 (the default): chunked prefill on, prefill and decode tokens
    /// share one step's budget.
    #[default]
    Vllm,
    /// vLLM V0 without chunked prefill: prefills and decodes in separate
    /// steps, prefills first, each prompt whole.
    VllmV0,
    /// SGLang: prefill ("extend") and decode batches run separately
    /// (mixed chunks are opt-in), prefills first, prompts chunked.
    Sglang,
    /// TensorRT-LLM's in-flight batching without chunked context (its
    /// default): prompts whole, mixed with the decodes of one step.
    Trtllm,
    /// Static batching (FasterTransformer, TensorRT-LLM's `--batching_type
    /// static`, and engines benchmarked a batch at a time): a batch's
    /// prompts are prefilled together in one step, it decodes to its last
    /// request's end, and nobody joins it meanwhile: a request's TTFT is its
    /// wait for the batch before plus the whole batch's prefill.
    Static,
}

impl Preset {
    pub const ALL: [Preset; 5] = [
        Preset::Vllm,
        Preset::VllmV0,
        Preset::Sglang,
        Preset::Trtllm,
        Preset::Static,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Preset::Vllm => "vllm",
            Preset::VllmV0 => "vllm-v0",
            Preset::Sglang => "sglang",
            Preset::Trtllm => "trtllm",
            Preset::Static => "static",
        }
    }

    /// (chunked prefill, prefill and decode in one step).
    pub fn rules(self) -> (bool, bool) {
        match self {
            Preset::Vllm => (true, true),
            Preset::VllmV0 => (false, false),
            Preset::Sglang => (true, false),
            Preset::Trtllm => (false, true),
            Preset::Static => (false, false),
        }
    }

    /// CPU time around each GPU step, s (before calibration; the layers'
    /// fixed GPU time, `cost::PER_LAYER_S`, comes on top):
    /// - vLLM V1: 1.4 ms, fitted with the per-layer time to the vLLM
    ///   nightly benchmark's batch-of-8 runs (2 ms before that term existed).
    /// - vLLM V0: 5 ms. Before 0.6.0 the CPU work around each step was
    ///   vLLM's main cost: the 0.6.0 release cut it for 2.7× the throughput
    ///   on Llama-8B/H100, and GPU power rose from ~60 % to ~95 % of its
    ///   limit (Lambda's benchmark) — ~40 % of a ~10 ms step idle.
    /// - SGLang: 1 ms. Its overlap scheduler prepares step n + 1 on the CPU
    ///   while the GPU runs step n.
    /// - TensorRT-LLM: 1 ms. Its C++ executor batches and launches without
    ///   Python in the loop.
    pub fn step_overhead_s(self) -> f64 {
        match self {
            Preset::Vllm => 0.0014,
            Preset::VllmV0 => 0.005,
            Preset::Sglang | Preset::Trtllm | Preset::Static => 0.001,
        }
    }

    /// What each request pays once per extra tensor-parallel rank before
    /// its prefill runs, s: the engine hands every new request to each
    /// rank (its token ids and sampling state, pickled and broadcast by
    /// Python in vLLM and SGLang, sent by the C++ executor's leader in
    /// TensorRT-LLM) and the ranks meet before the first step that runs it.
    /// Fitted to the validation set's tensor-parallel runs at low load
    /// (docs/simulator.md): vLLM V1's nightly 70B TP 4 at 1 req/s read
    /// TTFT 32 % short without it, the SGLang team's 70B TP 4 runs 15–28 %
    /// short (SGLang 0.3, vLLM 0.6). TensorRT-LLM's grows with the
    /// broadcast's hops, log2(TP), not the ranks ([`TRTLLM_TP_DOUBLING_S`]).
    pub fn tp_request_overhead_s(self, tp: u32) -> f64 {
        let tp = tp.max(1) as f64;
        match self {
            Preset::Vllm => 0.006 * (tp - 1.0),
            Preset::VllmV0 => 0.010 * (tp - 1.0),
            Preset::Sglang => 0.003 * (tp - 1.0),
            Preset::Trtllm => TRTLLM_TP_DOUBLING_S * tp.log2(),
            Preset::Static => 0.0,
        }
    }

    /// The front end's fixed cost of a request before the scheduler sees
    /// it (`Efficiency::request_overhead_s`, which `sim calibrate` fits), s:
    /// 10 ms (fitted on SGLang's TTFT; vLLM's and the others' are not told
    /// apart by the validation set), TensorRT-LLM's 4 ms
    /// ([`TRTLLM_REQUEST_OVERHEAD_S`]).
    pub fn request_overhead_s(self) -> f64 {
        match self {
            Preset::Trtllm => TRTLLM_REQUEST_OVERHEAD_S,
            _ => 0.010,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Preset::Vllm => "vLLM V1 scheduler model: chunked prefill, mixed steps",
            Preset::VllmV0 => "vLLM V0 scheduler model: whole prompts, prefill steps first",
            Preset::Sglang => "SGLang scheduler model: chunked prefill, prefill batches first",
            Preset::Trtllm => "TensorRT-LLM scheduler model: whole prompts, in-flight batching",
            Preset::Static => {
                "static batching: a batch's prompts prefilled together, no one joins until it ends"
            }
        }
    }
}

impl FromStr for Preset {
    type Err = String;
    fn from_str(s: &str) -> Result<Preset, String> {
        Preset::ALL
            .into_iter()
            .find(|p| p.name() == s.to_ascii_lowercase())
            .ok_or_else(|| format!("`{s}`: expected vllm, vllm-v0, sglang, trtllm or static"))
    }
}

impl serde::Serialize for Preset {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}
