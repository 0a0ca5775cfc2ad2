//! vLLM's `vllm bench serve --save-result` JSON (`benchmark_serving.py`):
//! the run's figures under vLLM's names and units — latencies in ms as
//! `mean_/median_/std_/pNN_{ttft,tpot,itl,e2el}_ms`, per-request `ttfts` in
//! seconds, `request_rate` "inf" for a closed loop. vLLM's `itls` (every
//! gap of every request) and `generated_texts` are left out: tokenscope keeps
//! neither, so that memory stays flat in the run's length.

use super::{stat, PerRequest};
use serde_json::{json, Map, Value};
use tokenscope_core::results::RunResults;
use tokenscope_core::stats::Summary;

pub fn export(r: &RunResults, per: &PerRequest) -> Value {
    let load = &r.config["load"];
    let closed = load["mode"] == "closed";
    let rate = match load["rate"].as_f64() {
        Some(rate) if !closed => json!(rate),
        _ => json!("inf"),
    };
    let burstiness = match load["arrival"].as_str() {
        Some("poisson") => json!(1.0),
        Some(a) => a
            .strip_prefix("gamma:")
            .and_then(|k| k.parse::<f64>().ok())
            .map_or(Value::Null, |k| json!(k)),
        None => Value::Null,
    };
    let max_concurrency = match closed {
        true => load["concurrency"].clone(),
        false => load["max_concurrency"].clone(),
    };
    let mut out = json!({
        "date": date(&r.started_at),
        "backend": if r.target.api == "openai-chat" { "openai-chat" } else { "openai" },
        "model_id": r.target.model,
        "tokenizer_id": r.config["tokenizer"]["name"],
        "num_prompts": r.counts.requests,
        "request_rate": rate,
        "burstiness": burstiness,
        "max_concurrency": max_concurrency,
        "duration": r.window.duration_s,
        "completed": r.counts.succeeded,
        "failed": r.counts.failed,
        "total_input_tokens": r.tokens.input_total,
        "total_output_tokens": r.tokens.output_total,
        "request_throughput": r.throughput.requests_per_s,
        "request_goodput": r.throughput.goodput_requests_per_s,
        "output_throughput": r.throughput.output_tokens_per_s,
        "total_token_throughput": r.throughput.total_tokens_per_s,
        "max_concurrent_requests": r.throughput.concurrency.max,
        "input_lens": per.input_tokens,
        "output_lens": per.output_tokens,
        "ttfts": per.ttft_s,
        "errors": per.errors,
    });
    let l = &r.latency;
    let metrics: [(&str, Option<&Summary>); 4] = [
        ("ttft", l.ttft_ms.as_ref()),
        ("tpot", l.tpot_ms.as_ref()),
        ("itl", l.itl_ms.as_ref()),
        ("e2el", l.e2e_ms.as_ref()),
    ];
    let fields = out.as_object_mut().expect("an object");
    for (name, s) in metrics {
        put(fields, name, s);
    }
    out
}

/// vLLM's stats of one metric: mean, median, std and its percentiles.
fn put(fields: &mut Map<String, Value>, name: &str, s: Option<&Summary>) {
    fields.insert(format!("mean_{name}_ms"), stat(s, |s| s.mean));
    fields.insert(format!("median_{name}_ms"), stat(s, |s| s.p50));
    fields.insert(format!("std_{name}_ms"), stat(s, |s| s.std));
    for (p, f) in [
        ("p50", (|s: &Summary| s.p50) as fn(&Summary) -> f64),
        ("p90", |s| s.p90),
        ("p95", |s| s.p95),
        ("p99", |s| s.p99),
        ("p99.9", |s| s.p999),
    ] {
        fields.insert(format!("{p}_{name}_ms"), stat(s, f));
    }
}

/// vLLM's `YYYYMMDD-HHMMSS` from an RFC 3339 start.
fn date(started_at: &str) -> String {
    let digits: String = started_at
        .chars()
        .filter(char::is_ascii_digit)
        .take(14)
        .collect();
    match digits.len() {
        14 => format!("{}-{}", &digits[..8], &digits[8..]),
        _ => started_at.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_take_vllms_form() {
        assert_eq!(super::date("2026-12-03T10:04:05.123Z"), "20261203-100405");
        assert_eq!(super::date("unknown"), "unknown");
    }
}
