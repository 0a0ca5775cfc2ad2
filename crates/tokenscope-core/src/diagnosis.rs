//! Findings that can be drawn from the client's records alone. Each carries
//! the numbers it rests on. (Server- and GPU-side rules join these once
//! telemetry is read.)

use crate::results::{ClientUsage, Counts, Finding, Latency, Tokens};
use serde_json::json;
use std::collections::BTreeMap;

fn finding(
    rule: &str,
    severity: &str,
    message: String,
    evidence: &[(&str, serde_json::Value)],
) -> Finding {
    Finding {
        rule: rule.into(),
        severity: severity.into(),
        message,
        evidence: evidence
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect::<BTreeMap<_, _>>(),
    }
}

pub fn diagnose(
    counts: &Counts,
    latency: &Latency,
    tokens: &Tokens,
    client: &ClientUsage,
) -> Vec<Finding> {
    let mut out = Vec::new();
    if counts.implausible_usage > 0 {
        out.push(finding(
            "implausible_usage",
            "warning",
            format!(
                "{} of {} responses reported usage counts that cannot be true (more tokens than bytes received or than max_tokens, or absurd sizes): those were counted from the stream instead; see implausible_usage in requests.jsonl",
                counts.implausible_usage, counts.requests
            ),
            &[("responses", json!(counts.implausible_usage))],
        ));
    }
    if let (Some(cores), Some(threads)) = (client.cpu_cores, client.threads) {
        if threads > 0 && cores >= 0.85 * threads as f64 {
            out.push(finding(
                "client_saturated",
                "critical",
                format!(
                    "the client used {cores:.2} of its {threads} cores: it may have measured itself, results unreliable"
                ),
                &[("client_cpu_cores", json!(cores)), ("client_threads", json!(threads))],
            ));
        }
    }
    if let Some(lag) = latency.client_lag_ms {
        if lag.p99 > 10.0 {
            out.push(finding(
                "client_lag",
                "warning",
                format!(
                    "requests left late: client lag p99 {:.1} ms (the schedule was not kept; see TTFT from schedule)",
                    lag.p99
                ),
                &[("client_lag_p99_ms", json!(lag.p99)), ("client_lag_max_ms", json!(lag.max))],
            ));
        }
    }
    if let Some(itl) = latency.itl_ms {
        if itl.p50 > 0.0 && itl.p99 / itl.p50 > 3.0 {
            out.push(finding(
                "stutter",
                "warning",
                format!(
                    "tokens stutter: ITL p99 {:.1} ms is {:.1}× the median {:.1} ms (prefills or preemptions stall decoding)",
                    itl.p99,
                    itl.p99 / itl.p50,
                    itl.p50
                ),
                &[("itl_p50_ms", json!(itl.p50)), ("itl_p99_ms", json!(itl.p99))],
            ));
        }
    }
    if counts.short_outputs > 0 {
        out.push(finding(
            "short_outputs",
            "warning",
            format!(
                "{} of {} successful requests returned fewer tokens than asked (use --ignore-eos for exact lengths)",
                counts.short_outputs, counts.succeeded
            ),
            &[("short_outputs", json!(counts.short_outputs)), ("succeeded", json!(counts.succeeded))],
        ));
    }
    if tokens.multi_token_chunks {
        out.push(finding(
            "multi_token_chunks",
            "info",
            "the server sent several tokens per chunk: ITL is each chunk gap split over its tokens; ICL shows the gaps".into(),
            &[("tokens_per_chunk", json!(tokens.tokens_per_chunk))],
        ));
    }
    if counts.failed > 0 {
        let share = counts.failed as f64 / counts.requests.max(1) as f64;
        out.push(finding(
            "errors",
            if share > 0.05 { "critical" } else { "warning" },
            format!(
                "{} of {} requests failed ({:.1} %)",
                counts.failed,
                counts.requests,
                share * 100.0
            ),
            &[("errors", json!(counts.errors))],
        ));
    }
    if counts.retried > 0 {
        out.push(finding(
            "server_closes_keepalive",
            "info",
            format!(
                "{} requests found their kept-alive connection closed by the server and were sent again on a new one; TTFT includes that connect",
                counts.retried
            ),
            &[("retried", json!(counts.retried)), ("requests", json!(counts.requests))],
        ));
    }
    if counts.waited_for_slot > 0 {
        out.push(finding(
            "max_concurrency_reached",
            "warning",
            format!(
                "{} requests could not leave on time because --max-concurrency was reached",
                counts.waited_for_slot
            ),
            &[("waited_for_slot", json!(counts.waited_for_slot))],
        ));
    }
    out
}
