//! GuideLLM's `benchmarks.json`: a benchmark per strategy, each with the
//! requests it sampled (`requests.successful`, `errored`, `incomplete`).
//! Each request keeps its start, first and last token, end, how many
//! chunks it streamed, and token counts, but not each chunk's time: the
//! chunks are spread evenly between the first and last token, as GuideLLM
//! itself assumes, so ITL's distribution is not measured (its mean is).
//! Read into typed fields only: the metrics and texts are skipped unread.

use super::{count_of, seconds_of, Dialect, Imported, PeerRequest};
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::Path;
use tokenscope_core::results::Target;

#[derive(Deserialize)]
struct Doc {
    benchmarks: Vec<Bench>,
}

#[derive(Deserialize)]
struct Bench {
    config: BenchConfig,
    requests: Requests,
    start_time: Option<f64>,
    scheduler_metrics: Option<SchedulerMetrics>,
    metrics: Option<Metrics>,
}

#[derive(Deserialize)]
struct BenchConfig {
    #[serde(default)]
    strategy: Value,
    #[serde(default)]
    backend: Value,
}

#[derive(Deserialize)]
struct SchedulerMetrics {
    measure_start_time: Option<f64>,
    measure_end_time: Option<f64>,
}

#[derive(Deserialize)]
struct Metrics {
    request_totals: Option<Totals>,
}

#[derive(Deserialize, Default, Clone, Copy)]
struct Totals {
    successful: u64,
    errored: u64,
    incomplete: u64,
}

#[derive(Deserialize)]
struct Requests {
    #[serde(default)]
    successful: Vec<Stats>,
    #[serde(default)]
    errored: Vec<Stats>,
    #[serde(default)]
    incomplete: Vec<Stats>,
}

/// One `GenerativeRequestStats`, the fields read.
#[derive(Deserialize)]
struct Stats {
    info: Info,
    prompt_tokens: Option<f64>,
    output_tokens: Option<f64>,
}

#[derive(Deserialize)]
struct Info {
    timings: Timings,
    error: Option<String>,
}

#[derive(Deserialize)]
struct Timings {
    request_start: Option<f64>,
    resolve_start: Option<f64>,
    first_token_iteration: Option<f64>,
    last_token_iteration: Option<f64>,
    request_end: Option<f64>,
    resolve_end: Option<f64>,
    #[serde(default)]
    token_iterations: f64,
}

#[derive(Clone, Copy, PartialEq)]
enum Status {
    Successful,
    Errored,
    Incomplete,
}

pub fn read(file: &Path, index: Option<usize>) -> Result<Imported, String> {
    let text = super::read_text(file)?;
    let doc: Doc =
        serde_json::from_str(&text).map_err(|e| super::why_unread(e, "a GuideLLM report"))?;
    drop(text);
    let b = pick(&doc.benchmarks, index, file)?;
    let window = b
        .scheduler_metrics
        .as_ref()
        .map(|m| (m.measure_start_time, m.measure_end_time));
    let mut requests = Vec::new();
    for (list, status) in [
        (&b.requests.successful, Status::Successful),
        (&b.requests.errored, Status::Errored),
        (&b.requests.incomplete, Status::Incomplete),
    ] {
        for (i, r) in list.iter().enumerate() {
            let mut p = request(r, status).map_err(|e| format!("requests[{i}]: {e}"))?;
            p.warmup = outside(&p, window);
            requests.push(p);
        }
    }
    let chunks: u64 = requests.iter().map(|r| r.gaps_s.len() as u64 + 1).sum();
    super::within_chunk_limit(chunks)?;
    if requests.iter().all(|r| r.warmup) {
        return Err("the benchmark kept no per-request samples in its measured window (its sample_size was 0, or none finished inside it): nothing to recompute from".into());
    }
    let (notes, not_measured) = caveats(b, &requests);
    Ok(Imported {
        dialect: Dialect::Guidellm,
        source: file.to_path_buf(),
        started_at: b.start_time.map_or("unknown".into(), super::iso),
        target: target(&b.config.backend),
        config: config(&b.config.strategy),
        requests,
        notes,
        not_measured,
        window_s: None,
    })
}

/// A request outside GuideLLM's measured window, by its own rule (it
/// counts a request that overlaps the window at all): warm-up or cool-down.
fn outside(p: &PeerRequest, window: Option<(Option<f64>, Option<f64>)>) -> bool {
    let Some((Some(start), Some(end))) = window else {
        return false;
    };
    let (from, to) = (p.start_s, p.start_s + p.e2e_s);
    to < start || from > end
}

/// What GuideLLM's file does not let tokenscope measure.
fn caveats(b: &Bench, requests: &[PeerRequest]) -> (Vec<String>, Vec<(&'static str, String)>) {
    let mut notes = vec![
        "GuideLLM keeps each request's first and last token, not each chunk's time: the chunks are spread evenly between them (GuideLLM's own assumption), so the ITL distribution is not measured; its mean, TTFT, TPOT and E2E are".to_string(),
    ];
    let mut not_measured = vec![(
        "itl",
        "GuideLLM keeps each request's first and last token, not each chunk's time".to_string(),
    )];
    let totals = b
        .metrics
        .as_ref()
        .and_then(|m| m.request_totals)
        .unwrap_or_default();
    let kept = [Status::Successful, Status::Errored, Status::Incomplete].map(|s| {
        requests
            .iter()
            .filter(|r| !r.warmup && status_of(r) == s)
            .count() as u64
    });
    if kept[0] < totals.successful || kept[1] < totals.errored || kept[2] < totals.incomplete {
        notes.push(format!(
            "GuideLLM kept a sample of the requests ({} of {} successful, {} of {} errored): the latencies are over the sample; the rates and the error rate are not measured",
            kept[0], totals.successful, kept[1], totals.errored
        ));
        not_measured.push((
            "throughput",
            "GuideLLM kept a sample of the requests (sample_size), not all of them".to_string(),
        ));
    }
    (notes, not_measured)
}

fn status_of(r: &PeerRequest) -> Status {
    match (&r.error, r.cancelled) {
        (None, _) => Status::Successful,
        (Some(_), false) => Status::Errored,
        (Some(_), true) => Status::Incomplete,
    }
}

/// The benchmark asked for (`FILE#K`, from 1), or the only one.
fn pick<'a>(
    benchmarks: &'a [Bench],
    index: Option<usize>,
    file: &Path,
) -> Result<&'a Bench, String> {
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

/// One request; its chunks spread evenly between its first and last token.
fn request(r: &Stats, status: Status) -> Result<PeerRequest, String> {
    let t = &r.info.timings;
    let start = t
        .request_start
        .or(t.resolve_start)
        .ok_or("info.timings: no request_start")?;
    let end = t.request_end.or(t.resolve_end).unwrap_or(start);
    let since = |x: f64, what: &str| seconds_of(x - start, what);
    let output = match r.output_tokens {
        Some(n) => count_of(n, "output_tokens")?,
        None => count_of(t.token_iterations, "token_iterations")?,
    };
    let error = match status {
        Status::Successful => None,
        Status::Errored => Some(r.info.error.clone().unwrap_or_else(|| "errored".into())),
        Status::Incomplete => Some("cancelled (incomplete)".into()),
    };
    let (ttft, gaps) = match (t.first_token_iteration, t.last_token_iteration) {
        (Some(first), Some(last)) if error.is_none() => {
            // A chunk carries at least one token: more chunks than tokens is not a stream.
            let chunks = count_of(t.token_iterations, "token_iterations")?.clamp(1, output.max(1));
            super::within_chunk_limit(chunks)?;
            let span = seconds_of(last - first, "last token before first")?;
            let gap = span / (chunks - 1).max(1) as f64;
            (
                Some(since(first, "first token before start")?),
                vec![gap; (chunks - 1) as usize],
            )
        }
        _ => (None, Vec::new()),
    };
    Ok(PeerRequest {
        start_s: start,
        ttft_s: ttft,
        gaps_s: gaps,
        e2e_s: since(end, "end before start")?,
        input_tokens: r
            .prompt_tokens
            .map(|n| count_of(n, "prompt_tokens"))
            .transpose()?,
        output_tokens: output,
        cancelled: status == Status::Incomplete,
        error,
        warmup: false,
    })
}

fn target(backend: &Value) -> Target {
    Target {
        url: backend["target"].as_str().unwrap_or("unknown").into(),
        api: match backend["request_format"].as_str() {
            Some(f) if f.contains("chat") => "openai-chat".into(),
            Some(f) if f.contains("completions") => "openai-completions".into(),
            _ => "unknown".into(),
        },
        model: backend["model"].as_str().unwrap_or("unknown").into(),
        builtin: None,
    }
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
