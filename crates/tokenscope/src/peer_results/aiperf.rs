//! AIPerf's exports: `profile_export.jsonl` (a record per request: its
//! start and end in ns, TTFT, each chunk's gap, token counts, error) and,
//! beside it, `profile_export_aiperf.json` for the settings. The records
//! are what is read; the summary file alone holds no requests.

use super::{count, seconds, Dialect, Imported, PeerRequest};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use tokenscope_core::results::Target;

const RECORDS: &str = "profile_export.jsonl";
const SUMMARY: &str = "profile_export_aiperf.json";

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
    if requests.is_empty() {
        return Err(format!("{}: holds no requests", records.display()));
    }
    let doc = match summary.exists() {
        true => super::read_json(&summary).map_err(|e| format!("{}: {e}", summary.display()))?,
        false => Value::Null,
    };
    let cfg = &doc["input_config"];
    let first_ns = requests
        .iter()
        .map(|r| r.start_s)
        .fold(f64::INFINITY, f64::min);
    Ok(Imported {
        dialect: Dialect::Aiperf,
        source: records.clone(),
        started_at: doc["start_time"]
            .as_str()
            .map(String::from)
            .unwrap_or_else(|| iso(first_ns)),
        target: Target {
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
        },
        config: config(cfg),
        requests,
        notes: if doc.is_null() {
            vec![format!(
                "{SUMMARY} is not beside the records: the settings are not known"
            )]
        } else {
            Vec::new()
        },
        not_measured: Vec::new(),
        window_s: None,
    })
}

fn iso(epoch_s: f64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(epoch_s.max(0.0));
    humantime::format_rfc3339_millis(t).to_string()
}

fn read_records(path: &Path) -> Result<Vec<PeerRequest>, String> {
    let text = super::read_text(path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, line)| {
            let at = |e: String| format!("{}:{}: {e}", path.display(), i + 1);
            let v: Value = serde_json::from_str(line).map_err(|e| at(format!("not JSON ({e})")))?;
            request(&v).map_err(at)
        })
        .collect()
}

/// One `MetricRecordInfo` line.
fn request(v: &Value) -> Result<PeerRequest, String> {
    let meta = &v["metadata"];
    let start = count(&meta["request_start_ns"], "metadata.request_start_ns")?;
    let end = count(&meta["request_end_ns"], "metadata.request_end_ns")?;
    let m = &v["metrics"];
    let error = match &v["error"] {
        Value::Null => None,
        e => Some(
            e["message"]
                .as_str()
                .map_or_else(|| e.to_string(), String::from),
        ),
    };
    let gaps = match m["inter_chunk_latency"]["value"].as_array() {
        Some(list) => {
            let per_s = per_second(&m["inter_chunk_latency"]["unit"])?;
            list.iter()
                .map(|g| seconds(g, per_s, "inter_chunk_latency"))
                .collect::<Result<_, _>>()?
        }
        None => Vec::new(),
    };
    let ttft = match &m["time_to_first_token"] {
        Value::Null => None,
        t => Some(seconds(
            &t["value"],
            per_second(&t["unit"])?,
            "time_to_first_token",
        )?),
    };
    let tokens = |key: &str| match &m[key]["value"] {
        Value::Null => Ok(None),
        n => count(n, key).map(Some),
    };
    Ok(PeerRequest {
        start_s: start as f64 / 1e9,
        ttft_s: ttft.filter(|_| error.is_none()),
        gaps_s: gaps,
        e2e_s: end
            .checked_sub(start)
            .ok_or("request_end_ns before request_start_ns")? as f64
            / 1e9,
        input_tokens: tokens("input_sequence_length")?,
        output_tokens: tokens("output_sequence_length")?.unwrap_or(0),
        error,
        warmup: meta["benchmark_phase"]
            .as_str()
            .is_some_and(|p| p != "profiling"),
    })
}

/// How many of AIPerf's time unit make a second.
fn per_second(unit: &Value) -> Result<f64, String> {
    match unit.as_str() {
        Some("ms") => Ok(1e3),
        Some("s") | Some("sec") => Ok(1.0),
        Some("us") => Ok(1e6),
        Some("ns") => Ok(1e9),
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
