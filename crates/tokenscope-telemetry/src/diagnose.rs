//! Rules that turn the server's own figures into statements, each with the
//! numbers it rests on.

use crate::window::ServerSummary;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use tokenscope_core::results::{Finding, Latency};

fn finding(rule: &str, severity: &str, message: String, evidence: Value) -> Finding {
    let evidence: BTreeMap<String, Value> = match evidence {
        Value::Object(m) => m.into_iter().collect(),
        other => BTreeMap::from([("value".to_string(), other)]),
    };
    Finding {
        rule: rule.into(),
        severity: severity.into(),
        message,
        evidence,
    }
}

/// The server's figures read against the client's: each rule that applies
/// gives one finding.
pub fn diagnose(s: &ServerSummary, client: &Latency) -> Vec<Finding> {
    [
        overload(s),
        queue_dominated(s, client),
        recompute_thrash(s),
        gpu_utilisation(s),
        speculation(s, client),
        ttft_breakdown(s, client),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The requests the client left (`--cancel`) held against those the
/// server aborted: a server that aborts fewer went on generating for
/// nobody. Allowed: a tenth of the leavers (at least one) not yet seen
/// aborted at the last scrape.
pub fn abandoned(s: &ServerSummary, left: u64) -> Option<Finding> {
    if left == 0 {
        return None;
    }
    let Some(aborted) = s.aborted else {
        return Some(finding(
            "abandoned_unseen",
            "info",
            format!("{left} requests were abandoned (--cancel), but the server shows no abort counter: whether it stopped generating for them is not known"),
            json!({"abandoned": left}),
        ));
    };
    let allowed = (left / 10).max(1) as f64;
    let (rule, severity, message) = match aborted + allowed < left as f64 {
        true => ("generating_for_nobody", "warning", format!(
            "{left} requests were abandoned (--cancel) but the server aborted only {aborted:.0}: it went on generating for the others, compute spent for nobody (rule: fewer aborts than abandoned less a tenth)"
        )),
        false => ("abandoned_aborted", "info", format!(
            "{left} requests were abandoned (--cancel) and the server counted {aborted:.0} aborts over the run (any client's): it stopped generating for them"
        )),
    };
    Some(finding(
        rule,
        severity,
        message,
        json!({"abandoned": left, "server_aborted": aborted}),
    ))
}

/// The queue grew through the run by a fifth of the batch (at least two).
fn overload(s: &ServerSummary) -> Option<Finding> {
    let (w, r) = (s.waiting?, s.running.or(s.waiting)?);
    let grew = w.last - w.first;
    (w.slope_per_s > 0.0 && grew >= (0.2 * r.max).max(2.0)).then(|| finding(
        "overload",
        "critical",
        format!(
            "waiting requests grew from {:.0} to {:.0} through the run ({:+.1}/s): the server is past capacity, queue time and TTFT will keep growing",
            w.first, w.last, w.slope_per_s
        ),
        json!({"waiting_first": w.first, "waiting_last": w.last, "waiting_slope_per_s": w.slope_per_s, "running_max": r.max}),
    ))
}

/// The server's queue time is at least half the client's TTFT.
fn queue_dominated(s: &ServerSummary, client: &Latency) -> Option<Finding> {
    let (q, ttft) = (s.queue_time?, client.ttft_ms?);
    (ttft.mean > 0.0 && q.mean_ms >= 0.5 * ttft.mean).then(|| finding(
        "ttft_queue_dominated",
        "warning",
        format!(
            "TTFT is dominated by server queue time: queue {:.0} ms of {:.0} ms mean TTFT ({:.0} %) — add capacity or admit fewer requests",
            q.mean_ms,
            ttft.mean,
            q.mean_ms / ttft.mean * 100.0
        ),
        json!({"server_queue_mean_ms": q.mean_ms, "client_ttft_mean_ms": ttft.mean}),
    ))
}

/// A full KV cache (over 90 %) with preemptions.
fn recompute_thrash(s: &ServerSummary) -> Option<Finding> {
    let (kv, p) = (s.kv_usage?, s.preemptions?);
    (kv.max > 0.9 && p > 0.0).then(|| finding(
        "recompute_thrash",
        "critical",
        format!(
            "KV cache reached {:.0} % with {p:.0} preemptions: requests are evicted and recomputed — give the KV cache more memory or run fewer sequences",
            kv.max * 100.0
        ),
        json!({"kv_usage_max": kv.max, "kv_usage_mean": kv.mean, "preemptions": p}),
    ))
}

/// The GPU's time-based utilisation, in bands: below 50 % a warning.
fn gpu_utilisation(s: &ServerSummary) -> Option<Finding> {
    let u = s.gpu_util_time_pct?;
    let (severity, band) = if u.mean < 50.0 {
        (
            "warning",
            "below 50 %: capacity is wasted — review batching and concurrency",
        )
    } else if u.mean > 90.0 {
        (
            "info",
            "above 90 %: saturated, latency at risk (time-based: one small kernel reads 100 %)",
        )
    } else if u.mean >= 70.0 {
        ("info", "70–90 %: healthy")
    } else {
        ("info", "50–70 %: room for more load")
    };
    Some(finding(
        "gpu_utilisation",
        severity,
        format!(
            "GPU busy {:.0} % of the time (NVML/DCGM time-based definition), {band}",
            u.mean
        ),
        json!({"gpu_util_time_pct_mean": u.mean, "gpu_util_time_pct_max": u.max, "definition": "time any kernel ran"}),
    ))
}

/// TTFT split into the server's queue and prefill times and the rest.
fn ttft_breakdown(s: &ServerSummary, client: &Latency) -> Option<Finding> {
    let (q, prefill, ttft) = (s.queue_time?, s.prefill_time?, client.ttft_ms?);
    let network = (ttft.mean - q.mean_ms - prefill.mean_ms).max(0.0);
    Some(finding(
        "ttft_breakdown",
        "info",
        format!(
            "TTFT {:.0} ms = queue {:.0} ms + prefill {:.0} ms + network and front end {:.0} ms (means)",
            ttft.mean, q.mean_ms, prefill.mean_ms, network
        ),
        json!({"ttft_mean_ms": ttft.mean, "queue_mean_ms": q.mean_ms, "prefill_mean_ms": prefill.mean_ms, "network_mean_ms": network}),
    ))
}

/// TPOT explained by speculative decoding: each verification step yields
/// the mean accepted length in tokens, so a token's time is a step's time
/// shared by them.
fn speculation(s: &ServerSummary, client: &Latency) -> Option<Finding> {
    let spec = s.spec_decode.as_ref()?;
    let (rate, length) = (spec.acceptance_rate?, spec.mean_accepted_length?);
    let tpot = client.tpot_ms.as_ref().map(|t| t.p50);
    let explained = match tpot {
        Some(t) => format!(
            ": the TPOT p50 of {t:.2} ms is one step of ~{:.1} ms shared by {length:.2} tokens (without speculation each token needs a step of its own; a lower acceptance means fewer tokens a step and a higher TPOT)",
            t * length
        ),
        None => String::new(),
    };
    Some(finding(
        "spec_decode",
        "info",
        format!(
            "speculative decoding: {:.1} % of draft tokens accepted, {length:.2} tokens a verification step{explained}",
            rate * 100.0
        ),
        json!({"acceptance_rate": rate, "mean_accepted_length": length, "tpot_p50_ms": tpot, "drafts": spec.drafts}),
    ))
}

/// `efficiency.kv_cache` from the server's figures (`None` when it exposes none).
pub fn kv_cache(s: &ServerSummary) -> Option<Value> {
    if s.kv_usage.is_none() && s.kv_capacity_tokens.is_none() && s.preemptions.is_none() {
        return None;
    }
    Some(json!({
        "usage_mean": s.kv_usage.map(|k| k.mean),
        "usage_max": s.kv_usage.map(|k| k.max),
        "capacity_tokens": s.kv_capacity_tokens,
        "preemptions": s.preemptions,
        "prefix_cache_hit_rate": s.prefix_cache_hit_rate,
    }))
}

/// `efficiency.gpu` from scraped GPU series, with energy per output token.
pub fn gpu(s: &ServerSummary, output_tokens: u64) -> Option<Value> {
    if s.gpu_util_time_pct.is_none() && s.gpu_power_w.is_none() && s.gpu_energy_j.is_none() {
        return None;
    }
    let joules = s
        .gpu_energy_j
        .or_else(|| s.gpu_power_w.map(|p| p.mean * s.window_s));
    Some(json!({
        "utilisation_time_pct_mean": s.gpu_util_time_pct.map(|u| u.mean),
        "utilisation_definition": "share of time any kernel ran (NVML / DCGM_FI_DEV_GPU_UTIL)",
        "sm_active_mean": s.gpu_sm_active.map(|u| u.mean),
        "power_w_mean": s.gpu_power_w.map(|p| p.mean),
        "memory_used_bytes_max": s.gpu_memory_used_bytes.map(|m| m.max),
        "memory_total_bytes": s.gpu_memory_total_bytes,
        "energy_j": joules,
        "joules_per_output_token": joules.filter(|_| output_tokens > 0).map(|j| j / output_tokens as f64),
        "output_tokens_per_joule": joules.filter(|j| *j > 0.0).map(|j| output_tokens as f64 / j),
        "source": "scraped",
    }))
}
