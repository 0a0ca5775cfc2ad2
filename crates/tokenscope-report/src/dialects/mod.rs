//! A run's results in the JSON dialects of the peers' tools, so a run (or a
//! merged run) plugs into dashboards built for them. One file per dialect;
//! each says which fields it fills, what they are here, and what has no
//! counterpart (docs/exports.md has the whole mapping).

pub mod aiperf;
pub mod guidellm;
pub mod vllm;

use tokenscope_core::results::RunResults;
use tokenscope_core::stats::{Distribution, Summary};

/// Per-request figures the summary does not hold, read once from
/// `requests.jsonl` (measured requests; failures as their messages).
#[derive(Default)]
pub struct PerRequest {
    pub ttft_s: Vec<f64>,
    pub input_tokens: Vec<u64>,
    pub output_tokens: Vec<u64>,
    /// One per measured request, "" for a success (vLLM's `errors`).
    pub errors: Vec<String>,
    /// E2E ÷ output tokens, ms: GuideLLM's time per output token (the first token included).
    pub e2e_per_token_ms: Distribution,
}

impl PerRequest {
    pub fn read(dir: &std::path::Path) -> Result<PerRequest, crate::run_dir::ReadError> {
        let mut p = PerRequest::default();
        crate::run_dir::for_each_record(dir, |r| {
            if r.warmup {
                return;
            }
            p.errors.push(r.error.clone().unwrap_or_default());
            if !r.succeeded() {
                return;
            }
            if let Some(t) = r.ttft_us() {
                p.ttft_s.push(t as f64 / 1e6);
            }
            let input = r.input_tokens.unwrap_or(0);
            p.input_tokens.push(input);
            p.output_tokens.push(r.output_tokens);
            if r.output_tokens > 0 {
                let e2e_ms = r.done_at_us.saturating_sub(r.sent_at_us) as f64 / 1e3;
                p.e2e_per_token_ms.record(e2e_ms / r.output_tokens as f64);
            }
        })?;
        Ok(p)
    }
}

/// Prompt lengths as the server counted them (the workload's fidelity
/// figures), else as the client built them.
pub(crate) fn input_lengths(r: &RunResults) -> Option<&Summary> {
    let w = &r.workload;
    w.input_tokens_served
        .as_ref()
        .or(w.input_tokens_asked.as_ref())
}

/// A summary's value at a stat, or `null`.
pub(crate) fn stat(s: Option<&Summary>, f: impl Fn(&Summary) -> f64) -> serde_json::Value {
    s.map_or(serde_json::Value::Null, |s| serde_json::json!(f(s)))
}
