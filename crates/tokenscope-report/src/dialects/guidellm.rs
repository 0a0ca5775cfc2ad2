//! GuideLLM's `benchmarks.json` (its `GenerativeBenchmarksReport`, v2):
//! one generative benchmark whose `metrics` are status breakdowns
//! (successful, errored, incomplete, total) of distribution summaries,
//! recomputed from the requests as GuideLLM computes them: weighted values
//! (time per output token by its tokens, inter-token latency by the tokens
//! after the first), percentiles p0.1–p99.9 from the running share, the
//! mode, the population variance, `count` the weights' sum.
//!
//! GuideLLM's definitions: `time_per_output_token_ms` is (last token −
//! start) ÷ tokens, the first token included; `inter_token_latency_ms` is
//! (last token − first token) ÷ (tokens − 1), tokenscope's TPOT. What
//! tokenscope does not measure is GuideLLM's own "absent": an empty
//! distribution (every figure 0, `count` 0) — words, characters, media,
//! the websocket round trips. Its rates over time (`requests_per_second`,
//! `output_tokens_per_second`, concurrency) are given as the run's one
//! figure (`count` 1), and no per-request samples are kept (`sample_size`
//! 0, as GuideLLM writes it when asked for none).

use super::samples::{Sample, Values, Weighted};
use serde_json::{json, Value};
use tokenscope_core::results::RunResults;

const PERCENTILES: [(&str, f64); 11] = [
    ("p001", 0.001),
    ("p01", 0.01),
    ("p05", 0.05),
    ("p10", 0.1),
    ("p25", 0.25),
    ("p50", 0.5),
    ("p75", 0.75),
    ("p90", 0.9),
    ("p95", 0.95),
    ("p99", 0.99),
    ("p999", 0.999),
];

pub fn export(r: &RunResults, samples: &[Sample]) -> Value {
    json!({
        "metadata": {"version": 2},
        "config": {"metadata": {"labels": {}}, "spec": spec(r, samples),
            // GuideLLM's own: one entry per benchmark, null for no overrides.
            "benchmarks": [null]},
        "benchmarks": [benchmark(r, samples)],
        "conclusions": [],
    })
}

/// The arguments GuideLLM would have been given: backend, profile, data.
fn spec(r: &RunResults, samples: &[Sample]) -> Value {
    let c = &r.config;
    // The asked length, else (a distribution of lengths) the mean sent.
    let length = |set: &Value, f: fn(&Sample) -> u64| {
        super::number(set)
            .unwrap_or_else(|| Values::new(samples.iter().map(|s| f(s) as f64)).mean())
            .round() as u64
    };
    let data = match c["dataset"].as_str() {
        Some(path) if path.ends_with(".json") || path.ends_with(".jsonl") => {
            json!({"kind": "json_file", "path": path})
        }
        Some(path) => json!({"kind": "text_file", "path": path}),
        None => json!({
            "kind": "synthetic_text",
            "prompt_tokens": length(&c["input_tokens"], |s| s.input_tokens.unwrap_or(0)),
            "output_tokens": length(&c["output_tokens"], |s| s.output_tokens),
        }),
    };
    json!({
        "backend": backend(r),
        "profile": strategy(r).1,
        "data": [data],
    })
}

fn backend(r: &RunResults) -> Value {
    json!({"kind": "openai_http", "target": r.target.url, "model": r.target.model})
}

fn benchmark(r: &RunResults, samples: &[Sample]) -> Value {
    let start = super::epoch_s(r) + r.window.start_s;
    let end = super::epoch_s(r) + r.window.end_s;
    json!({
        "type_": "generative_benchmark",
        "config": config(r),
        "scheduler_state": scheduler_state(r, start, end),
        "scheduler_metrics": scheduler_metrics(r, samples, start, end),
        "metrics": metrics(r, samples),
        "requests": {"successful": [], "errored": [], "incomplete": [], "total": null},
        "warnings": [],
        "start_time": start,
        "end_time": end,
        "duration": r.window.duration_s,
        "warmup_duration": 0.0,
        "cooldown_duration": 0.0,
    })
}

/// The strategy and profile GuideLLM would have run: `concurrent` with
/// its streams, or the arrival process at its rate.
fn strategy(r: &RunResults) -> (Value, Value) {
    let load = &r.config["load"];
    match load["mode"].as_str() {
        Some("closed") => {
            let n = &load["concurrency"];
            (
                json!({"type_": "concurrent", "streams": n, "max_concurrency": n}),
                json!({"kind": "concurrent", "streams": [n]}),
            )
        }
        _ => {
            let kind = match load["arrival"].as_str() {
                Some("constant") => "constant",
                _ => "poisson",
            };
            let rate = &load["rate"];
            (
                json!({"type_": kind, "rate": rate, "max_concurrency": load["max_concurrency"]}),
                json!({"kind": kind, "rate": [rate], "max_concurrency": load["max_concurrency"]}),
            )
        }
    }
}

/// The benchmark's own config: its strategy, no constraints recorded, no samples kept.
fn config(r: &RunResults) -> Value {
    let (strategy, profile) = strategy(r);
    json!({
        "run_id": super::run_id(r),
        "run_index": 0,
        "strategy": strategy,
        "constraints": {},
        "sample_size": 0,
        "profile": profile,
        "requests": {},
        "backend": backend(r),
        "environment": {"exported_by": format!("tokenscope {}", r.tool.version)},
    })
}

fn scheduler_state(r: &RunResults, start: f64, end: f64) -> Value {
    let c = &r.counts;
    json!({
        "start_time": start,
        "end_time": end,
        "start_requests_time": start,
        "end_requests_time": end,
        "created_requests": c.requests,
        "processed_requests": c.requests,
        "successful_requests": c.succeeded,
        "errored_requests": c.failed,
    })
}

/// GuideLLM's scheduler timings: the stages tokenscope has (the lag behind
/// the schedule, the request's time) measured, its worker hand-offs 0.
fn scheduler_metrics(r: &RunResults, samples: &[Sample], start: f64, end: f64) -> Value {
    let lag = Values::new(samples.iter().map(|s| s.lag_s));
    let time = Values::new(samples.iter().map(|s| s.e2e_s));
    let c = &r.counts;
    json!({
        "start_time": start, "request_start_time": start, "measure_start_time": start,
        "measure_end_time": end, "request_end_time": end, "end_time": end,
        "requests_made": {"successful": c.succeeded, "errored": c.failed, "incomplete": c.abandoned,
            "total": c.requests},
        "queued_time_avg": 0.0, "resolve_start_delay_avg": 0.0,
        "resolve_targeted_start_delay_avg": lag.mean(), "request_start_delay_avg": 0.0,
        "request_targeted_start_delay_avg": lag.mean(), "request_time_avg": time.mean(),
        "resolve_end_delay_avg": 0.0, "resolve_time_avg": time.mean(),
        "finalized_delay_avg": 0.0, "processed_delay_avg": 0.0,
    })
}

/// A figure per request with its weight, split by outcome (`None`: the
/// request is not among those GuideLLM counts for it).
fn by_status(samples: &[Sample], f: impl Fn(&Sample) -> Option<(f64, f64)>) -> Value {
    let of = |ok: bool| Weighted::new(samples.iter().filter(|s| s.ok() == ok).filter_map(&f));
    status(
        &of(true),
        &of(false),
        &Weighted::new(samples.iter().filter_map(&f)),
    )
}

/// One value per request, GuideLLM's `or 0.0` where it has none.
fn per_request(samples: &[Sample], f: impl Fn(&Sample) -> Option<f64>) -> Value {
    by_status(samples, |s| Some((f(s).unwrap_or(0.0), 1.0)))
}

fn status(ok: &Weighted, failed: &Weighted, all: &Weighted) -> Value {
    json!({
        "successful": summary(ok), "errored": summary(failed),
        "incomplete": summary(&Weighted::default()), "total": summary(all),
    })
}

fn summary(v: &Weighted) -> Value {
    let mut p = json!({});
    for (name, q) in PERCENTILES {
        p[name] = json!(v.quantile(q));
    }
    json!({
        "mean": v.mean(), "median": v.quantile(0.5), "mode": v.mode(),
        "variance": v.variance(), "std_dev": v.variance().sqrt(), "min": v.min(), "max": v.max(),
        "count": v.count(), "total_sum": v.mean() * v.count() as f64, "percentiles": p,
    })
}

/// The run's one figure as a distribution of one.
fn one(v: f64) -> Value {
    let one = Weighted::of([v]);
    status(&one, &Weighted::default(), &one)
}

fn empty() -> Value {
    let none = Weighted::default();
    status(&none, &none, &none)
}

fn metrics(r: &RunResults, samples: &[Sample]) -> Value {
    let t = &r.throughput;
    let ms = |v: Option<f64>| v.map(|v| v * 1e3);
    let tokens = |f: fn(&Sample) -> u64| per_request(samples, move |s| Some(f(s) as f64));
    let c = &r.counts;
    json!({
        "request_totals": {"successful": c.succeeded, "errored": c.failed, "incomplete": c.abandoned,
            "total": c.requests},
        "requests_per_second": one(t.requests_per_s),
        "request_concurrency": one(t.concurrency.mean),
        "request_latency": per_request(samples, |s| Some(s.e2e_s)),
        "request_streaming_iterations_count": tokens(|s| s.chunks),
        "prompt_token_count": tokens(|s| s.input_tokens.unwrap_or(0)),
        "output_token_count": tokens(|s| s.output_tokens),
        "total_token_count": tokens(|s| s.input_tokens.unwrap_or(0) + s.output_tokens),
        "time_to_first_token_ms": per_request(samples, |s| ms(s.ttft_s)),
        // Only the requests whose answer began, as GuideLLM counts them.
        "time_to_first_output_token_ms": by_status(samples, |s| Some((ms(s.first_output_s())?, 1.0))),
        // Weighted by the tokens (GuideLLM's): a token's time, not a request's.
        "time_per_output_token_ms": by_status(samples, |s| {
            let n = s.output_tokens as f64;
            let v = ms((n > 0.0).then(|| s.latency_s() / n)).unwrap_or(0.0);
            Some((v, n))
        }),
        // Over the requests with a first token, weighted by the tokens after it.
        "inter_token_latency_ms": by_status(samples, |s| {
            s.ttft_s?;
            let after = s.output_tokens.saturating_sub(1) as f64;
            Some((ms(s.tpot_s()).unwrap_or(0.0), after))
        }),
        "time_to_last_round_trip_ms": empty(),
        "avg_round_trip_time_ms": empty(),
        "prompt_tokens_per_second": one(t.total_tokens_per_s - t.output_tokens_per_s),
        "output_tokens_per_second": one(t.output_tokens_per_s),
        "tokens_per_second": one(t.total_tokens_per_s),
        // One value per chunk: each chunk's tokens, as the run's mean per request.
        "output_tokens_per_iteration": by_status(samples, |s| {
            (s.chunks > 0).then(|| (s.output_tokens as f64 / s.chunks as f64, s.chunks as f64))
        }),
        "iter_tokens_per_iteration": by_status(samples, |s| {
            let (n, k) = (s.output_tokens.saturating_sub(1), s.chunks.saturating_sub(1));
            (n > 0 && k > 0).then(|| (n as f64 / k as f64, k as f64))
        }),
        "text": text(r, samples),
        "image": modality(&["tokens", "images", "pixels", "bytes"]),
        "video": modality(&["tokens", "frames", "seconds", "bytes"]),
        "audio": modality(&["tokens", "samples", "seconds", "bytes"]),
        "tool_call": modality(&["tokens", "mixed_tokens", "count"]),
    })
}

/// Text's token figures from the requests; words and characters unmeasured.
fn text(r: &RunResults, samples: &[Sample]) -> Value {
    let t = &r.throughput;
    let tokens = json!({
        "input": per_request(samples, |s| s.input_tokens.map(|n| n as f64)),
        "input_per_second": one(t.total_tokens_per_s - t.output_tokens_per_s),
        "input_concurrency": empty(),
        "output": per_request(samples, |s| Some(s.output_tokens as f64)),
        "output_per_second": one(t.output_tokens_per_s),
        "output_concurrency": empty(),
        "total": per_request(samples, |s| Some((s.input_tokens.unwrap_or(0) + s.output_tokens) as f64)),
        "total_per_second": one(t.total_tokens_per_s),
        "total_concurrency": empty(),
    });
    let mut m = modality(&["words", "characters"]);
    m["tokens"] = tokens;
    m
}

/// A modality's metric summaries, every one empty (not measured).
fn modality(names: &[&str]) -> Value {
    let unmeasured = || {
        let parts = [
            "input",
            "input_per_second",
            "input_concurrency",
            "output",
            "output_per_second",
            "output_concurrency",
            "total",
            "total_per_second",
            "total_concurrency",
        ];
        Value::Object(parts.iter().map(|p| (p.to_string(), empty())).collect())
    };
    Value::Object(
        names
            .iter()
            .map(|n| (n.to_string(), unmeasured()))
            .collect(),
    )
}
