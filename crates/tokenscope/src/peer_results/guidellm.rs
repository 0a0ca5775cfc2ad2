//! GuideLLM's `benchmarks.json`: a benchmark per strategy, each with the
//! requests it sampled (`requests.successful`, `errored`, `incomplete`).
//! Each request keeps its start, first and last token, end, how many
//! chunks it streamed, and token counts, but not each chunk's time: the
//! chunks are spread evenly between the first and last token, as GuideLLM
//! itself assumes, so ITL's distribution is not measured (its mean is).

use super::{count, seconds, Dialect, Imported, PeerRequest};
use serde_json::{json, Value};
use std::path::Path;
use tokenscope_core::results::Target;

pub fn read(file: &Path, index: Option<usize>) -> Result<Imported, String> {
    let doc = super::read_json(file)?;
    let benchmarks = doc["benchmarks"]
        .as_array()
        .ok_or("benchmarks: missing or not a list")?;
    let b = pick(benchmarks, index, file)?;
    let reqs = &b["requests"];
    let mut requests = Vec::new();
    for (status, failed) in [
        ("successful", false),
        ("errored", true),
        ("incomplete", true),
    ] {
        for (i, r) in reqs[status].as_array().into_iter().flatten().enumerate() {
            let p = request(r, failed).map_err(|e| format!("requests.{status}[{i}]: {e}"))?;
            requests.push(p);
        }
    }
    if requests.is_empty() {
        return Err("the benchmark kept no per-request samples (its sample_size was 0): nothing to recompute from".into());
    }
    let backend = &b["config"]["backend"];
    let sampled = b["config"]["sample_size"].as_u64();
    let mut notes = vec![
        "GuideLLM keeps each request's first and last token, not each chunk's time: the chunks are spread evenly between them (GuideLLM's own assumption), so the ITL distribution is not measured; its mean, TTFT, TPOT and E2E are".to_string(),
    ];
    if let Some(n) = sampled {
        notes.push(format!(
            "GuideLLM sampled {n} requests of each status: the figures are over the sample"
        ));
    }
    Ok(Imported {
        dialect: Dialect::Guidellm,
        source: file.to_path_buf(),
        started_at: b["start_time"].as_f64().map_or("unknown".into(), iso),
        target: Target {
            url: backend["target"].as_str().unwrap_or("unknown").into(),
            api: match backend["request_format"].as_str() {
                Some(f) if f.contains("chat") => "openai-chat".into(),
                Some(f) if f.contains("completions") => "openai-completions".into(),
                _ => "unknown".into(),
            },
            model: backend["model"].as_str().unwrap_or("unknown").into(),
            builtin: None,
        },
        config: config(&b["config"]["strategy"]),
        requests,
        not_measured: vec![(
            "itl",
            "GuideLLM keeps each request's first and last token, not each chunk's time".into(),
        )],
        notes,
        window_s: None,
    })
}

/// The benchmark asked for (`FILE#K`, from 1), or the only one.
fn pick<'a>(
    benchmarks: &'a [Value],
    index: Option<usize>,
    file: &Path,
) -> Result<&'a Value, String> {
    match (index, benchmarks.len()) {
        (_, 0) => Err("holds no benchmarks".into()),
        (None, 1) => Ok(&benchmarks[0]),
        (None, n) => Err(format!(
            "holds {n} benchmarks (one per strategy): name one as {}#K, K from 1 to {n}",
            file.display()
        )),
        (Some(k), n) if (1..=n).contains(&k) => Ok(&benchmarks[k - 1]),
        (Some(k), n) => Err(format!("#{k}: it holds benchmarks 1 to {n}")),
    }
}

fn iso(epoch_s: f64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(epoch_s.max(0.0));
    humantime::format_rfc3339_millis(t).to_string()
}

/// One `GenerativeRequestStats`.
fn request(r: &Value, failed: bool) -> Result<PeerRequest, String> {
    let t = &r["info"]["timings"];
    let at = |key: &str| t[key].as_f64().filter(|x| x.is_finite());
    let start = at("request_start").ok_or("info.timings.request_start: missing")?;
    let end = at("request_end").unwrap_or(start);
    let since = |x: f64, what: &str| seconds(&json!(x - start), 1.0, what);
    let error = match failed {
        true => Some(
            r["info"]["error"]
                .as_str()
                .unwrap_or("incomplete (cancelled)")
                .to_string(),
        ),
        false => None,
    };
    let (ttft, gaps) = match (at("first_token_iteration"), at("last_token_iteration")) {
        (Some(first), Some(last)) if error.is_none() => {
            let chunks = count(&t["token_iterations"], "token_iterations")?.max(1);
            let span = seconds(&json!(last - first), 1.0, "last token before first")?;
            let gap = span / (chunks - 1).max(1) as f64;
            (
                Some(since(first, "first token before start")?),
                vec![gap; (chunks - 1) as usize],
            )
        }
        _ => (None, Vec::new()),
    };
    let tokens = |side: &str| match &r[side]["total_tokens"] {
        Value::Null => Ok(None),
        n => count(n, &format!("{side}.total_tokens")).map(Some),
    };
    Ok(PeerRequest {
        start_s: start,
        ttft_s: ttft,
        gaps_s: gaps,
        e2e_s: since(end, "end before start")?,
        input_tokens: tokens("input_metrics")?,
        output_tokens: tokens("output_metrics")?.unwrap_or(0),
        error,
        warmup: false,
    })
}

/// The strategy in tokenscope's load keys.
fn config(strategy: &Value) -> Value {
    let load = match strategy["type_"].as_str() {
        Some("concurrent") => json!({"mode": "closed", "concurrency": strategy["streams"]}),
        Some("synchronous") => json!({"mode": "closed", "concurrency": 1}),
        Some(kind @ ("poisson" | "constant")) => json!({"mode": "open", "rate": strategy["rate"],
            "arrival": kind, "max_concurrency": strategy["max_concurrency"]}),
        Some(other) => json!({"mode": other}),
        None => json!({"mode": "unknown"}),
    };
    json!({"load": load, "imported_from": "guidellm"})
}
