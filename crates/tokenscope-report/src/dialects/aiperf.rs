//! NVIDIA AIPerf's `profile_export_aiperf.json` (GenAI-Perf's
//! `profile_export_genai_perf.json` has the same shape): one entry per
//! metric with its `unit` and stats (`avg`, `min`, `max`, `p50`, `p90`,
//! `p95`, `p99`, `std`, `count`). AIPerf's `inter_token_latency` is per
//! request (E2E − TTFT) ÷ (output tokens − 1): tokenscope's TPOT, not its
//! token-split ITL. The percentiles tokenscope does not keep (p1, p5, p10,
//! p25, p75) are left out, as AIPerf leaves out unset fields.

use serde_json::{json, Value};
use tokenscope_core::results::RunResults;
use tokenscope_core::stats::Summary;

pub fn export(r: &RunResults) -> Value {
    let l = &r.latency;
    let dist = |unit: &str, s: Option<&Summary>| match s {
        None => Value::Null,
        Some(s) => json!({
            "unit": unit, "avg": s.mean, "min": s.min, "max": s.max, "p50": s.p50,
            "p90": s.p90, "p95": s.p95, "p99": s.p99, "std": s.std, "count": s.count,
        }),
    };
    let scalar = |unit: &str, v: f64| json!({"unit": unit, "avg": v});
    let mut out = json!({
        "time_to_first_token": dist("ms", l.ttft_ms.as_ref()),
        "inter_token_latency": dist("ms", l.tpot_ms.as_ref()),
        "inter_chunk_latency": dist("ms", l.icl_ms.as_ref()),
        "request_latency": dist("ms", l.e2e_ms.as_ref()),
        "output_sequence_length": dist("tokens", r.workload.output_tokens_delivered.as_ref()),
        "input_sequence_length": dist("tokens", super::input_lengths(r)),
        "output_token_throughput_per_user": dist("tokens/sec/user", r.throughput.per_user_output_tokens_per_s.as_ref()),
        "output_token_throughput": scalar("tokens/sec", r.throughput.output_tokens_per_s),
        "total_token_throughput": scalar("tokens/sec", r.throughput.total_tokens_per_s),
        "request_throughput": scalar("requests/sec", r.throughput.requests_per_s),
        "request_count": scalar("requests", r.counts.succeeded as f64),
        "error_request_count": scalar("requests", r.counts.failed as f64),
        "benchmark_duration": scalar("sec", r.window.duration_s),
        "input_config": {
            "endpoint": {"url": r.target.url, "model_names": [r.target.model],
                         "type": if r.target.api == "openai-chat" { "chat" } else { "completions" }},
            "loadgen": r.config["load"],
            "tool": format!("tokenscope {}", r.tool.version),
        },
    });
    // AIPerf's TTFO: the first non-reasoning token, when a request reasoned.
    if let Some(s) = &l.answer_start_ms {
        out["time_to_first_output_token"] = dist("ms", Some(s));
    }
    if let Some(fields) = out.as_object_mut() {
        fields.retain(|_, v| !v.is_null());
    }
    out
}
