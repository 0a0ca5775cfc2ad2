//! The simulated engine: a vLLM-V1-like scheduler ([`scheduler`]) over a paged
//! KV cache ([`kv`]), timed by a roofline cost model ([`cost`]) of a model and
//! a GPU from the [`catalogue`]. [`Engine`] ties them together and is driven
//! by a clock: virtual for `sim plan`, real for `sim serve`.

pub mod catalogue;
pub mod cost;
pub mod kv;
pub mod preset;
pub mod scheduler;
pub mod spec;

use catalogue::{Gpu, Model};
use cost::{CostModel, Dtype, Efficiency};
use kv::KvCache;
use scheduler::{Limits, Scheduler, Seq, StepResult};
use serde::Serialize;

/// Everything that defines a deployment.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub model: Model,
    pub gpu: Gpu,
    pub tp: u32,
    pub weights: Dtype,
    pub kv_dtype: Dtype,
    pub gpu_memory_utilization: f64,
    /// `None`: vLLM's default for the GPU.
    pub max_num_seqs: Option<u32>,
    pub max_num_batched_tokens: Option<u32>,
    /// vLLM's `--scheduling-policy priority` (else first come, first served).
    pub priority_scheduling: bool,
    pub block_size: u32,
    pub prefix_caching: bool,
    /// Activations, CUDA context, graphs: memory that is neither weights nor
    /// KV (GiB per GPU). `None`: modelled from the step's token budget
    /// ([`EngineConfig::reserved_gib`]).
    pub reserved_gib: Option<f64>,
    pub efficiency: Efficiency,
    /// Whose scheduling rules (`--engine`).
    pub engine: preset::Preset,
    /// Decode steps scheduled at once (vLLM 0.6's `--num-scheduler-steps`; 1: off).
    pub num_scheduler_steps: u32,
    /// `--spec-decode`: speculative decoding.
    pub spec: Option<spec::SpecDecode>,
}

impl EngineConfig {
    pub fn new(model: Model, gpu: Gpu) -> Self {
        let block_size = if model.mla.is_some() { 64 } else { 16 };
        EngineConfig {
            model,
            gpu,
            tp: 1,
            weights: Dtype::Bf16,
            kv_dtype: Dtype::Bf16,
            gpu_memory_utilization: 0.9,
            max_num_seqs: None,
            max_num_batched_tokens: None,
            priority_scheduling: false,
            block_size,
            prefix_caching: true,
            reserved_gib: None,
            efficiency: Efficiency::default(),
            engine: preset::Preset::default(),
            num_scheduler_steps: 1,
            spec: None,
        }
    }

    /// Follows `engine`'s rules, with its preset's step and request
    /// overheads (not for a calibrated profile, whose own are fitted).
    pub fn set_engine(&mut self, engine: preset::Preset) {
        self.engine = engine;
        self.efficiency.step_overhead_s = engine.step_overhead_s();
        self.efficiency.request_overhead_s = engine.request_overhead_s();
    }

    /// vLLM's defaults for `vllm serve` (docs/engines.md §1): large GPUs other than A100 get more.
    fn big_gpu(&self) -> bool {
        self.gpu.memory_gib >= 70.0 && !self.gpu.name.to_ascii_lowercase().contains("a100")
    }

    pub fn limits(&self) -> Limits {
        let (chunked_prefill, mixed_steps) = self.engine.rules();
        // TensorRT-LLM's `max_num_tokens` is 8192 on every GPU.
        let budget = match self.engine {
            preset::Preset::Trtllm => 8192,
            _ if self.big_gpu() => 8192,
            _ => 2048,
        };
        // V0's default was 256 on every GPU; V1 raised it on large ones.
        let seqs = match self.engine {
            preset::Preset::VllmV0 => 256,
            _ if self.big_gpu() => 1024,
            _ => 256,
        };
        Limits {
            max_num_seqs: self.max_num_seqs.unwrap_or(seqs),
            max_num_batched_tokens: self.max_num_batched_tokens.unwrap_or(budget),
            chunked_prefill,
            mixed_steps,
            multi_step: self.num_scheduler_steps.max(1),
            static_batch: self.engine == preset::Preset::Static,
            priority_scheduling: self.priority_scheduling,
        }
    }

    pub fn cost_model(&self) -> CostModel {
        CostModel {
            model: self.model.clone(),
            gpu: self.gpu.clone(),
            tp: self.tp,
            weights: self.weights,
            kv: self.kv_dtype,
            efficiency: self.efficiency,
            spec: self.spec.clone(),
        }
    }

    /// Memory per GPU that is neither weights nor KV (GiB). vLLM sizes its
    /// KV cache after profiling one forward pass over the whole token budget
    /// (docs/engines.md §1), so what it sets aside grows with that budget: ~1 GiB
    /// of CUDA context, NCCL buffers and graphs, the pass's activations
    /// (~16 values of `hidden` per token in flight, BF16, split over TP),
    /// and a full batch's FP32 logits. ~2.5 GiB for Llama-3.1-8B on an H100
    /// (docs/engines.md §7: 2–4), ~1.4 GiB on a 24 GB card's smaller budget.
    pub fn reserved_gib(&self) -> f64 {
        if let Some(r) = self.reserved_gib {
            return r;
        }
        let l = self.limits();
        let tp = self.tp as f64;
        let activations = l.max_num_batched_tokens as f64 * self.model.hidden as f64 * 16.0 * 2.0;
        let logits = l.max_num_seqs as f64 * self.model.vocab as f64 * 4.0;
        1.0 + (activations + logits) / tp / 1024f64.powi(3)
    }

    /// KV blocks per GPU: (memory × utilisation − weights − reserved) ÷ block bytes.
    pub fn kv_blocks(&self) -> Result<u64, String> {
        let cost = self.cost_model();
        let gib = 1024f64.powi(3);
        let available = self.gpu.memory_gib * gib * self.gpu_memory_utilization
            - cost.weight_bytes_per_gpu()
            - self.reserved_gib() * gib;
        let block_bytes = cost.kv_bytes_per_token_per_gpu() * self.block_size as f64;
        if available < block_bytes {
            return Err(format!(
                "{} does not fit on {} × {} at {:.0} % memory: weights need {:.1} GiB per GPU of {:.1} GiB usable",
                self.model.name,
                self.tp,
                self.gpu.name,
                self.gpu_memory_utilization * 100.0,
                cost.weight_bytes_per_gpu() / gib,
                self.gpu.memory_gib * self.gpu_memory_utilization - self.reserved_gib()
            ));
        }
        Ok((available / block_bytes).floor() as u64)
    }

    /// The longest request (prompt and answer) the engine takes: the model's
    /// context, or what its KV cache holds when that is less — as if started
    /// with that `--max-model-len` (vLLM refuses to start when one sequence
    /// of the model's whole context cannot fit its cache). A longer request
    /// is refused (400), as a server refuses it; one let in would wait
    /// forever for blocks that never come free.
    pub fn max_model_len(&self) -> u64 {
        let cache = self.kv_blocks().unwrap_or(0) * self.block_size as u64;
        (self.model.max_context as u64).min(cache)
    }

    /// Why a request of `prompt` tokens that may write `answer` is refused
    /// (vLLM's words), or `None` when it is within `max_len`
    /// ([`EngineConfig::max_model_len`]). `sim plan` and `sim serve` refuse
    /// alike.
    pub fn too_long(max_len: u64, prompt: u64, answer: u64) -> Option<String> {
        (prompt + answer > max_len).then(|| format!(
            "This model's maximum context length is {max_len} tokens. However, you requested {} tokens ({prompt} in the messages, {answer} in the completion)",
            prompt + answer
        ))
    }

    /// Tensor parallelism splits the attention heads evenly over the GPUs,
    /// and the KV heads too (or copies each to TP ÷ KV heads GPUs when there
    /// are fewer): vLLM refuses a TP that does neither, and so does this.
    pub fn check_tp(&self) -> Result<(), String> {
        let fits = |tp: u32| {
            let kv = self.model.kv_heads.max(1);
            let kv_split = match self.model.mla {
                Some(_) => true, // one latent KV shared by every head
                None if kv >= tp => kv.is_multiple_of(tp),
                None => tp.is_multiple_of(kv),
            };
            self.model.heads.is_multiple_of(tp) && kv_split
        };
        if fits(self.tp) {
            return Ok(());
        }
        let (heads, kv) = (self.model.heads, self.model.kv_heads);
        let fitting: Vec<String> = (1..=heads.min(16))
            .filter(|&t| fits(t))
            .map(|t| t.to_string())
            .collect();
        Err(format!(
            "TP {} does not split {}'s {heads} attention heads and {kv} KV heads evenly (vLLM refuses it); it takes TP {}",
            self.tp,
            self.model.name,
            fitting.join(", ")
        ))
    }

    /// A one-line description for reports.
    pub fn describe(&self) -> String {
        let mut engine = match self.engine {
            preset::Preset::Vllm => String::new(),
            e => format!(", {} rules", e.name()),
        };
        if self.num_scheduler_steps > 1 {
            engine += &format!(", {} scheduler steps", self.num_scheduler_steps);
        }
        if let Some(s) = &self.spec {
            engine += &format!(", {}", s.describe());
        }
        format!(
            "{} {} on {} × {} (TP {}), KV {}, {:.0} % memory{engine}",
            self.model.name,
            format!("{:?}", self.weights).to_lowercase(),
            self.tp,
            self.gpu.name,
            self.tp,
            format!("{:?}", self.kv_dtype).to_lowercase(),
            self.gpu_memory_utilization * 100.0
        )
    }
}

/// The engine's state as its metrics show it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct EngineState {
    pub running: usize,
    pub waiting: usize,
    pub kv_usage: f64,
    pub preemptions_total: u64,
}

pub struct Engine {
    pub config: EngineConfig,
    pub cost: CostModel,
    pub scheduler: Scheduler,
}

impl Engine {
    pub fn new(config: EngineConfig) -> Result<Engine, String> {
        let blocks = config.kv_blocks()?;
        let kv = KvCache::new(blocks, config.block_size, config.prefix_caching);
        let mut scheduler = Scheduler::new(config.limits(), kv);
        scheduler.spec = config.spec.clone();
        if let Some(s) = &config.spec {
            scheduler.spec_stats.accepted_per_position = vec![0; s.k as usize];
        }
        Ok(Engine {
            cost: config.cost_model(),
            scheduler,
            config,
        })
    }

    pub fn add(&mut self, seq: Seq) {
        self.scheduler.add(seq);
    }

    pub fn is_idle(&self) -> bool {
        self.scheduler.is_idle()
    }

    pub fn abort(&mut self, id: u64) -> bool {
        self.scheduler.abort(id)
    }

    pub fn state(&self) -> EngineState {
        EngineState {
            running: self.scheduler.running.len(),
            waiting: self.scheduler.waiting.len(),
            kv_usage: self.scheduler.kv.usage(),
            preemptions_total: self.scheduler.preemptions_total,
        }
    }

    /// Speculative decoding's counts so far (vLLM's counters).
    pub fn spec_stats(&self) -> Option<&scheduler::SpecStats> {
        self.scheduler
            .spec
            .as_ref()
            .map(|_| &self.scheduler.spec_stats)
    }

    /// Plans a step at `now`; returns its duration (0 when there is nothing to do).
    pub fn begin_step(&mut self, now: f64) -> (f64, cost::StepWork) {
        let work = self.scheduler.plan(now);
        (self.cost.step_time(&work), work)
    }

    /// Completes the step begun with [`Engine::begin_step`], once it has ended.
    pub fn end_step(&mut self, work: cost::StepWork) -> StepResult {
        self.scheduler.finish_step(work)
    }

    /// Gives a read step result back, so the next step reuses its buffers.
    pub fn recycle(&mut self, used: StepResult) {
        self.scheduler.recycle(used);
    }
}
