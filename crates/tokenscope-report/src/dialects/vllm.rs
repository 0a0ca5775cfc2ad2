//! vLLM's `vllm bench serve --save-result --save-detailed` JSON
//! (`vllm/benchmarks/serve.py`): the run's requests summarised as vLLM
//! summarises its own — latencies in ms as
//! `mean_/median_/std_/pNN_{ttft,tpot,itl,e2el}_ms`, numpy's interpolated
//! percentiles over the successful requests, the latency to the last chunk
//! (where vLLM's ends), TPOT as (latency − TTFT) ÷ (tokens − 1), ITL over
//! every gap between chunks, the peak output rate and concurrency over
//! one-second buckets (vLLM 0.34's), and the per-request lists (`ttfts`,
//! `itls`, `latencies`, …) in seconds. Only `generated_texts` is
//! left out: tokenscope keeps no text by default.

use super::samples::{Sample, Values};
use serde_json::{json, Map, Value};
use tokenscope_core::results::RunResults;

/// The percentiles written, as vLLM names them (`--metric-percentiles 50,90,95,99,99.9`).
const PERCENTILES: [f64; 5] = [50.0, 90.0, 95.0, 99.0, 99.9];

pub fn export(r: &RunResults, samples: &[Sample]) -> Value {
    let mut out = setup(r);
    let fields = out.as_object_mut().expect("an object");
    fields.extend(totals(r, samples));
    fields.extend(detailed(samples));
    let ok: Vec<&Sample> = samples.iter().filter(|s| s.ok()).collect();
    let (peak_tokens, peak_requests) = (peak_output_per_s(&ok), peak_concurrency(&ok));
    fields.insert("max_output_tokens_per_s".into(), json!(peak_tokens));
    fields.insert("max_concurrent_requests".into(), json!(peak_requests));
    fields.insert("rtfx".into(), json!(0.0));
    let ms = |f: &dyn Fn(&Sample) -> Option<f64>| Values::new(ok.iter().filter_map(|s| f(s)));
    put(fields, "ttft", &ms(&|s| s.ttft_s));
    put(fields, "tpot", &ms(&Sample::tpot_s));
    put(
        fields,
        "itl",
        &Values::new(ok.iter().flat_map(|s| s.gaps_s.iter().copied())),
    );
    put(fields, "e2el", &ms(&|s| Some(s.latency_s())));
    out
}

/// What vLLM writes before the results: the endpoint and the traffic.
fn setup(r: &RunResults) -> Value {
    let load = &r.config["load"];
    let closed = load["mode"] == "closed";
    let rate = match load["rate"].as_f64() {
        Some(rate) if !closed => json!(rate),
        _ => json!("inf"),
    };
    let backend = if r.target.api == "openai-chat" {
        "openai-chat"
    } else {
        "openai"
    };
    let max_concurrency = match closed {
        true => load["concurrency"].clone(),
        false => load["max_concurrency"].clone(),
    };
    json!({
        "date": date(&r.started_at),
        "endpoint_type": backend,
        "backend": backend,
        "label": Value::Null,
        "model_id": r.target.model,
        "tokenizer_id": r.config["tokenizer"]["name"],
        "num_prompts": r.counts.requests,
        "request_rate": rate,
        "burstiness": burstiness(load),
        "max_concurrency": max_concurrency,
    })
}

/// vLLM's burstiness: the gamma shape of the gaps between arrivals, 1.0
/// for Poisson (and vLLM's default where the rate is infinite, as in a
/// closed loop). Constant arrivals are gamma's limit as the shape grows
/// without bound: written `"inf"`, as vLLM writes an infinite rate.
fn burstiness(load: &Value) -> Value {
    match load["arrival"].as_str() {
        Some("constant") => json!("inf"),
        Some(a) => a
            .strip_prefix("gamma:")
            .and_then(|k| k.parse::<f64>().ok())
            .map_or(json!(1.0), |k| json!(k)),
        None => json!(1.0),
    }
}

/// Counts, totals and throughputs, as vLLM computes them over the window.
fn totals(r: &RunResults, samples: &[Sample]) -> Map<String, Value> {
    let ok = || samples.iter().filter(|s| s.ok());
    let completed = ok().count();
    let input: u64 = ok().map(|s| s.input_tokens.unwrap_or(0)).sum();
    let output: u64 = ok().map(|s| s.output_tokens).sum();
    let dur = r.window.duration_s;
    let per_s = |x: f64| if dur > 0.0 { x / dur } else { 0.0 };
    let m = json!({
        "duration": dur,
        "completed": completed,
        "failed": samples.len() - completed,
        "total_input_tokens": input,
        "total_output_tokens": output,
        "request_throughput": per_s(completed as f64),
        "request_goodput": r.throughput.goodput_requests_per_s,
        "output_throughput": per_s(output as f64),
        "total_token_throughput": per_s((input + output) as f64),
    });
    m.as_object().cloned().unwrap_or_default()
}

/// `--save-detailed`'s lists, one entry per request (a failure's figures 0).
fn detailed(samples: &[Sample]) -> Map<String, Value> {
    let each = |f: &dyn Fn(&Sample) -> Value| samples.iter().map(f).collect::<Vec<_>>();
    let m = json!({
        "input_lens": each(&|s| json!(s.input_tokens.unwrap_or(0))),
        "output_lens": each(&|s| json!(if s.ok() { s.output_tokens } else { 0 })),
        "ttfts": each(&|s| json!(s.ok().then_some(s.ttft_s).flatten().unwrap_or(0.0))),
        "itls": each(&|s| json!(if s.ok() { s.gaps_s.clone() } else { vec![] })),
        "latencies": each(&|s| json!(if s.ok() { s.latency_s() } else { 0.0 })),
        "start_times": each(&|s| json!(s.sent_s)),
        "errors": each(&|s| json!(s.error.clone().unwrap_or_default())),
    });
    m.as_object().cloned().unwrap_or_default()
}

/// The most chunks that arrived in one second, counted in one-second
/// buckets from the first send (vLLM counts each chunk as one token).
fn peak_output_per_s(ok: &[&Sample]) -> f64 {
    let Some(start) = ok.iter().map(|s| s.sent_s).reduce(f64::min) else {
        return 0.0;
    };
    // Buckets by index in a map: a long run costs its chunks, not its seconds.
    let mut buckets: std::collections::HashMap<u64, u64> = Default::default();
    for s in ok {
        let Some(ttft) = s.ttft_s else { continue };
        let mut at = s.sent_s + ttft;
        for gap in std::iter::once(0.0).chain(s.gaps_s.iter().copied()) {
            at += gap;
            *buckets.entry((at - start) as u64).or_default() += 1;
        }
    }
    buckets.into_values().max().unwrap_or(0) as f64
}

/// vLLM 0.34's peak concurrency: each request counted in every whole
/// second from its send's to its end's (both included), the fullest
/// second's count. It counts requests active in the same second, not at
/// the same instant, so it can exceed the concurrency cap.
fn peak_concurrency(ok: &[&Sample]) -> u64 {
    let Some(start) = ok.iter().map(|s| s.sent_s).reduce(f64::min) else {
        return 0;
    };
    let mut seconds: std::collections::HashMap<u64, u64> = Default::default();
    for s in ok {
        let (from, to) = (
            (s.sent_s - start) as u64,
            (s.sent_s + s.latency_s() - start) as u64,
        );
        // A request spanning more seconds than a run could hold is cut at a day.
        for second in from..=to.min(from + 86_400) {
            *seconds.entry(second).or_default() += 1;
        }
    }
    seconds.into_values().max().unwrap_or(0)
}

/// vLLM's stats of one metric, in ms: mean, median, std and percentiles.
fn put(fields: &mut Map<String, Value>, name: &str, v: &Values) {
    fields.insert(format!("mean_{name}_ms"), json!(v.mean() * 1e3));
    fields.insert(format!("median_{name}_ms"), json!(v.linear(50.0) * 1e3));
    fields.insert(format!("std_{name}_ms"), json!(v.std() * 1e3));
    for p in PERCENTILES {
        let word = if p.fract() == 0.0 {
            format!("{p:.0}")
        } else {
            p.to_string()
        };
        fields.insert(format!("p{word}_{name}_ms"), json!(v.linear(p) * 1e3));
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
    use super::*;

    fn sample(sent_s: f64, ttft_s: f64, gaps: &[f64]) -> Sample {
        Sample {
            sent_s,
            ttft_s: Some(ttft_s),
            e2e_s: ttft_s + gaps.iter().sum::<f64>(),
            last_token_s: Some(ttft_s + gaps.iter().sum::<f64>()),
            output_tokens: gaps.len() as u64 + 1,
            gaps_s: gaps.to_vec(),
            chunks: gaps.len() as u64 + 1,
            ..Sample::default()
        }
    }

    #[test]
    fn dates_take_vllms_form() {
        assert_eq!(date("2026-12-03T10:04:05.123Z"), "20261203-100405");
        assert_eq!(date("unknown"), "unknown");
    }

    #[test]
    fn the_peaks_count_chunks_and_requests_per_second_bucket_as_vllm_does() {
        // Two requests back to back: the second starts as the first ends.
        let a = sample(0.0, 0.5, &[0.1; 4]); // chunks at 0.5..0.9, ends 0.9
        let b = sample(0.9, 0.2, &[0.3; 3]); // chunks at 1.1, 1.4, 1.7, 2.0
        assert_eq!(peak_output_per_s(&[&a, &b]), 5.0, "0.5–0.9 in bucket 0");
        // vLLM 0.34 counts a request in each second it touches: a in 0,
        // b in 0, 1 and 2 (sent at 0.9, ends at 2.0): both in second 0.
        assert_eq!(peak_concurrency(&[&a, &b]), 2);
        let c = sample(1.2, 0.1, &[0.1]);
        assert_eq!(peak_concurrency(&[&a, &b, &c]), 2, "b and c in second 1");
    }

    #[test]
    fn burstiness_is_a_number_but_for_constant_arrivals() {
        assert_eq!(burstiness(&json!({"mode": "closed"})), json!(1.0));
        assert_eq!(burstiness(&json!({"arrival": "poisson"})), json!(1.0));
        assert_eq!(burstiness(&json!({"arrival": "gamma:0.5"})), json!(0.5));
        assert_eq!(burstiness(&json!({"arrival": "constant"})), json!("inf"));
    }
}
