//! NVIDIA AIPerf's exports: `profile_export_aiperf.json` (its
//! `JsonExportData`, schema 1.4) and `profile_export.jsonl` (one
//! `MetricRecordInfo` per request, what its plots read).
//!
//! Each metric is recomputed from the requests as AIPerf computes it: the
//! mean, population std, min, max, sum and count, and numpy's interpolated
//! p1–p99. AIPerf's request latency ends at the last chunk; its
//! `inter_token_latency` is per request (latency − TTFT) ÷ (tokens − 1);
//! its `output_token_throughput_per_user` is that latency's inverse;
//! `time_to_second_token` is the first gap between chunks.

use super::samples::{Sample, Values};
use serde_json::{json, Map, Value};
use std::io::Write;
use tokenscope_core::results::RunResults;

/// The export layout this file follows (`JsonExportData.SCHEMA_VERSION`).
const SCHEMA_VERSION: &str = "1.4";
const PERCENTILES: [(&str, f64); 9] = [
    ("p1", 1.0),
    ("p5", 5.0),
    ("p10", 10.0),
    ("p25", 25.0),
    ("p50", 50.0),
    ("p75", 75.0),
    ("p90", 90.0),
    ("p95", 95.0),
    ("p99", 99.0),
];

/// The per-request metrics, by AIPerf's names, with their units.
const METRICS: [(&str, &str); 9] = [
    ("time_to_first_token", "ms"),
    ("time_to_second_token", "ms"),
    ("time_to_first_output_token", "ms"),
    ("request_latency", "ms"),
    ("inter_token_latency", "ms"),
    ("output_sequence_length", "tokens"),
    ("input_sequence_length", "tokens"),
    ("output_token_throughput_per_user", "tokens/sec/user"),
    ("e2e_output_token_throughput", "tokens/sec/user"),
];

/// One request's values of [`METRICS`], in their order (`None`: not measured).
fn values(s: &Sample) -> [Option<f64>; 9] {
    let ms = |v: Option<f64>| v.map(|v| v * 1e3);
    let itl = s.tpot_s();
    let latency = s.latency_s();
    [
        ms(s.ttft_s),
        ms(s.gaps_s.first().copied()),
        ms(s.first_output_s()),
        ms(Some(latency)),
        ms(itl),
        Some(s.output_tokens as f64),
        s.input_tokens.map(|n| n as f64),
        itl.filter(|v| *v > 0.0).map(|v| 1.0 / v),
        (latency > 0.0).then(|| s.output_tokens as f64 / latency),
    ]
}

pub fn export(r: &RunResults, samples: &[Sample]) -> Value {
    let ok: Vec<&Sample> = samples.iter().filter(|s| s.ok()).collect();
    let mut out = Map::new();
    let per: Vec<[Option<f64>; 9]> = ok.iter().map(|s| values(s)).collect();
    for (i, (name, unit)) in METRICS.into_iter().enumerate() {
        let v = Values::new(per.iter().filter_map(|p| p[i]));
        if !v.is_empty() {
            out.insert(name.into(), dist(unit, &v));
        }
    }
    let icl = Values::new(ok.iter().flat_map(|s| s.gaps_s.iter().map(|g| g * 1e3)));
    if !icl.is_empty() {
        out.insert("inter_chunk_latency".into(), dist("ms", &icl));
    }
    out.extend(totals(r, samples));
    out.extend(run_facts(r, samples));
    Value::Object(out)
}

/// A metric's record stats, as AIPerf's `metric_result_from_array`.
fn dist(unit: &str, v: &Values) -> Value {
    let mut m = json!({
        "unit": unit, "avg": v.mean(), "min": v.min(), "max": v.max(),
        "std": v.std(), "count": v.count(), "sum": v.sum(),
    });
    for (name, p) in PERCENTILES {
        m[name] = json!(v.linear(p));
    }
    m
}

/// The run's aggregates: counts, totals and rates over the window (`avg` only).
fn totals(r: &RunResults, samples: &[Sample]) -> Map<String, Value> {
    let ok = || samples.iter().filter(|s| s.ok());
    let completed = ok().count() as f64;
    let failed = samples.len() as f64 - completed;
    let isl: u64 = ok().filter_map(|s| s.input_tokens).sum();
    let osl: u64 = ok().map(|s| s.output_tokens).sum();
    let dur = r.window.duration_s;
    let per_s = |x: f64| if dur > 0.0 { x / dur } else { 0.0 };
    let one = |unit: &str, v: f64| json!({"unit": unit, "avg": v});
    let mut m = Map::new();
    for (name, unit, v) in [
        ("request_throughput", "requests/sec", per_s(completed)),
        ("request_count", "requests", completed),
        ("output_token_throughput", "tokens/sec", per_s(osl as f64)),
        (
            "total_token_throughput",
            "tokens/sec",
            per_s((isl + osl) as f64),
        ),
        ("total_output_tokens", "tokens", osl as f64),
        ("total_osl", "tokens", osl as f64),
        ("total_isl", "tokens", isl as f64),
        ("benchmark_duration", "sec", dur),
    ] {
        m.insert(name.into(), one(unit, v));
    }
    // AIPerf writes the error count only when a request failed.
    if failed > 0.0 {
        m.insert("error_request_count".into(), one("requests", failed));
    }
    m
}

/// What ran: the version fields, the settings (`input_config`), the
/// wall-clock span and the errors.
fn run_facts(r: &RunResults, samples: &[Sample]) -> Map<String, Value> {
    let complete = !r.partial && r.stopped.is_none();
    let m = json!({
        "schema_version": SCHEMA_VERSION,
        // Not AIPerf: its version field stays empty, the tool is named beside it.
        "aiperf_version": Value::Null,
        "exported_by": format!("tokenscope {}", r.tool.version),
        "benchmark_id": super::run_id(r),
        "input_config": input_config(r),
        "was_cancelled": r.partial,
        "is_complete": complete,
        "incomplete_reason": (!complete).then_some("cut short (interrupted or stopped by --stop-on)"),
        "error_summary": error_summary(samples),
        "start_time": super::wall_clock(r, r.window.start_s),
        "end_time": super::wall_clock(r, r.window.end_s),
    });
    m.as_object().cloned().unwrap_or_default()
}

/// AIPerf's `BenchmarkConfig`: models, endpoint, dataset and one profiling phase.
fn input_config(r: &RunResults) -> Value {
    let c = &r.config;
    let load = &c["load"];
    let mut phase = json!({"name": "profiling", "requests": r.counts.requests});
    match load["mode"].as_str() {
        Some("closed") => {
            phase["type"] = json!("concurrency");
            phase["concurrency"] = load["concurrency"].clone();
        }
        _ => {
            let arrival = load["arrival"].as_str().unwrap_or("poisson");
            let gamma = arrival
                .strip_prefix("gamma:")
                .and_then(|k| k.parse::<f64>().ok());
            phase["type"] = json!(if gamma.is_some() { "gamma" } else { arrival });
            phase["rate"] = load["rate"].clone();
            if let Some(k) = gamma {
                phase["smoothness"] = json!(k);
            }
            if load["max_concurrency"].is_u64() {
                phase["concurrency"] = load["max_concurrency"].clone();
            }
        }
    }
    let dataset = match c["dataset"].as_str() {
        Some(path) => json!({"name": "main", "type": "file", "path": path}),
        None => json!({"name": "main", "type": "synthetic", "entries": r.counts.requests,
            "prompts": {"isl": {"mean": super::number(&c["input_tokens"])},
                "osl": {"mean": super::number(&c["output_tokens"])}}}),
    };
    json!({
        "models": {"items": [{"name": r.target.model}]},
        "endpoint": {
            "urls": [r.target.url],
            "type": if r.target.api == "openai-chat" { "chat" } else { "completions" },
            "streaming": c["stream"].as_bool().unwrap_or(true),
        },
        "datasets": [dataset],
        "phases": [phase],
        "tokenizer": {"name": c["tokenizer"]["name"]},
    })
}

/// The failures grouped by message, most frequent first.
fn error_summary(samples: &[Sample]) -> Value {
    let mut counts: std::collections::BTreeMap<&str, u64> = Default::default();
    for e in samples.iter().filter_map(|s| s.error.as_deref()) {
        *counts.entry(e).or_default() += 1;
    }
    let mut rows: Vec<(&str, u64)> = counts.into_iter().collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.1));
    rows.into_iter()
        .map(|(message, count)| json!({"error_details": {"message": message}, "count": count}))
        .collect()
}

/// `profile_export.jsonl`: a `MetricRecordInfo` per measured request, in
/// the order sent, written as it is built (memory stays one line).
pub fn write_records(r: &RunResults, samples: &[Sample], mut w: impl Write) -> std::io::Result<()> {
    let epoch_ns = super::epoch_ns(r);
    for (i, s) in samples.iter().enumerate() {
        let ns = |at_s: f64| epoch_ns.saturating_add((at_s * 1e9) as u64);
        let mut metrics = Map::new();
        if s.ok() {
            for ((name, unit), v) in METRICS.into_iter().zip(values(s)) {
                if let Some(v) = v {
                    metrics.insert(name.into(), json!({"value": v, "unit": unit}));
                }
            }
            let gaps: Vec<f64> = s.gaps_s.iter().map(|g| g * 1e3).collect();
            if !gaps.is_empty() {
                metrics.insert(
                    "inter_chunk_latency".into(),
                    json!({"value": gaps, "unit": "ms"}),
                );
            }
        }
        let line = json!({
            "metadata": {
                "session_num": i,
                "x_request_id": format!("tokenscope-{i}"),
                "request_start_ns": ns(s.sent_s),
                "request_end_ns": ns(s.sent_s + if s.ok() { s.latency_s() } else { s.e2e_s }),
                "worker_id": "tokenscope",
                "record_processor_id": "tokenscope",
                "benchmark_phase": "profiling",
            },
            "metrics": metrics,
            "error": s.error.as_ref().map(|m| json!({"message": m})),
        });
        serde_json::to_writer(&mut w, &line)?;
        w.write_all(b"\n")?;
    }
    w.flush()
}
