//! Which server is this, and what do its series mean? Each kind's names are
//! mapped onto one vocabulary, [`Concepts`] (docs/engines.md §8).
//! A concept a server does not expose is `None`, never 0.

use crate::prometheus::Exposition;
use serde::{Deserialize, Serialize};

/// The server kinds tokenscope recognises from metric names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServerKind {
    /// tokenscope's simulated engine (vLLM V1 names plus `tokenscope:engine_info`).
    TokenscopeSim,
    Vllm,
    /// vLLM's V0 engine (`vllm:gpu_cache_usage_perc`, no `kv_cache_usage_perc`).
    VllmV0,
    Sglang,
    Tgi,
    /// Hugging Face text-embeddings-inference (embeddings and rerank).
    Tei,
    LlamaCpp,
    /// Triton Inference Server with the TensorRT-LLM backend.
    TritonTrtllm,
    TrtllmServe,
    /// An NVIDIA DCGM exporter (GPU only).
    Dcgm,
    Unknown,
}

impl ServerKind {
    pub fn name(self) -> &'static str {
        match self {
            ServerKind::TokenscopeSim => "tokenscope-sim",
            ServerKind::Vllm => "vllm",
            ServerKind::VllmV0 => "vllm-v0",
            ServerKind::Sglang => "sglang",
            ServerKind::Tgi => "tgi",
            ServerKind::Tei => "tei",
            ServerKind::LlamaCpp => "llama.cpp",
            ServerKind::TritonTrtllm => "triton-trtllm",
            ServerKind::TrtllmServe => "trtllm-serve",
            ServerKind::Dcgm => "dcgm",
            ServerKind::Unknown => "unknown",
        }
    }
}

/// Recognises the server from its series names.
pub fn detect(e: &Exposition) -> ServerKind {
    if e.has_prefix("tokenscope:") {
        ServerKind::TokenscopeSim
    } else if e.has_prefix("vllm:") {
        if e.has_prefix("vllm:kv_cache_usage_perc") || !e.has_prefix("vllm:gpu_cache_usage_perc") {
            ServerKind::Vllm
        } else {
            ServerKind::VllmV0
        }
    } else if e.has_prefix("sglang:") {
        ServerKind::Sglang
    } else if e.has_prefix("tgi_") {
        ServerKind::Tgi
    } else if e.has_prefix("te_request_") || e.has_prefix("te_queue_size") {
        ServerKind::Tei
    } else if e.has_prefix("llamacpp:") {
        ServerKind::LlamaCpp
    } else if e.has_prefix("nv_trt_llm_") || e.has_prefix("nv_inference_") {
        ServerKind::TritonTrtllm
    } else if e.has_prefix("trtllm_") || e.has_prefix("trtllm:") {
        ServerKind::TrtllmServe
    } else if e.has_prefix("DCGM_FI_") {
        ServerKind::Dcgm
    } else {
        ServerKind::Unknown
    }
}

/// A cumulative histogram as scraped: `(upper bound, cumulative count)`, sum, count.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Hist {
    pub buckets: Vec<(f64, f64)>,
    pub sum: f64,
    pub count: f64,
}

/// One scrape in the common vocabulary. Gauges are instantaneous; counters and
/// histograms are cumulative (the window module takes their deltas).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Concepts {
    pub running: Option<f64>,
    pub waiting: Option<f64>,
    /// Fraction 0–1.
    pub kv_usage: Option<f64>,
    pub kv_capacity_tokens: Option<f64>,
    pub prompt_tokens: Option<f64>,
    pub generation_tokens: Option<f64>,
    pub prefix_hits: Option<f64>,
    pub prefix_queries: Option<f64>,
    pub preemptions: Option<f64>,
    /// Requests the server aborted (vLLM: finished for the reason `abort`,
    /// a client gone among them).
    #[serde(default)]
    pub aborted: Option<f64>,
    /// Histograms in seconds.
    pub queue_time: Option<Hist>,
    pub ttft: Option<Hist>,
    pub itl: Option<Hist>,
    pub e2e: Option<Hist>,
    pub prefill_time: Option<Hist>,
    /// GPU busy by time, percent (NVML / DCGM_FI_DEV_GPU_UTIL definition).
    pub gpu_util_time_pct: Option<f64>,
    /// SM active fraction (DCGM profiling: work done).
    pub gpu_sm_active: Option<f64>,
    pub gpu_memory_used_bytes: Option<f64>,
    pub gpu_memory_total_bytes: Option<f64>,
    pub gpu_power_w: Option<f64>,
    /// Cumulative energy, joules.
    pub gpu_energy_j: Option<f64>,
    /// Speculative decoding's counters and gauges.
    #[serde(default)]
    pub spec: crate::spec_decode::SpecCounters,
}

/// The histogram family `name` (`name_bucket`, `_sum`, `_count`), summed over other labels.
pub fn histogram(e: &Exposition, name: &str) -> Option<Hist> {
    let bucket = format!("{name}_bucket");
    let mut by_le: Vec<(f64, f64)> = Vec::new();
    for s in e.series(&bucket) {
        let le = match s.label("le")? {
            "+Inf" | "Inf" => f64::INFINITY,
            v => v.parse().ok()?,
        };
        match by_le.iter_mut().find(|(b, _)| *b == le) {
            Some(entry) => entry.1 += s.value,
            None => by_le.push((le, s.value)),
        }
    }
    if by_le.is_empty() {
        return None;
    }
    by_le.sort_by(|a, b| a.0.total_cmp(&b.0));
    Some(Hist {
        buckets: by_le,
        sum: e.sum(&format!("{name}_sum")).unwrap_or(0.0),
        count: e.sum(&format!("{name}_count")).unwrap_or(0.0),
    })
}

fn first_of(e: &Exposition, names: &[&str]) -> Option<f64> {
    names.iter().find_map(|n| e.sum(n))
}

/// vLLM's `cache_config_info` labels: capacity = num_gpu_blocks × block_size,
/// summed over the engines of a data-parallel server (one series each).
fn vllm_capacity(e: &Exposition) -> Option<f64> {
    let per_engine = e.series("vllm:cache_config_info").filter_map(|info| {
        let blocks: f64 = info.label("num_gpu_blocks")?.parse().ok()?;
        let size: f64 = info.label("block_size")?.parse().ok()?;
        Some(blocks * size)
    });
    per_engine.fold(None, |sum, c| Some(sum.unwrap_or(0.0) + c))
}

/// Maps one scrape of a `kind` server onto the common vocabulary.
pub fn concepts(kind: ServerKind, e: &Exposition) -> Concepts {
    let mut c = Concepts::default();
    use crate::spec_decode::{read, Source};
    c.spec = match kind {
        ServerKind::Vllm | ServerKind::VllmV0 | ServerKind::TokenscopeSim => read(Source::Vllm, e),
        ServerKind::LlamaCpp => read(Source::LlamaCpp, e),
        ServerKind::Sglang => read(Source::Sglang, e),
        _ => Default::default(),
    };
    match kind {
        ServerKind::Vllm | ServerKind::VllmV0 | ServerKind::TokenscopeSim => {
            c.running = e.sum("vllm:num_requests_running");
            c.waiting = e.sum("vllm:num_requests_waiting");
            // Data parallelism: one series per engine (engine="i"), each
            // with its own cache — usage is their mean, capacity their sum.
            c.kv_usage = ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"]
                .iter()
                .find_map(|n| mean_of(e, n));
            c.kv_capacity_tokens = vllm_capacity(e);
            c.prompt_tokens = e.sum("vllm:prompt_tokens_total");
            c.generation_tokens = e.sum("vllm:generation_tokens_total");
            c.prefix_hits = first_of(
                e,
                &[
                    "vllm:prefix_cache_hits_total",
                    "vllm:gpu_prefix_cache_hits_total",
                ],
            );
            c.prefix_queries = first_of(
                e,
                &[
                    "vllm:prefix_cache_queries_total",
                    "vllm:gpu_prefix_cache_queries_total",
                ],
            );
            c.preemptions = e.sum("vllm:num_preemptions_total");
            c.aborted = labelled(e, "vllm:request_success_total", "finished_reason", "abort");
            c.queue_time = histogram(e, "vllm:request_queue_time_seconds");
            c.ttft = histogram(e, "vllm:time_to_first_token_seconds");
            c.itl = histogram(e, "vllm:inter_token_latency_seconds")
                .or_else(|| histogram(e, "vllm:time_per_output_token_seconds"));
            c.e2e = histogram(e, "vllm:e2e_request_latency_seconds");
            c.prefill_time = histogram(e, "vllm:request_prefill_time_seconds");
        }
        ServerKind::Sglang => {
            c.running = e.sum("sglang:num_running_reqs");
            c.waiting = e.sum("sglang:num_queue_reqs");
            c.kv_usage = e.sum("sglang:token_usage");
            c.kv_capacity_tokens = e.sum("sglang:max_total_num_tokens");
            c.prompt_tokens = e.sum("sglang:prompt_tokens_total");
            c.generation_tokens = e.sum("sglang:generation_tokens_total");
            c.prefix_hits = e.sum("sglang:cached_tokens_total");
            c.prefix_queries = e.sum("sglang:prompt_tokens_total");
            c.preemptions = e.sum("sglang:num_retracted_requests_total");
            c.queue_time = histogram(e, "sglang:queue_time_seconds");
            c.ttft = histogram(e, "sglang:time_to_first_token_seconds");
            c.itl = histogram(e, "sglang:inter_token_latency_seconds");
            c.e2e = histogram(e, "sglang:e2e_request_latency_seconds");
        }
        ServerKind::Tgi => {
            c.running = e.sum("tgi_batch_current_size");
            c.waiting = e.sum("tgi_queue_size");
            c.kv_capacity_tokens = e.sum("tgi_batch_max_total_tokens");
            c.prompt_tokens = e.sum("tgi_request_input_length_sum");
            c.generation_tokens = e.sum("tgi_request_generated_tokens_sum");
            c.queue_time = histogram(e, "tgi_request_queue_duration");
            c.e2e = histogram(e, "tgi_request_duration");
        }
        ServerKind::Tei => {
            // A pooling server: its forward pass is all prefill.
            c.waiting = e.sum("te_queue_size");
            c.prompt_tokens = e.sum("te_request_input_length_sum");
            c.queue_time = histogram(e, "te_request_queue_duration");
            c.prefill_time = histogram(e, "te_request_inference_duration");
            c.e2e = histogram(e, "te_request_duration");
        }
        ServerKind::LlamaCpp => {
            c.running = e.sum("llamacpp:requests_processing");
            c.waiting = e.sum("llamacpp:requests_deferred");
            c.kv_usage = e.sum("llamacpp:kv_cache_usage_ratio");
            c.prompt_tokens = e.sum("llamacpp:prompt_tokens_total");
            c.generation_tokens = e.sum("llamacpp:tokens_predicted_total");
            c.prefix_hits = e.sum("llamacpp:prompt_tokens_cached_total");
            c.prefix_queries = match (c.prefix_hits, c.prompt_tokens) {
                (Some(h), Some(p)) => Some(h + p),
                _ => None,
            };
        }
        ServerKind::TritonTrtllm => {
            let by = |family: &str, key: &str, value: &str| {
                let mut it = e
                    .series(family)
                    .filter(|s| s.label(key) == Some(value))
                    .peekable();
                it.peek()?;
                Some(it.map(|s| s.value).sum::<f64>())
            };
            c.running = by("nv_trt_llm_request_metrics", "request_type", "active");
            c.waiting = by("nv_trt_llm_request_metrics", "request_type", "waiting")
                .or_else(|| e.sum("nv_inference_pending_request_count"));
            c.kv_usage = by(
                "nv_trt_llm_kv_cache_block_metrics",
                "kv_cache_block_type",
                "fraction",
            );
            c.prompt_tokens = e.sum("nv_llm_input_token_len_sum");
            c.generation_tokens = e.sum("nv_llm_output_token_len_sum");
            c.gpu_util_time_pct = e.sum("nv_gpu_utilization").map(|u| u * 100.0);
            c.gpu_memory_used_bytes = e.sum("nv_gpu_memory_used_bytes");
            c.gpu_memory_total_bytes = e.sum("nv_gpu_memory_total_bytes");
            c.gpu_power_w = e.sum("nv_gpu_power_usage");
            c.gpu_energy_j = e.sum("nv_energy_consumption");
        }
        ServerKind::TrtllmServe => {
            c.running = e.sum("trtllm_num_requests_running");
            c.waiting = e.sum("trtllm_num_requests_waiting");
            c.kv_usage = e.sum("trtllm_kv_cache_utilization");
            c.prompt_tokens = e.sum("trtllm_prompt_tokens_total");
            c.generation_tokens = e.sum("trtllm_generation_tokens_total");
            c.queue_time = histogram(e, "trtllm_request_queue_time_seconds");
            c.ttft = histogram(e, "trtllm_time_to_first_token_seconds");
            c.itl = histogram(e, "trtllm_time_per_output_token_seconds");
            c.e2e = histogram(e, "trtllm_e2e_request_latency_seconds");
        }
        ServerKind::Dcgm | ServerKind::Unknown => {}
    }
    // DCGM series can come from any endpoint (a second --metrics-url).
    let mib = 1024.0 * 1024.0;
    if let Some(u) = mean_of(e, "DCGM_FI_DEV_GPU_UTIL") {
        c.gpu_util_time_pct = Some(u);
    }
    if let Some(a) = mean_of(e, "DCGM_FI_PROF_SM_ACTIVE") {
        c.gpu_sm_active = Some(a);
    }
    if let Some(used) = e.sum("DCGM_FI_DEV_FB_USED") {
        c.gpu_memory_used_bytes = Some(used * mib);
        let free = e.sum("DCGM_FI_DEV_FB_FREE").unwrap_or(0.0);
        let reserved = e.sum("DCGM_FI_DEV_FB_RESERVED").unwrap_or(0.0);
        c.gpu_memory_total_bytes = Some((used + free + reserved) * mib);
    }
    if let Some(p) = e.sum("DCGM_FI_DEV_POWER_USAGE") {
        c.gpu_power_w = Some(p);
    }
    if let Some(mj) = e.sum("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION") {
        c.gpu_energy_j = Some(mj / 1000.0);
    }
    c
}

/// Mean over GPUs of a per-GPU gauge.
fn mean_of(e: &Exposition, name: &str) -> Option<f64> {
    let v: Vec<f64> = e.series(name).map(|s| s.value).collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Merges what several endpoints said (the first one that knows a concept wins).
/// The sum of `name`'s series whose `label` is `value`; `None` when none is.
fn labelled(e: &Exposition, name: &str, label: &str, value: &str) -> Option<f64> {
    let mut it = e
        .series(name)
        .filter(|s| s.label(label) == Some(value))
        .peekable();
    it.peek()?;
    Some(it.map(|s| s.value).sum())
}

pub fn merge(parts: &[Concepts]) -> Concepts {
    let mut c = Concepts::default();
    macro_rules! take {
        ($($f:ident),*) => { $( c.$f = parts.iter().find_map(|p| p.$f.clone()); )* };
    }
    take!(
        running,
        waiting,
        kv_usage,
        kv_capacity_tokens,
        prompt_tokens,
        generation_tokens,
        prefix_hits,
        prefix_queries,
        preemptions,
        aborted,
        queue_time,
        ttft,
        itl,
        e2e,
        prefill_time,
        gpu_util_time_pct,
        gpu_sm_active,
        gpu_memory_used_bytes,
        gpu_memory_total_bytes,
        gpu_power_w,
        gpu_energy_j
    );
    // Speculative decoding: the first endpoint that shows any.
    let shows = |s: &crate::spec_decode::SpecCounters| {
        s.drafts.is_some() || s.draft_tokens.is_some() || s.accept_rate.is_some()
    };
    c.spec = parts
        .iter()
        .map(|p| &p.spec)
        .find(|s| shows(s))
        .cloned()
        .unwrap_or_default();
    c
}
