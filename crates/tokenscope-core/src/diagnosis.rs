//! Findings that can be drawn from the client's records alone. Each carries
//! the numbers it rests on. (Server- and GPU-side rules join these once
//! telemetry is read.)

use crate::results::{ClientUsage, Counts, Finding, Latency, Tokens};
use serde_json::json;
use std::collections::BTreeMap;

/// A finding from its rule, severity, message and evidence (every rule's,
/// here and in the modules that judge one thing: `overload`).
pub fn finding(
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

/// What the run asked for that a rule's advice depends on.
#[derive(Debug, Clone, Copy, Default)]
pub struct Asked {
    /// `--ignore-eos` was given: exact lengths were asked for.
    pub ignore_eos: bool,
    /// An open loop (a schedule of arrivals), not a closed one.
    pub open_loop: bool,
    /// Every prompt is unique by construction: synthetic, no shared prefix,
    /// no dataset, no sessions. Prefix-cache hits are then left over from
    /// an earlier run.
    pub unique_prompts: bool,
    /// A closed loop's users, when every request asks for one answer
    /// length (no dataset or sessions to vary it): the load that can fall
    /// into waves (`crate::waves`).
    pub fixed_length_users: Option<u64>,
    /// `--ramp-up` spread the users' starts.
    pub ramped: bool,
}

/// A share of cached prompt tokens past this, on prompts that are unique
/// by construction, is not chance (a chat template's few shared tokens
/// stay under it for prompts of ordinary length).
const STALE_CACHE_SHARE: f64 = 0.2;

/// Prompts that should all be new were found in the server's prefix cache:
/// an earlier run with the same `--seed` left them there, and their TTFT
/// reads low.
/// What reasoning did to the figures: hidden reasoning (TTFT holds the
/// thinking; the per-token figures are over the streamed tokens), and a
/// thinking budget spent before any answer.
fn reasoning(tokens: &Tokens, counts: &Counts) -> Vec<Finding> {
    let Some(r) = &tokens.reasoning else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if r.hidden_requests > 0 {
        out.push(finding(
            "reasoning_hidden",
            "warning",
            format!(
                "{} of {} reasoning requests thought without streaming it (the server counted {} reasoning tokens it never sent): their TTFT includes the thinking, and TPOT and ITL are over the streamed (answer) tokens only",
                r.hidden_requests, r.requests, r.tokens
            ),
            &[
                ("hidden_requests", json!(r.hidden_requests)),
                ("reasoning_tokens", json!(r.tokens)),
            ],
        ));
    }
    if r.budget_spent_requests > 0 {
        let share = r.budget_spent_requests as f64 / counts.succeeded.max(1) as f64;
        out.push(finding(
            "thinking_budget_exhausted",
            if share > 0.05 { "critical" } else { "warning" },
            format!(
                "{} of {} successful requests ({:.0} %) spent their whole length reasoning and never answered: raise --output-tokens, or lower the server's reasoning budget",
                r.budget_spent_requests,
                counts.succeeded,
                share * 100.0
            ),
            &[
                ("budget_spent_requests", json!(r.budget_spent_requests)),
                ("succeeded", json!(counts.succeeded)),
            ],
        ));
    }
    out
}

fn stale_cache(tokens: &Tokens, asked: &Asked) -> Option<Finding> {
    let c = tokens.prefix_cache.as_ref()?;
    if !asked.unique_prompts || c.hit_rate <= STALE_CACHE_SHARE {
        return None;
    }
    Some(finding(
        "stale_prefix_cache",
        "warning",
        format!(
            "the server found {:.0} % of the prompt tokens in its prefix cache although every prompt of this run is new: an earlier run with the same --seed left them there, so TTFT and prefill read low; run with another --seed (or restart the server) to measure cold prompts",
            c.hit_rate * 100.0
        ),
        &[("hit_rate", json!(c.hit_rate)), ("requests", json!(c.requests))],
    ))
}

/// tokio's timer wakes on millisecond ticks: an idle loop reads up to this
/// late by construction, so the loop-delay rule judges only what is beyond it.
pub const TIMER_GRANULARITY_MS: f64 = 1.0;

/// The client was late (stated in docs/metrics.md, "Client lag"):
/// - **sending**: lag (actual send − intended start: the schedule in an open
///   loop, the moment the slot came free in a closed one) at p99 over 1 ms
///   and over 2 % of what it shifts: TTFT p50 in an open loop (a user who
///   arrived on schedule waited that much more), E2E p50 in a closed one
///   (the slot sat idle that share of a request's time, so fewer requests
///   were in flight than asked). TTFT itself runs from the actual send.
/// - **reading**: the event-loop delay p99 beyond its idle floor (the
///   smallest delay seen, the probe's phase to the timer) and the timer's
///   1 ms granularity, over 1 ms and over 2 % of a figure's p50. It taints each such figure
///   (TTFT, ITL, TPOT, E2E): a read can wait that long before it is stamped.
///   Where every read carried the kernel's arrival stamp, a late read moves
///   no stamp unless it gathers tokens that arrived apart (they then share
///   the last one's stamp): the delay taints only when it also exceeds the
///   gap between a stream's tokens (ITL p50).
fn client_lag(latency: &Latency, client: &ClientUsage, open_loop: bool) -> Vec<Finding> {
    let mut out = Vec::new();
    let material = |ms: f64, of: Option<f64>| ms > 1.0 && of.is_none_or(|p50| ms > 0.02 * p50);
    let shifted = match open_loop {
        true => ("ttft_from_scheduled", latency.ttft_ms),
        false => ("load_shape", latency.e2e_ms),
    };
    let lag = latency.client_lag_ms;
    if let Some(lag) = lag.filter(|l| material(l.p99, shifted.1.map(|s| s.p50))) {
        let what = match open_loop {
            true => "TTFT from schedule (what a user arriving on time waits) is that much longer than TTFT",
            false => "the slots sat idle meanwhile, so fewer requests were in flight than --concurrency asked",
        };
        out.push(finding(
            "client_lag",
            "warning",
            format!(
                "requests left late: client lag p99 {:.1} ms (max {:.1} ms) after their intended start; {what}; TTFT itself is timed from the actual send",
                lag.p99, lag.max
            ),
            &[
                ("client_lag_p99_ms", json!(lag.p99)),
                ("client_lag_max_ms", json!(lag.max)),
                ("taints", json!([shifted.0])),
            ],
        ));
    }
    if let Some(delay) = client.loop_delay_ms {
        // The probe's ticks sit at a fixed phase to the timer's: its idle
        // floor is the smallest delay seen (up to 1 ms), plus the granularity.
        let excess = (delay.p99 - delay.min - TIMER_GRANULARITY_MS).max(0.0);
        let kernel_stamped =
            client.kernel_read_stamps == Some(true) && client.unstamped_reads == Some(0);
        let gathers = latency.itl_ms.is_some_and(|itl| excess > itl.p50);
        if kernel_stamped && !gathers {
            return out;
        }
        let figures = [
            ("ttft", latency.ttft_ms),
            ("itl", latency.itl_ms),
            ("tpot", latency.tpot_ms),
            ("e2e", latency.e2e_ms),
        ];
        let tainted: Vec<&str> = figures
            .iter()
            .filter(|(_, s)| s.is_some_and(|s| material(excess, Some(s.p50))))
            .map(|(name, _)| *name)
            .collect();
        if !tainted.is_empty() {
            out.push(finding(
                "client_lag",
                "warning",
                format!(
                    "the client read late: its event loop woke {:.1} ms late at p99 beyond its idle floor and the timer's 1 ms granularity (max {:.1} ms), so {} may read up to that much high; give the client more cores (--client-threads) or less load",
                    excess,
                    delay.max,
                    tainted.join(", ")
                ),
                &[
                    ("loop_delay_p99_ms", json!(delay.p99)),
                    ("loop_delay_max_ms", json!(delay.max)),
                    ("taints", json!(tainted)),
                ],
            ));
        }
    }
    out
}

/// Closed-loop users of one answer length that finish, and come back,
/// together (`crate::waves`). Only where every answer had that length.
fn waves(counts: &Counts, latency: &Latency, tokens: &Tokens, asked: &Asked) -> Option<Finding> {
    let users = asked.fixed_length_users?;
    if counts.short_outputs > 0 || counts.succeeded == 0 {
        return None;
    }
    crate::waves::finding(crate::waves::WaveEvidence {
        users,
        output_tokens: tokens.output_total / counts.succeeded,
        succeeded: counts.succeeded,
        finished_together: counts.finished_together,
        itl_p50_ms: latency.itl_ms?.p50,
        e2e_p50_ms: latency.e2e_ms?.p50,
        ramped: asked.ramped,
    })
}

pub fn diagnose(
    counts: &Counts,
    latency: &Latency,
    tokens: &Tokens,
    client: &ClientUsage,
    asked: Asked,
) -> Vec<Finding> {
    let mut out = Vec::new();
    out.extend(stale_cache(tokens, &asked));
    out.extend(reasoning(tokens, counts));
    out.extend(implausible_usage(counts));
    out.extend(client_saturated(client));
    out.extend(client_lag(latency, client, asked.open_loop));
    out.extend(waves(counts, latency, tokens, &asked));
    out.extend(stutter(latency));
    out.extend(short_outputs(counts, &asked));
    out.extend(multi_token_chunks(tokens));
    out.extend(failures(counts));
    out.extend(closed_connections(counts));
    out.extend(max_concurrency_reached(counts));
    out
}

/// Usage counts that cannot be true, replaced by the stream's own.
fn implausible_usage(counts: &Counts) -> Option<Finding> {
    (counts.implausible_usage > 0).then(|| {
        finding(
            "implausible_usage",
            "warning",
            format!(
                "{} of {} responses reported usage counts that cannot be true (more tokens than bytes received or than max_tokens, fewer than the chunks of text, a running count that falls back, or absurd sizes): those were counted from the stream instead; see implausible_usage in requests.jsonl",
                counts.implausible_usage, counts.requests
            ),
            &[("responses", json!(counts.implausible_usage))],
        )
    })
}

/// A client busy on nearly all its cores may have measured itself.
fn client_saturated(client: &ClientUsage) -> Option<Finding> {
    let (cores, threads) = (client.cpu_cores?, client.threads?);
    (threads > 0 && cores >= 0.85 * threads as f64).then(|| {
        finding(
            "client_saturated",
            "critical",
            format!(
                "the client used {cores:.2} of its {threads} cores: it may have measured itself, results unreliable"
            ),
            &[("client_cpu_cores", json!(cores)), ("client_threads", json!(threads))],
        )
    })
}

/// A long ITL tail against its median: prefills or preemptions stall decoding.
fn stutter(latency: &Latency) -> Option<Finding> {
    let itl = latency.itl_ms?;
    (itl.p50 > 0.0 && itl.p99 / itl.p50 > 3.0).then(|| {
        finding(
            "stutter",
            "warning",
            format!(
                "tokens stutter: ITL p99 {:.1} ms is {:.1}× the median {:.1} ms (prefills or preemptions stall decoding)",
                itl.p99,
                itl.p99 / itl.p50,
                itl.p50
            ),
            &[("itl_p50_ms", json!(itl.p50)), ("itl_p99_ms", json!(itl.p99))],
        )
    })
}

/// Answers shorter than asked, with advice that depends on `--ignore-eos`.
fn short_outputs(counts: &Counts, asked: &Asked) -> Option<Finding> {
    if counts.short_outputs == 0 {
        return None;
    }
    let advice = if asked.ignore_eos {
        "--ignore-eos was sent, so the server ignored it (or caps lengths itself): its lengths are not exact"
    } else {
        "use --ignore-eos for exact lengths"
    };
    Some(finding(
        "short_outputs",
        "warning",
        format!(
            "{} of {} successful requests returned fewer tokens than asked ({advice})",
            counts.short_outputs, counts.succeeded
        ),
        &[
            ("short_outputs", json!(counts.short_outputs)),
            ("succeeded", json!(counts.succeeded)),
        ],
    ))
}

/// Several tokens per chunk: how ITL was split, and why it happens.
fn multi_token_chunks(tokens: &Tokens) -> Option<Finding> {
    if !tokens.multi_token_chunks {
        return None;
    }
    // A server's reasoning parser generates the `<think>` tags and
    // streams nothing for them: their tokens come in the next chunk.
    let tags = tokens
        .reasoning
        .as_ref()
        .is_some_and(|r| r.sources.contains_key("server_chunks"));
    let why = match tags {
        true => "; with reasoning split out by the server, the tokens of its thinking tags are generated and never streamed, so they arrive inside the chunk after them (the server's own counts on every chunk say so)",
        false => "",
    };
    Some(finding(
        "multi_token_chunks",
        "info",
        format!("the server sent several tokens per chunk: ITL is each chunk gap split over its tokens; ICL shows the gaps{why}"),
        &[("tokens_per_chunk", json!(tokens.tokens_per_chunk))],
    ))
}

/// Requests cancelled by the user (Ctrl-C, SIGTERM) apart, as no failures;
/// then the failures, critical above 5 %.
fn failures(counts: &Counts) -> Vec<Finding> {
    let mut out = Vec::new();
    let cancelled = counts
        .errors
        .get(&crate::record::ErrorKind::Cancelled.to_string())
        .copied()
        .unwrap_or(0);
    if cancelled > 0 {
        out.push(finding(
            "cancelled",
            "info",
            format!("{cancelled} requests in flight were cancelled when the run stopped (by you, by a signal, or at the end of --duration); they are not counted as failures"),
            &[("cancelled", json!(cancelled))],
        ));
    }
    let failed = counts.failed - cancelled.min(counts.failed);
    if failed > 0 {
        let judged = counts.requests.saturating_sub(cancelled + counts.abandoned);
        let share = failed as f64 / judged.max(1) as f64;
        let top = counts
            .top_errors
            .iter()
            .find(|e| e.kind != "cancelled")
            .map(|e| format!("; most often {} ×{}: {}", e.kind, e.count, e.message))
            .unwrap_or_default();
        out.push(finding(
            "errors",
            if share > 0.05 { "critical" } else { "warning" },
            format!(
                "{failed} of {} requests failed ({:.1} %){top}",
                counts.requests - cancelled,
                share * 100.0
            ),
            &[("errors", json!(counts.errors))],
        ));
    }
    out
}

/// Re-sent on a fresh connection and answered: the server drops kept-alive
/// connections. Never answered even then: it refuses requests.
fn closed_connections(counts: &Counts) -> Option<Finding> {
    if counts.retried == 0 {
        return None;
    }
    Some(if counts.retried_succeeded == 0 {
        finding(
            "server_closes_connections",
            "critical",
            format!(
                "the server closed {} connections without answering, fresh ones too: it is refusing requests (not a keep-alive matter on the client's side)",
                counts.retried
            ),
            &[("retried", json!(counts.retried))],
        )
    } else {
        finding(
            "server_closes_keepalive",
            "info",
            format!(
                "{} requests found their kept-alive connection closed by the server and were sent again on a new one; TTFT includes that connect",
                counts.retried
            ),
            &[("retried", json!(counts.retried)), ("requests", json!(counts.requests))],
        )
    })
}

/// An open loop held back by `--max-concurrency`: it was not the load asked.
fn max_concurrency_reached(counts: &Counts) -> Option<Finding> {
    (counts.waited_for_slot > 0).then(|| {
        finding(
            "max_concurrency_reached",
            "warning",
            format!(
                "{} requests could not leave on time because --max-concurrency was reached",
                counts.waited_for_slot
            ),
            &[("waited_for_slot", json!(counts.waited_for_slot))],
        )
    })
}

/// `--class`: one class's SLO met while another's was not, each verdict
/// resting on its own requests: the first is served at the other's
/// expense (a priority, a fairness header, or the mix itself).
pub fn class_tradeoff(
    classes: &BTreeMap<String, crate::results::AdapterFigures>,
) -> Option<Finding> {
    use crate::slo::Verdict;
    let verdict = |c: &crate::results::AdapterFigures| c.slo.as_ref().and_then(|s| s.verdict);
    let named = |v: Verdict| -> Vec<&String> {
        classes
            .iter()
            .filter(|(_, c)| verdict(c) == Some(v))
            .map(|(n, _)| n)
            .collect()
    };
    let (met, missed) = (named(Verdict::Met), named(Verdict::NotMet));
    if met.is_empty() || missed.is_empty() {
        return None;
    }
    let p99 = |n: &String| classes[n].ttft_ms.map_or(f64::NAN, |s| s.p99);
    let list = |names: &[&String]| {
        names
            .iter()
            .map(|n| {
                format!(
                    "{n} (TTFT p99 {:.0} ms, {} requests)",
                    p99(n),
                    classes[*n].requests
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    Some(finding(
        "class_slo_tradeoff",
        "warning",
        format!(
            "{} met its SLO while {} did not: one class is served at the other's expense (each verdict rests on its own requests)",
            list(&met),
            list(&missed)
        ),
        &[("met", json!(met)), ("not_met", json!(missed))],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(counts: &Counts, asked: Asked) -> Vec<Finding> {
        diagnose(
            counts,
            &Latency::default(),
            &Tokens::default(),
            &ClientUsage::default(),
            asked,
        )
    }

    fn find<'a>(all: &'a [Finding], rule: &str) -> Option<&'a Finding> {
        all.iter().find(|f| f.rule == rule)
    }

    #[test]
    fn cancelled_requests_are_not_failures() {
        let counts = Counts {
            requests: 8,
            succeeded: 6,
            failed: 2,
            errors: [("cancelled".to_string(), 2)].into_iter().collect(),
            ..Counts::default()
        };
        let all = rules(&counts, Asked::default());
        assert!(find(&all, "errors").is_none(), "{all:?}");
        assert!(find(&all, "cancelled")
            .unwrap()
            .message
            .contains("not counted as failures"));
    }

    #[test]
    fn short_outputs_advise_ignore_eos_only_when_it_was_not_given() {
        let counts = Counts {
            requests: 4,
            succeeded: 4,
            short_outputs: 3,
            ..Counts::default()
        };
        let plain = rules(&counts, Asked::default());
        assert!(find(&plain, "short_outputs")
            .unwrap()
            .message
            .contains("use --ignore-eos"));
        let forced = rules(
            &counts,
            Asked {
                ignore_eos: true,
                ..Asked::default()
            },
        );
        let m = &find(&forced, "short_outputs").unwrap().message;
        assert!(
            !m.contains("use --ignore-eos") && m.contains("the server ignored it"),
            "{m}"
        );
    }

    #[test]
    fn a_server_that_never_answers_is_not_a_keep_alive_matter() {
        let refusing = Counts {
            requests: 5,
            failed: 5,
            retried: 5,
            retried_succeeded: 0,
            errors: [("connect".to_string(), 5)].into_iter().collect(),
            ..Counts::default()
        };
        let all = rules(&refusing, Asked::default());
        assert!(find(&all, "server_closes_keepalive").is_none());
        assert!(find(&all, "server_closes_connections")
            .unwrap()
            .message
            .contains("refusing"));
        let llama_like = Counts {
            requests: 5,
            succeeded: 5,
            retried: 4,
            retried_succeeded: 4,
            ..Counts::default()
        };
        let all = rules(&llama_like, Asked::default());
        assert!(find(&all, "server_closes_keepalive").is_some());
    }
}
