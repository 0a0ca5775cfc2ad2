//! How long one engine step takes on the hardware: a roofline with
//! efficiency factors (docs/engines.md §4):
//!
//! `t = max(FLOPs / (peak × η_c), bytes / (bandwidth × η_m)) + t_allreduce + t_overhead`
//!
//! per GPU, with weights and KV heads split over tensor-parallel GPUs. The
//! overhead is the CPU's share of a step, a cost per sequence, and the
//! fixed GPU time of each layer's small kernels ([`PER_LAYER_S`]).

use super::catalogue::{Gpu, Model};
use serde::{Deserialize, Serialize};

/// Element type of weights or KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    Bf16,
    Fp8,
}

impl Dtype {
    pub fn bytes(self) -> f64 {
        match self {
            Dtype::Bf16 => 2.0,
            Dtype::Fp8 => 1.0,
        }
    }
}

impl std::str::FromStr for Dtype {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "bf16" | "fp16" | "bfloat16" | "float16" => Ok(Dtype::Bf16),
            "fp8" | "float8" => Ok(Dtype::Fp8),
            _ => Err(format!("`{s}`: expected bf16 or fp8")),
        }
    }
}

/// The factors a calibration fits. Defaults are assumptions from the
/// reference (η_m 0.7–0.85, η_c 0.4–0.7, 1–5 ms per step), not
/// measurements — but for the step overhead and each layer's time, fitted
/// together to four published runs ([`PER_LAYER_S`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Efficiency {
    /// Share of peak FLOPS reached (η_c).
    pub compute: f64,
    /// Share of peak memory bandwidth reached (η_m).
    pub memory: f64,
    /// Fixed cost of a step: scheduling, sampling, launches (seconds).
    pub step_overhead_s: f64,
    /// CPU cost per sequence in the step (seconds).
    pub per_sequence_s: f64,
    /// Fixed cost of a request outside the GPU before it can be scheduled:
    /// the HTTP front end, tokenisation, the hop to the engine (seconds).
    /// It adds to TTFT at any load. (0 in profiles fitted before it existed.)
    #[serde(default)]
    pub request_overhead_s: f64,
    /// GPU time per layer per step that the roofline misses (seconds):
    /// see [`PER_LAYER_S`]. Not fitted by `sim calibrate` (for one model it
    /// cannot be told from the step overhead); 0 in profiles saved before
    /// it existed, whose fitted step overhead holds it.
    #[serde(default)]
    pub per_layer_s: f64,
}

/// Fixed GPU time of one layer in every step, whatever its batch (seconds).
///
/// A decoder layer runs about ten kernels per step — two norms, the QKV,
/// output, gate-up and down projections, rotary embedding, the KV-cache
/// write, attention, the activation, the all-reduces — and each pays a few
/// microseconds to launch, fill the GPU and drain, even inside a CUDA graph.
/// The roofline sees only bytes and FLOPs, so without this term a deep
/// model's small-batch step was too fast: Llama-3.1-70B's TPOT read 6–29 %
/// short of every published small-batch figure (SGLang's and vLLM's
/// online runs, NIM at concurrency 1–50).
///
/// 25 µs per layer is fitted, with vLLM V1's CPU step overhead (1.4 ms), to
/// the vLLM nightly benchmark's four batch-of-8 latency runs (8B and 70B,
/// A100 and H200), which separate the per-layer term from the per-step one
/// because the models have 32 and 80 layers (`scripts/validate_sim.py BIN
/// --fit-kernel-time` prints the grid). docs/simulator.md says what it moved
/// elsewhere.
pub const PER_LAYER_S: f64 = 25e-6;

impl Default for Efficiency {
    fn default() -> Self {
        Efficiency {
            compute: 0.55,
            memory: 0.8,
            step_overhead_s: super::preset::Preset::Vllm.step_overhead_s(),
            per_sequence_s: 10e-6,
            request_overhead_s: super::preset::Preset::Vllm.request_overhead_s(),
            per_layer_s: PER_LAYER_S,
        }
    }
}

/// What one step computes, summed over the sequences scheduled in it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepWork {
    /// Sequences in the step (prefill chunks and decodes).
    pub sequences: u32,
    /// New tokens computed (prefill chunk tokens + one per decode).
    pub tokens: u64,
    /// Σ over new tokens of the keys each attends to.
    pub attended: f64,
    /// KV tokens read (context of every scheduled sequence).
    pub kv_read_tokens: f64,
    /// Sequences that need logits (decodes and prefills that finish).
    pub logits: u32,
    /// A multi-step block's later step: scheduled with the block's first,
    /// so it pays no step overhead.
    pub in_block: bool,
    /// Speculative decoding: sequences whose proposer drafted this step,
    /// and their contexts summed (what a draft model's passes read).
    pub drafting: u32,
    pub draft_context: f64,
    /// Images: the vision encoder's FLOPs in this step, and its parameters
    /// (billions; its weights are read once when it runs).
    pub encoder_flops: f64,
    pub encoder_params_b: f64,
}

#[derive(Debug, Clone)]
pub struct CostModel {
    pub model: Model,
    pub gpu: Gpu,
    pub tp: u32,
    pub weights: Dtype,
    pub kv: Dtype,
    pub efficiency: Efficiency,
    /// Speculative decoding: its proposer's passes are part of each step.
    pub spec: Option<super::spec::SpecDecode>,
}

impl CostModel {
    /// Weight bytes on one GPU.
    pub fn weight_bytes_per_gpu(&self) -> f64 {
        self.model.params_b * 1e9 * self.weights.bytes() / self.tp as f64
    }

    /// KV bytes per token on one GPU.
    pub fn kv_bytes_per_token_per_gpu(&self) -> f64 {
        self.model.kv_elements_per_token(self.tp) * self.kv.bytes()
    }

    fn peak_flops(&self) -> f64 {
        let tflops = match self.weights {
            Dtype::Fp8 => self.gpu.fp8_tflops.unwrap_or(self.gpu.bf16_tflops),
            Dtype::Bf16 => self.gpu.bf16_tflops,
        };
        tflops * 1e12
    }

    /// Seconds for one step: one roofline over the step's summed FLOPs and
    /// bytes. Summing a roofline for the dense layers and one for attention
    /// (LLM-Viewer's per-operator sum, docs/engines.md §4: separate kernels, so a
    /// compute-bound batch of matmuls would not hide attention's KV read)
    /// was tried on 2026-12-04 and not kept: with these efficiencies it
    /// moved the validation set by a point, but read TensorRT-LLM's own
    /// throughput table, held out, at a 9 % median error instead of 6 %
    /// (decode-heavy runs on Llama-3.1-8B −21…−25 % instead of −3…−12 %;
    /// docs/simulator.md).
    pub fn step_time(&self, w: &StepWork) -> f64 {
        if w.tokens == 0 {
            return 0.0;
        }
        let m = &self.model;
        let tp = self.tp as f64;
        let head = m.vocab as f64 * m.hidden as f64;
        let active = m.active_params_b * 1e9;
        let non_embedding = (active - 2.0 * head).max(0.5 * active);
        let flops = 2.0 * non_embedding * w.tokens as f64
            + 2.0 * head * w.logits as f64
            + 4.0 * m.layers as f64 * m.attention_width() * w.attended
            + w.encoder_flops;
        // Each token touches its active parameters; at a large enough batch all
        // weights (every expert) are read once per step.
        let touched = (active * w.sequences.max(1) as f64).min(m.params_b * 1e9);
        let encoder_bytes = match w.encoder_flops > 0.0 {
            true => w.encoder_params_b * 1e9 * self.weights.bytes() / tp,
            false => 0.0,
        };
        let bytes = touched * self.weights.bytes() / tp
            + encoder_bytes
            + (w.kv_read_tokens + w.tokens as f64) * self.kv_bytes_per_token_per_gpu();
        let e = &self.efficiency;
        let compute_s = flops / tp / (self.peak_flops() * e.compute);
        let memory_s = bytes / (self.gpu.bandwidth_gbs * 1e9 * e.memory);
        // Two all-reduces per layer of tokens × hidden activations.
        let msg = w.tokens as f64 * m.hidden as f64 * 2.0;
        let allreduce_s = 2.0 * m.layers as f64 * self.allreduce_s(msg);
        let overhead_s = if w.in_block { 0.0 } else { e.step_overhead_s };
        let draft_s = self.draft_time(w);
        compute_s.max(memory_s)
            + allreduce_s
            + overhead_s
            + e.per_sequence_s * w.sequences as f64
            + e.per_layer_s * m.layers as f64
            + draft_s
    }
}

impl CostModel {
    /// Speculative decoding's proposer in a step where `w.drafting`
    /// sequences propose `k` tokens each (`w.draft_context`: their contexts
    /// summed): `k` passes of an EAGLE head or a draft model on this
    /// roofline, or an n-gram lookup's CPU time.
    pub fn draft_time(&self, w: &StepWork) -> f64 {
        use super::spec::{eagle_head, Method, NGRAM_PER_SEQUENCE_S};
        let Some(spec) = self.spec.as_ref().filter(|_| w.drafting > 0) else {
            return 0.0;
        };
        let pass = |model: Model| {
            let cost = CostModel {
                model,
                spec: None,
                ..self.clone()
            };
            let s = w.drafting;
            cost.step_time(&StepWork {
                sequences: s,
                tokens: s as u64,
                attended: w.draft_context,
                kv_read_tokens: w.draft_context,
                logits: s,
                in_block: true,
                ..StepWork::default()
            })
        };
        let k = spec.k as f64;
        match &spec.method {
            Method::Ngram => NGRAM_PER_SEQUENCE_S * w.drafting as f64,
            Method::Eagle => k * pass(eagle_head(&self.model)),
            Method::Draft(m) => k * pass((**m).clone()),
        }
    }
}

/// Seconds per generated token of `batch` sequences decoding at `context`
/// tokens each: one step's time over the tokens it yields a sequence.
pub fn decode_time_per_token(cost: &CostModel, batch: u32, context: f64) -> f64 {
    let (b, k) = (batch.max(1), cost.spec.as_ref().map_or(0, |s| s.k));
    let n = 1 + k;
    let per_seq = n as f64 * context + (n * n) as f64 / 2.0;
    let w = StepWork {
        sequences: b,
        tokens: u64::from(b * n),
        attended: b as f64 * per_seq,
        kv_read_tokens: b as f64 * context,
        logits: b * n,
        drafting: if k > 0 { b } else { 0 },
        draft_context: if k > 0 { b as f64 * context } else { 0.0 },
        ..StepWork::default()
    };
    let yield_ = cost
        .spec
        .as_ref()
        .map_or(1.0, super::spec::SpecDecode::tokens_per_step);
    cost.step_time(&w) / yield_
}

/// The smallest batch (up to `max_batch`) at which speculative decoding no
/// longer makes a token faster than plain decoding, at `context` tokens a
/// sequence; `None` when it pays at every batch the engine admits.
pub fn break_even_batch(cost: &CostModel, context: f64, max_batch: u32) -> Option<u32> {
    let plain = CostModel {
        spec: None,
        ..cost.clone()
    };
    let pays = |b: u32| {
        decode_time_per_token(cost, b, context) < decode_time_per_token(&plain, b, context)
    };
    if pays(max_batch) {
        return None;
    }
    // The gain shrinks as the batch grows: the first batch where it is gone.
    let (mut lo, mut hi) = (0u32, max_batch);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if pays(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(hi)
}

/// Launching a collective, whatever its size or ring (seconds).
pub const COLLECTIVE_LAUNCH_S: f64 = 5e-6;

impl CostModel {
    /// One ring all-reduce of `msg` bytes over the tensor-parallel GPUs:
    /// 2(TP − 1) steps, each a hop's latency plus a 1/TP share of the
    /// message over the link (docs/engines.md §4), after the collective's launch.
    /// The latency term is what a decode step's small messages pay: it grows
    /// with the ring, so TP 4 and 8 cost more per layer than TP 2.
    pub fn allreduce_s(&self, msg: f64) -> f64 {
        if self.tp <= 1 {
            return 0.0;
        }
        let tp = self.tp as f64;
        let steps = 2.0 * (tp - 1.0);
        COLLECTIVE_LAUNCH_S
            + steps * (self.gpu.hop_latency_s() + msg / tp / (self.gpu.link_gbs * 1e9))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::catalogue::Catalogue;

    fn llama8b_h100() -> CostModel {
        let cat = Catalogue::builtin();
        CostModel {
            model: cat.model("llama-3.1-8b").unwrap(),
            gpu: cat.gpu("h100-sxm").unwrap(),
            tp: 1,
            weights: Dtype::Bf16,
            kv: Dtype::Bf16,
            efficiency: Efficiency {
                compute: 1.0,
                memory: 1.0,
                step_overhead_s: 0.0,
                per_sequence_s: 0.0,
                request_overhead_s: 0.0,
                per_layer_s: 0.0,
            },
            spec: None,
        }
    }

    #[test]
    fn decode_is_memory_bound_as_in_the_worked_example() {
        // docs/engines.md §7: B = 64, mean context 1024 → 24.65 GB → 7.4 ms at peak.
        let c = llama8b_h100();
        let w = StepWork {
            sequences: 64,
            tokens: 64,
            attended: 64.0 * 1024.0,
            kv_read_tokens: 64.0 * 1024.0,
            logits: 64,
            ..Default::default()
        };
        let t = c.step_time(&w);
        assert!((t - 7.4e-3).abs() < 0.2e-3, "{t}");
    }

    #[test]
    fn long_prefill_is_compute_bound() {
        // docs/engines.md §7: a 2000-token prompt ≈ 3.3e13 FLOPs → 34 ms at peak; that
        // example counts the embeddings as matmuls, §4's formula (used here) does
        // not, hence ~29 ms.
        let c = llama8b_h100();
        let w = StepWork {
            sequences: 1,
            tokens: 2000,
            attended: 2000.0 * 2000.0 / 2.0,
            kv_read_tokens: 0.0,
            logits: 1,
            ..Default::default()
        };
        let t = c.step_time(&w);
        assert!((0.028..0.035).contains(&t), "{t}");
        let bytes_only = c.weight_bytes_per_gpu() / (c.gpu.bandwidth_gbs * 1e9);
        assert!(
            t > 4.0 * bytes_only,
            "compute, not memory, bounds a long prefill"
        );
    }

    #[test]
    fn fp8_and_tensor_parallelism_speed_up() {
        let base = llama8b_h100();
        let w = StepWork {
            sequences: 8,
            tokens: 8,
            attended: 8000.0,
            kv_read_tokens: 8000.0,
            logits: 8,
            ..Default::default()
        };
        let mut fp8 = base.clone();
        fp8.weights = Dtype::Fp8;
        assert!(fp8.step_time(&w) < 0.6 * base.step_time(&w));
        let mut tp2 = base.clone();
        tp2.tp = 2;
        assert!(tp2.step_time(&w) < base.step_time(&w));
    }

    #[test]
    fn every_layer_adds_its_kernels_time_whatever_the_split() {
        // One decode at batch 1: the layers' fixed time comes on top of the
        // roofline, grows with depth and is not divided by tensor parallelism
        // (every GPU runs every layer's kernels).
        let w = StepWork {
            sequences: 1,
            tokens: 1,
            attended: 512.0,
            kv_read_tokens: 512.0,
            logits: 1,
            ..Default::default()
        };
        let extra = |mut c: CostModel| {
            let bare = c.step_time(&w);
            c.efficiency.per_layer_s = PER_LAYER_S;
            c.step_time(&w) - bare
        };
        let small = llama8b_h100();
        let mut big = llama8b_h100();
        big.model = Catalogue::builtin().model("llama-3.1-70b").unwrap();
        big.tp = 4;
        assert!((extra(small) - 32.0 * PER_LAYER_S).abs() < 1e-12);
        assert!((extra(big) - 80.0 * PER_LAYER_S).abs() < 1e-12);
    }
}
