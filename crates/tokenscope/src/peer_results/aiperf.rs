//! AIPerf's exports: `profile_export.jsonl` (a record per request: its
//! start and end in ns, TTFT, each chunk's gap, token counts, error) and,
//! beside it, `profile_export_aiperf.json` for the settings. The records
//! are what is read, a line at a time into typed fields; the summary file
//! alone holds no requests.

use super::{count_of, seconds_of, Dialect, Imported, PeerRequest};
use serde::Deserialize;
use serde_json::{json, Value};
use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use tokenscope_core::results::Target;

const RECORDS: &str = "profile_export.jsonl";
const SUMMARY: &str = "profile_export_aiperf.json";
/// The longest record line read: a request with a million chunks is ~20 MB.
const MAX_LINE: u64 = 64 << 20;

/// One `MetricRecordInfo` line, the fields read.
#[derive(Deserialize)]
struct Line {
    metadata: Meta,
    #[serde(default)]
    metrics: Metrics,
    error: Option<ErrorDetails>,
}

#[derive(Deserialize)]
struct Meta {
    request_start_ns: u64,
    request_end_ns: u64,
    benchmark_phase: Option<String>,
    #[serde(default)]
    was_cancelled: bool,
}

#[derive(Deserialize, Default)]
struct Metrics {
    time_to_first_token: Option<Metric<f64>>,
    inter_chunk_latency: Option<Metric<Vec<f64>>>,
    output_sequence_length: Option<Metric<f64>>,
    input_sequence_length: Option<Metric<f64>>,
}

#[derive(Deserialize)]
struct Metric<T> {
    value: T,
    unit: String,
}

#[derive(Deserialize)]
struct ErrorDetails {
    code: Option<i64>,
    message: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
}

pub fn read(file: &Path) -> Result<Imported, String> {
    let beside = |name: &str| file.with_file_name(name);
    let (records, summary): (PathBuf, PathBuf) = match file.extension().and_then(|e| e.to_str()) {
        Some("jsonl") => (file.to_path_buf(), beside(SUMMARY)),
        _ => (beside(RECORDS), file.to_path_buf()),
    };
    if !records.exists() {
        return Err(format!(
            "AIPerf's per-request records ({RECORDS}) are not beside it: tokenscope recomputes every figure from the requests"
        ));
    }
    let requests = read_records(&records)?;
    if requests.iter().all(|r| r.warmup) {
        return Err(format!(
            "{}: holds no profiling requests",
            records.display()
        ));
    }
    let doc = match summary.exists() {
        true => super::read_json(&summary).map_err(|e| format!("{}: {e}", summary.display()))?,
        false => Value::Null,
    };
    let cfg = &doc["input_config"];
    let first = requests
        .iter()
        .map(|r| r.start_s)
        .fold(f64::INFINITY, f64::min);
    Ok(Imported {
        dialect: Dialect::Aiperf,
        source: records.clone(),
        started_at: doc["start_time"]
            .as_str()
            .map(String::from)
            .unwrap_or_else(|| super::iso(first)),
        target: target(cfg),
        config: config(cfg),
        requests,
        notes: match doc.is_null() {
            true => vec![format!(
                "{SUMMARY} is not beside the records: the settings are not known"
            )],
            false => Vec::new(),
        },
        not_measured: Vec::new(),
        window_s: None,
    })
}

fn target(cfg: &Value) -> Target {
    Target {
        url: cfg["endpoint"]["urls"][0]
            .as_str()
            .unwrap_or("unknown")
            .into(),
        api: match cfg["endpoint"]["type"].as_str() {
            Some("chat") => "openai-chat".into(),
            Some("completions") => "openai-completions".into(),
            Some(other) => other.into(),
            None => "unknown".into(),
        },
        model: cfg["models"]["items"][0]["name"]
            .as_str()
            .unwrap_or("unknown")
            .into(),
        builtin: None,
    }
}

/// The records, a line at a time (a line past [`MAX_LINE`] refused).
fn read_records(path: &Path) -> Result<Vec<PeerRequest>, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut reader = std::io::BufReader::new(f);
    let (mut out, mut line, mut chunks) = (Vec::new(), Vec::new(), 0u64);
    for n in 1.. {
        let at = |e: String| format!("{}:{n}: {e}", path.display());
        line.clear();
        let read = (&mut reader)
            .take(MAX_LINE + 1)
            .read_until(b'\n', &mut line);
        match read.map_err(|e| at(e.to_string()))? {
            0 => break,
            len if len as u64 > MAX_LINE => {
                return Err(at(format!(
                    "a line past {} MiB: not a record",
                    MAX_LINE >> 20
                )))
            }
            _ => {}
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let parsed: Line = serde_json::from_slice(&line)
            .map_err(|e| at(super::why_unread(e, "an AIPerf record")))?;
        let r = request(parsed).map_err(at)?;
        chunks += r.gaps_s.len() as u64 + 1;
        super::within_chunk_limit(chunks)?;
        out.push(r);
    }
    Ok(out)
}

fn request(v: Line) -> Result<PeerRequest, String> {
    let meta = &v.metadata;
    let m = &v.metrics;
    let error = v.error.map(|e| {
        let message = e.message.or(e.kind).unwrap_or_else(|| "error".into());
        match e.code {
            Some(code) if (400..600).contains(&code) => format!("HTTP {code}: {message}"),
            _ => message,
        }
    });
    let error = match meta.was_cancelled {
        true => Some(format!(
            "cancelled{}",
            error.map(|e| format!(": {e}")).unwrap_or_default()
        )),
        false => error,
    };
    let time = |t: &Metric<f64>, what: &str| seconds_of(t.value / per_second(&t.unit)?, what);
    let gaps = match &m.inter_chunk_latency {
        Some(g) => {
            let per_s = per_second(&g.unit)?;
            g.value
                .iter()
                .map(|x| seconds_of(x / per_s, "inter_chunk_latency"))
                .collect::<Result<_, _>>()?
        }
        None => Vec::new(),
    };
    let tokens = |t: &Option<Metric<f64>>, what: &str| {
        t.as_ref().map(|t| count_of(t.value, what)).transpose()
    };
    let ttft = m
        .time_to_first_token
        .as_ref()
        .map(|t| time(t, "time_to_first_token"))
        .transpose()?;
    Ok(PeerRequest {
        start_s: meta.request_start_ns as f64 / 1e9,
        ttft_s: ttft.filter(|_| error.is_none()),
        gaps_s: gaps,
        e2e_s: meta
            .request_end_ns
            .checked_sub(meta.request_start_ns)
            .ok_or("request_end_ns before request_start_ns")? as f64
            / 1e9,
        input_tokens: tokens(&m.input_sequence_length, "input_sequence_length")?,
        output_tokens: tokens(&m.output_sequence_length, "output_sequence_length")?.unwrap_or(0),
        cancelled: meta.was_cancelled,
        error,
        // AIPerf's phase names are case-insensitive.
        warmup: meta
            .benchmark_phase
            .as_deref()
            .is_some_and(|p| !p.eq_ignore_ascii_case("profiling")),
    })
}

/// How many of AIPerf's time unit make a second.
fn per_second(unit: &str) -> Result<f64, String> {
    match unit {
        "ms" => Ok(1e3),
        "s" | "sec" => Ok(1.0),
        "us" => Ok(1e6),
        "ns" => Ok(1e9),
        other => Err(format!("time unit {other:?} is not one AIPerf writes")),
    }
}

/// The profiling phase's load in tokenscope's keys.
fn config(cfg: &Value) -> Value {
    let phases = cfg["phases"].as_array().cloned().unwrap_or_default();
    let phase = phases
        .iter()
        .find(|p| p["name"] == "profiling")
        .or(phases.first())
        .cloned()
        .unwrap_or(Value::Null);
    let load = match phase["type"].as_str() {
        Some("concurrency") => json!({"mode": "closed", "concurrency": phase["concurrency"]}),
        Some(kind @ ("poisson" | "constant" | "gamma")) => {
            let arrival = match phase["smoothness"].as_f64() {
                Some(k) if kind == "gamma" => format!("gamma:{k}"),
                _ => kind.to_string(),
            };
            json!({"mode": "open", "rate": phase["rate"], "arrival": arrival,
                "max_concurrency": phase["concurrency"]})
        }
        _ => json!({"mode": "unknown"}),
    };
    json!({"load": load, "imported_from": "aiperf", "tokenizer": cfg["tokenizer"]})
}
