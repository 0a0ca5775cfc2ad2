//! vLLM's `bench serve --save-result` JSON. With `--save-detailed` it keeps
//! each request's send (`start_times`, in the vLLMs that write it), TTFT, chunk gaps (`itls`), latency
//! (to its last chunk), token counts and error; without, only each
//! request's latency, so TTFT, TPOT and ITL are not measured here and
//! vLLM's own summary of them is quoted in a note instead. Read into typed
//! fields only (the texts and every other key skipped unread), so memory
//! follows the gaps kept, not the file.

use super::{count_of, seconds_of, Dialect, Imported, PeerRequest};
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::Path;
use tokenscope_core::results::Target;

/// The keys read; the rest of the file is skipped.
#[derive(Deserialize)]
struct Doc {
    date: Option<String>,
    backend: Option<String>,
    endpoint_type: Option<String>,
    model_id: Option<String>,
    tokenizer_id: Option<String>,
    num_prompts: Option<f64>,
    request_rate: Option<Value>,
    burstiness: Option<Value>,
    max_concurrency: Option<u64>,
    duration: Option<f64>,
    total_input_tokens: Option<f64>,
    total_output_tokens: Option<f64>,
    ttfts: Option<Vec<f64>>,
    itls: Option<Vec<Vec<f64>>>,
    latencies: Option<Vec<f64>>,
    start_times: Option<Vec<f64>>,
    input_lens: Option<Vec<f64>>,
    output_lens: Option<Vec<f64>>,
    errors: Option<Vec<Option<String>>>,
    // vLLM's own summary of TTFT, TPOT and ITL (quoted where no request was
    // kept); named one by one, as flattening would buffer the whole file.
    mean_ttft_ms: Option<f64>,
    median_ttft_ms: Option<f64>,
    p99_ttft_ms: Option<f64>,
    mean_tpot_ms: Option<f64>,
    median_tpot_ms: Option<f64>,
    p99_tpot_ms: Option<f64>,
    mean_itl_ms: Option<f64>,
    median_itl_ms: Option<f64>,
    p99_itl_ms: Option<f64>,
}

pub fn read(file: &Path) -> Result<Imported, String> {
    let text = super::read_text(file)?;
    let doc: Doc =
        serde_json::from_str(&text).map_err(|e| super::why_unread(e, "a vLLM result"))?;
    drop(text);
    let detailed = doc.ttfts.is_some();
    let (requests, mut notes) = match detailed {
        true => (read_detailed(&doc)?, Vec::new()),
        false => latencies_only(&doc)?,
    };
    // vLLM before it wrote start_times: each request's own times are
    // kept, but not when it left, so the rates are over vLLM's duration.
    let sends_kept = doc.start_times.is_some();
    if detailed && !sends_kept {
        notes.push("no start_times (an older vLLM): each request's TTFT, gaps and latency are its own, but not when it was sent, so the rates are over vLLM's own duration and the peak concurrency is not known".into());
    }
    if requests.is_empty() {
        return Err("holds no requests".into());
    }
    let n = doc.num_prompts.unwrap_or(0.0);
    if n > 0.0 && n != requests.len() as f64 {
        notes.push(format!(
            "num_prompts is {n} but {} requests were kept",
            requests.len()
        ));
    }
    let not_measured = match detailed {
        true => Vec::new(),
        false => ["ttft", "tpot", "itl", "throughput"]
            .into_iter()
            .map(|f| (f, "vLLM's result saved without --save-detailed keeps no per-request send times, TTFT or chunk gaps".to_string()))
            .collect(),
    };
    Ok(Imported {
        dialect: Dialect::Vllm,
        source: file.to_path_buf(),
        started_at: started_at(doc.date.as_deref().unwrap_or("")),
        target: Target {
            url: "unknown (vLLM's result does not keep the URL)".into(),
            api: api(doc.backend.as_deref().or(doc.endpoint_type.as_deref())),
            model: doc.model_id.clone().unwrap_or_else(|| "unknown".into()),
            builtin: None,
        },
        config: config(&doc, requests.len()),
        window_s: (!sends_kept).then_some(doc.duration.unwrap_or(0.0)),
        not_measured,
        requests,
        notes,
    })
}

/// The per-request lists of `--save-detailed`, one entry per request.
fn read_detailed(doc: &Doc) -> Result<Vec<PeerRequest>, String> {
    let ttfts = doc.ttfts.as_deref().unwrap_or_default();
    let n = ttfts.len();
    let list = |key: &str, len: Option<usize>| match len {
        Some(l) if l == n => Ok(()),
        Some(l) => Err(format!("{key} holds {l} entries where ttfts holds {n}")),
        None => Err(format!("{key}: missing (--save-detailed writes it)")),
    };
    list("itls", doc.itls.as_ref().map(Vec::len))?;
    list("latencies", doc.latencies.as_ref().map(Vec::len))?;
    if let Some(starts) = &doc.start_times {
        list("start_times", Some(starts.len()))?;
    }
    list("input_lens", doc.input_lens.as_ref().map(Vec::len))?;
    list("output_lens", doc.output_lens.as_ref().map(Vec::len))?;
    list("errors", doc.errors.as_ref().map(Vec::len))?;
    let field = |v: &Option<Vec<f64>>, i: usize| v.as_ref().map_or(0.0, |v| v[i]);
    (0..n)
        .map(|i| {
            let at = |what: &str| format!("request {i}: {what}");
            let error = doc
                .errors
                .as_ref()
                .and_then(|e| e[i].clone())
                .filter(|e| !e.is_empty());
            let output = count_of(field(&doc.output_lens, i), &at("output_lens"))?;
            let latency = seconds_of(field(&doc.latencies, i), &at("latency"))?;
            // vLLM writes a failure's reason, or "" where the server gave none:
            // a request with no latency and no output did not succeed.
            let error = error.or_else(|| {
                (latency == 0.0 && output == 0).then(|| "failed (vLLM kept no reason)".to_string())
            });
            let gaps = doc.itls.as_ref().map(|l| &l[i][..]).unwrap_or_default();
            Ok(PeerRequest {
                start_s: field(&doc.start_times, i),
                ttft_s: match error {
                    Some(_) => None,
                    None => Some(seconds_of(ttfts[i], &at("ttft"))?),
                },
                gaps_s: gaps
                    .iter()
                    .map(|g| seconds_of(*g, &at("itl")))
                    .collect::<Result<_, _>>()?,
                e2e_s: latency,
                input_tokens: Some(count_of(field(&doc.input_lens, i), &at("input_lens"))?),
                output_tokens: output,
                error,
                ..PeerRequest::default()
            })
        })
        .collect()
}

/// Without `--save-detailed`: each request's latency (0 for a failure, as
/// vLLM writes it), the token totals spread evenly over the successes.
fn latencies_only(doc: &Doc) -> Result<(Vec<PeerRequest>, Vec<String>), String> {
    let lat = doc.latencies.as_deref().ok_or(
        "neither --save-detailed's lists nor latencies: no per-request data to read (save with --save-detailed)",
    )?;
    let ok = lat.iter().filter(|x| **x > 0.0).count() as u64;
    let spread = |total: Option<f64>, key: &str| -> Result<(u64, u64), String> {
        let total = count_of(total.unwrap_or(0.0), key)?;
        Ok(total
            .checked_div(ok)
            .zip(total.checked_rem(ok))
            .unwrap_or((0, 0)))
    };
    let (out, out_extra) = spread(doc.total_output_tokens, "total_output_tokens")?;
    let (inp, inp_extra) = spread(doc.total_input_tokens, "total_input_tokens")?;
    let mut k = 0;
    let requests = lat
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let e2e = seconds_of(*l, &format!("latencies[{i}]"))?;
            if e2e == 0.0 {
                let error =
                    Some("failed (vLLM keeps no message without --save-detailed)".to_string());
                return Ok(PeerRequest {
                    error,
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
    let notes = vec![
        "saved without --save-detailed: no per-request send times, TTFT or chunk gaps, so TTFT, TPOT and ITL are not measured here; the rates are over vLLM's own duration and the concurrency is not known; the token totals are spread evenly over the requests".to_string(),
        quoted_summary(doc),
    ];
    Ok((requests, notes))
}

/// vLLM's own summary of what it kept no requests for, quoted as it wrote it.
fn quoted_summary(s: &Doc) -> String {
    let rows = [
        ("TTFT", [s.mean_ttft_ms, s.median_ttft_ms, s.p99_ttft_ms]),
        ("TPOT", [s.mean_tpot_ms, s.median_tpot_ms, s.p99_tpot_ms]),
        ("ITL", [s.mean_itl_ms, s.median_itl_ms, s.p99_itl_ms]),
    ];
    let parts: Vec<String> = rows
        .iter()
        .filter_map(|(name, values)| {
            let stats: Vec<String> = ["mean", "median", "p99"]
                .iter()
                .zip(values)
                .filter_map(|(s, v)| v.map(|v| format!("{s} {v:.2} ms")))
                .collect();
            (!stats.is_empty()).then(|| format!("{name} {}", stats.join(", ")))
        })
        .collect();
    format!(
        "vLLM's own summary, by its definitions (ITL per chunk), not recomputed: {}",
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join("; ")
        }
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

/// The load in tokenscope's keys: a rate (Poisson, gamma, or constant
/// where tokenscope's export wrote `"inf"`) or, at vLLM's infinite rate,
/// the concurrency cap.
fn config(doc: &Doc, n: usize) -> Value {
    let cap = doc.max_concurrency;
    let rate = doc.request_rate.as_ref().and_then(Value::as_f64);
    let load = match (rate, cap) {
        (Some(rate), _) => {
            let arrival = match doc.burstiness.as_ref() {
                Some(Value::String(s)) if s == "inf" => "constant".to_string(),
                Some(b) => match b.as_f64() {
                    Some(k) if k != 1.0 => format!("gamma:{k}"),
                    _ => "poisson".to_string(),
                },
                None => "poisson".to_string(),
            };
            json!({"mode": "open", "rate": rate, "arrival": arrival, "max_concurrency": cap})
        }
        (None, Some(c)) => json!({"mode": "closed", "concurrency": c}),
        (None, None) => json!({"mode": "closed", "concurrency": n}),
    };
    json!({"load": load, "imported_from": "vllm", "tokenizer": {"name": doc.tokenizer_id}})
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_become_iso() {
        assert_eq!(super::started_at("20261207-173211"), "2026-12-07T17:32:11");
        assert!(super::started_at("yesterday").starts_with("unknown"));
    }
}
