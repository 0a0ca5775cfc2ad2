//! GuideLLM's `benchmarks.json`: one generative benchmark whose `metrics`
//! hold distribution summaries (`mean`, `median`, `std_dev`, `variance`,
//! `min`, `max`, `count`, `total_sum`, `percentiles`) of the successful
//! requests, under GuideLLM's names. Its `time_per_output_token_ms` is per
//! request E2E ÷ output tokens (the first token included) and its
//! `inter_token_latency_ms` is (E2E − TTFT) ÷ (output tokens − 1):
//! tokenscope's TPOT. Rates over time (`requests_per_second`,
//! `output_tokens_per_second` as distributions) are given as the run's
//! single figure in `mean` and `median`.

use super::PerRequest;
use serde_json::{json, Value};
use tokenscope_core::results::RunResults;
use tokenscope_core::stats::Summary;

pub fn export(r: &RunResults, per: &PerRequest) -> Value {
    let l = &r.latency;
    let scale = |s: Option<&Summary>, k: f64| successful(s.map(|s| scaled(s, k)).as_ref());
    let rate = |v: f64| {
        successful(Some(&Summary {
            count: 1,
            mean: v,
            p50: v,
            p90: v,
            p95: v,
            p99: v,
            p999: v,
            min: v,
            max: v,
            std: 0.0,
        }))
    };
    let load = &r.config["load"];
    let profile = match load["mode"].as_str() {
        Some("closed") => json!({"type_": "concurrent", "streams": [load["concurrency"]]}),
        _ => {
            json!({"type_": load["arrival"].as_str().unwrap_or("poisson"), "rate": [load["rate"]]})
        }
    };
    let mut out = json!({
        "benchmarks": [{
            "type_": "generative_benchmark",
            "run_id": r.started_at,
            "args": {"profile": profile, "target": r.target.url, "model": r.target.model},
            "duration": r.window.duration_s,
            "request_totals": {
                "successful": r.counts.succeeded,
                "errored": r.counts.failed,
                "incomplete": 0,
                "total": r.counts.requests,
            },
            "metrics": {
                "requests_per_second": rate(r.throughput.requests_per_s),
                "request_concurrency": rate(r.throughput.concurrency.mean),
                "request_latency": scale(l.e2e_ms.as_ref(), 1e-3),
                "prompt_token_count": successful(super::input_lengths(r)),
                "output_token_count": successful(r.workload.output_tokens_delivered.as_ref()),
                "time_to_first_token_ms": scale(l.ttft_ms.as_ref(), 1.0),
                "time_per_output_token_ms": successful(per.e2e_per_token_ms.summary(1.0).as_ref()),
                "inter_token_latency_ms": scale(l.tpot_ms.as_ref(), 1.0),
                "output_tokens_per_second": rate(r.throughput.output_tokens_per_s),
                "tokens_per_second": rate(r.throughput.total_tokens_per_s),
            },
        }],
    });
    // GuideLLM's time to first output token: the first answer token, when a request reasoned.
    if let Some(s) = &l.answer_start_ms {
        out["benchmarks"][0]["metrics"]["time_to_first_output_token_ms"] = scale(Some(s), 1.0);
    }
    out
}

/// GuideLLM's status breakdown, of the successful requests.
fn successful(s: Option<&Summary>) -> Value {
    json!({"successful": s.map_or(Value::Null, summary)})
}

fn summary(s: &Summary) -> Value {
    json!({
        "mean": s.mean, "median": s.p50, "std_dev": s.std, "variance": s.std * s.std,
        "min": s.min, "max": s.max, "count": s.count, "total_sum": s.mean * s.count as f64,
        "percentiles": {"p50": s.p50, "p90": s.p90, "p95": s.p95, "p99": s.p99, "p999": s.p999},
    })
}

fn scaled(s: &Summary, k: f64) -> Summary {
    Summary {
        count: s.count,
        mean: s.mean * k,
        std: s.std * k,
        min: s.min * k,
        p50: s.p50 * k,
        p90: s.p90 * k,
        p95: s.p95 * k,
        p99: s.p99 * k,
        p999: s.p999 * k,
        max: s.max * k,
    }
}
