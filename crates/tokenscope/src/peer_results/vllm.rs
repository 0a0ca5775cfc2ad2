//! vLLM's `bench serve --save-result` JSON. With `--save-detailed` it keeps
//! each request's send (`start_times`), TTFT, chunk gaps (`itls`), latency,
//! token counts and error; without, only each request's latency, so TTFT,
//! TPOT and ITL are not measured here and vLLM's own summary of them is
//! quoted in a note instead.

use super::{count, seconds, Dialect, Imported, PeerRequest};
use serde_json::{json, Value};
use std::path::Path;
use tokenscope_core::results::Target;

pub fn read(file: &Path) -> Result<Imported, String> {
    let doc = super::read_json(file)?;
    if !doc.is_object() {
        return Err("not a vLLM result (a JSON object)".into());
    }
    let n = count(&doc["num_prompts"], "num_prompts").unwrap_or(0);
    let (requests, notes, window_s) = match doc["ttfts"].as_array() {
        Some(_) => (detailed(&doc)?, Vec::new(), None),
        None => {
            let (requests, notes) = latencies_only(&doc)?;
            (requests, notes, doc["duration"].as_f64())
        }
    };
    if requests.is_empty() {
        return Err("holds no requests".into());
    }
    let mut notes = notes;
    if n > 0 && n != requests.len() as u64 {
        notes.push(format!(
            "num_prompts is {n} but {} requests were kept",
            requests.len()
        ));
    }
    Ok(Imported {
        dialect: Dialect::Vllm,
        source: file.to_path_buf(),
        started_at: started_at(doc["date"].as_str().unwrap_or("")),
        target: Target {
            url: "unknown (vLLM's result does not keep the URL)".into(),
            api: api(doc["backend"].as_str().or(doc["endpoint_type"].as_str())),
            model: doc["model_id"].as_str().unwrap_or("unknown").into(),
            builtin: None,
        },
        config: config(&doc, requests.len()),
        requests,
        not_measured: match window_s {
            Some(_) => ["ttft", "tpot", "itl", "throughput"]
                .into_iter()
                .map(|f| (f, "vLLM's result saved without --save-detailed keeps no per-request send times, TTFT or chunk gaps".to_string()))
                .collect(),
            None => Vec::new(),
        },
        notes,
        window_s,
    })
}

/// The per-request lists of `--save-detailed`, one entry per request.
fn detailed(doc: &Value) -> Result<Vec<PeerRequest>, String> {
    let list = |key: &str| {
        doc[key]
            .as_array()
            .ok_or(format!("{key}: missing or not a list"))
    };
    let (ttfts, itls, lat) = (list("ttfts")?, list("itls")?, list("latencies")?);
    let (inputs, outputs, errors) = (list("input_lens")?, list("output_lens")?, list("errors")?);
    let starts = doc["start_times"].as_array();
    let n = ttfts.len();
    for (key, l) in [
        ("itls", itls),
        ("latencies", lat),
        ("input_lens", inputs),
        ("output_lens", outputs),
        ("errors", errors),
    ] {
        if l.len() != n {
            return Err(format!(
                "{key} holds {} entries where ttfts holds {n}",
                l.len()
            ));
        }
    }
    (0..n)
        .map(|i| {
            let at = |what: &str| format!("request {i}: {what}");
            let error = errors[i]
                .as_str()
                .filter(|e| !e.is_empty())
                .map(String::from);
            let gaps = itls[i].as_array().ok_or(at("itls: not a list"))?;
            Ok(PeerRequest {
                start_s: starts
                    .and_then(|s| s.get(i))
                    .and_then(Value::as_f64)
                    .unwrap_or(0.0),
                ttft_s: match error {
                    Some(_) => None,
                    None => Some(seconds(&ttfts[i], 1.0, &at("ttft"))?),
                },
                gaps_s: gaps
                    .iter()
                    .map(|g| seconds(g, 1.0, &at("itl")))
                    .collect::<Result<_, _>>()?,
                e2e_s: seconds(&lat[i], 1.0, &at("latency"))?,
                input_tokens: Some(count(&inputs[i], &at("input_lens"))?),
                output_tokens: count(&outputs[i], &at("output_lens"))?,
                error,
                warmup: false,
            })
        })
        .collect()
}

/// Without `--save-detailed`: each request's latency (0 for a failure, as
/// vLLM writes it), the token totals spread evenly over the successes.
fn latencies_only(doc: &Value) -> Result<(Vec<PeerRequest>, Vec<String>), String> {
    let lat = doc["latencies"].as_array().ok_or(
        "neither --save-detailed's lists nor latencies: no per-request data to read (save with --save-detailed)",
    )?;
    let ok = lat
        .iter()
        .filter(|l| l.as_f64().is_some_and(|x| x > 0.0))
        .count() as u64;
    let spread = |key: &str| -> Result<(u64, u64), String> {
        let total = count(&doc[key], key)?;
        Ok(total
            .checked_div(ok)
            .zip(total.checked_rem(ok))
            .unwrap_or((0, 0)))
    };
    let ((out, out_extra), (inp, inp_extra)) = (
        spread("total_output_tokens")?,
        spread("total_input_tokens")?,
    );
    let mut k = 0;
    let requests = lat
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let e2e = seconds(l, 1.0, &format!("latencies[{i}]"))?;
            if e2e == 0.0 {
                return Ok(PeerRequest {
                    error: Some("failed (vLLM keeps no message without --save-detailed)".into()),
                    ..PeerRequest::default()
                });
            }
            k += 1;
            let more = |extra: u64| u64::from(k <= extra);
            Ok(PeerRequest {
                e2e_s: e2e,
                input_tokens: Some(inp + more(inp_extra)),
                output_tokens: out + more(out_extra),
                ..PeerRequest::default()
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let mut notes = vec![
        "saved without --save-detailed: no per-request send times, TTFT or chunk gaps, so TTFT, TPOT and ITL are not measured here; the rates are over vLLM's own duration and the concurrency is not known; the token totals are spread evenly over the requests".to_string(),
    ];
    notes.push(quoted_summary(doc));
    Ok((requests, notes))
}

/// vLLM's own summary of what it kept no requests for, quoted as it wrote it.
fn quoted_summary(doc: &Value) -> String {
    let mut parts = Vec::new();
    for m in ["ttft", "tpot", "itl"] {
        let stats: Vec<String> = ["mean", "median", "p99"]
            .iter()
            .filter_map(|s| {
                doc[format!("{s}_{m}_ms")]
                    .as_f64()
                    .map(|v| format!("{s} {v:.2} ms"))
            })
            .collect();
        if !stats.is_empty() {
            parts.push(format!("{} {}", m.to_uppercase(), stats.join(", ")));
        }
    }
    format!(
        "vLLM's own summary, by its definitions (TPOT from the stream's end, ITL per chunk), not recomputed: {}",
        if parts.is_empty() { "none".into() } else { parts.join("; ") }
    )
}

fn api(backend: Option<&str>) -> String {
    match backend {
        Some("openai-chat") => "openai-chat".into(),
        Some("openai") | Some("vllm") => "openai-completions".into(),
        Some(other) => other.into(),
        None => "unknown".into(),
    }
}

/// vLLM's `YYYYMMDD-HHMMSS` (the machine's local time) as ISO 8601.
fn started_at(date: &str) -> String {
    let d: Vec<char> = date.chars().filter(char::is_ascii_digit).collect();
    if d.len() != 14 {
        return format!("unknown ({date:?})");
    }
    let s = |a: usize, b: usize| d[a..b].iter().collect::<String>();
    format!(
        "{}-{}-{}T{}:{}:{}",
        s(0, 4),
        s(4, 6),
        s(6, 8),
        s(8, 10),
        s(10, 12),
        s(12, 14)
    )
}

/// The load in tokenscope's keys: a rate (Poisson or gamma) or, at vLLM's
/// infinite rate, the concurrency cap.
fn config(doc: &Value, n: usize) -> Value {
    let cap = doc["max_concurrency"].as_u64();
    let load = match (doc["request_rate"].as_f64(), cap) {
        (Some(rate), _) => {
            let k = doc["burstiness"].as_f64().unwrap_or(1.0);
            let arrival = if k == 1.0 {
                "poisson".to_string()
            } else {
                format!("gamma:{k}")
            };
            json!({"mode": "open", "rate": rate, "arrival": arrival, "max_concurrency": cap})
        }
        (None, Some(c)) => json!({"mode": "closed", "concurrency": c}),
        (None, None) => json!({"mode": "closed", "concurrency": n}),
    };
    json!({"load": load, "imported_from": "vllm", "tokenizer": {"name": doc["tokenizer_id"]}})
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_become_iso() {
        assert_eq!(super::started_at("20261207-173211"), "2026-12-07T17:32:11");
        assert!(super::started_at("yesterday").starts_with("unknown"));
    }
}
