//! From records to numbers, exactly as `DESIGN.md` defines them.

use crate::cost::Cost;
use crate::cost::GpuPrice;
use crate::record::{RequestRecord, TokenSource};
use crate::results::{
    Concurrency, Counts, ErrorSample, Latency, ObjectiveResult, SloReport, SteadyWindow,
    Throughput, Tokens, Window,
};
use crate::slo::{Slo, SloMetric, Verdict};
use crate::stats::Distribution;
use std::collections::BTreeMap;

const US: f64 = 1e-6;
/// Distributions hold microseconds; summaries report milliseconds.
const US_TO_MS: f64 = 1e-3;

/// Everything computed from the records alone.
#[derive(Debug, Clone)]
pub struct Measured {
    pub window: Window,
    pub latency: Latency,
    pub throughput: Throughput,
    pub counts: Counts,
    pub tokens: Tokens,
    pub slo: Option<SloReport>,
    pub cost: Option<Cost>,
}

/// Computes the run's metrics over the measured (non-warm-up) records.
pub fn measure(records: &[RequestRecord], slo: Option<&Slo>, price: Option<GpuPrice>) -> Measured {
    let measured: Vec<&RequestRecord> = records.iter().filter(|r| !r.warmup).collect();
    let ok: Vec<&RequestRecord> = measured.iter().copied().filter(|r| r.succeeded()).collect();

    let window = window(&measured);
    let latency = latency(&measured, &ok);
    let counts = counts(records, &measured);
    let tokens = tokens(&ok);

    let window_s = window.duration_s;
    let rate = |x: f64| if window_s > 0.0 { x / window_s } else { 0.0 };
    let good: Option<Vec<&RequestRecord>> = slo.map(|s| {
        ok.iter()
            .copied()
            .filter(|r| s.request_is_good(r))
            .collect()
    });
    let good_tokens = good
        .as_ref()
        .map(|g| g.iter().map(|r| r.output_tokens).sum::<u64>());

    let mut per_user = Distribution::new();
    for tpot in ok.iter().filter_map(|r| r.tpot_us()) {
        if tpot > 0.0 {
            per_user.record(1e6 / tpot * 1e3); // milli-tokens/s keeps 3 digits of precision
        }
    }

    let throughput = Throughput {
        output_tokens_per_s: rate(tokens.output_total as f64),
        total_tokens_per_s: rate((tokens.output_total + tokens.input_total) as f64),
        requests_per_s: rate(counts.succeeded as f64),
        goodput_requests_per_s: good.as_ref().map(|g| rate(g.len() as f64)),
        goodput_output_tokens_per_s: good_tokens.map(|t| rate(t as f64)),
        per_user_output_tokens_per_s: per_user.summary(1e-3),
        concurrency: concurrency(&measured, window.start_s, window.end_s),
    };

    let slo_report = slo.map(|s| {
        slo_report(
            s,
            &ok,
            &latency,
            good.as_ref().map_or(0, |g| g.len() as u64),
        )
    });
    let cost = price.map(|p| {
        p.cost(
            window_s,
            tokens.output_total,
            tokens.output_total + tokens.input_total,
            good_tokens,
        )
    });

    Measured {
        window,
        latency,
        throughput,
        counts,
        tokens,
        slo: slo_report,
        cost,
    }
}

fn window(measured: &[&RequestRecord]) -> Window {
    let Some(start) = measured.iter().map(|r| r.sent_at_us).min() else {
        return Window::default();
    };
    let end = measured.iter().map(|r| r.done_at_us).max().unwrap_or(start);
    let (start_s, end_s) = (start as f64 * US, end as f64 * US);

    // Steady state: from the first completion (the pipeline is full) to the
    // last send (after it the load only drains).
    let first_done = measured.iter().map(|r| r.done_at_us).min().unwrap_or(end);
    let last_sent = measured.iter().map(|r| r.sent_at_us).max().unwrap_or(start);
    let steady = (last_sent > first_done).then(|| {
        let (a, b) = (first_done, last_sent);
        let span_s = (b - a) as f64 * US;
        let tokens: u64 = measured
            .iter()
            .filter(|r| r.succeeded())
            .flat_map(|r| r.chunks.iter())
            .filter(|c| c.at_us() > a && c.at_us() <= b)
            .map(|c| c.tokens() as u64)
            .sum();
        let done = measured
            .iter()
            .filter(|r| r.succeeded() && r.done_at_us > a && r.done_at_us <= b)
            .count();
        SteadyWindow {
            start_s: a as f64 * US,
            end_s: b as f64 * US,
            duration_s: span_s,
            output_tokens_per_s: tokens as f64 / span_s,
            requests_per_s: done as f64 / span_s,
            concurrency_mean: concurrency(measured, a as f64 * US, b as f64 * US).mean,
        }
    });
    Window {
        start_s,
        end_s,
        duration_s: end_s - start_s,
        steady,
    }
}

/// In-flight requests (sent, not yet done): time-weighted mean over [from, to] and max.
fn concurrency(measured: &[&RequestRecord], from_s: f64, to_s: f64) -> Concurrency {
    let mut events: Vec<(u64, i64)> = Vec::with_capacity(measured.len() * 2);
    for r in measured {
        events.push((r.sent_at_us, 1));
        events.push((r.done_at_us.max(r.sent_at_us), -1));
    }
    // Ends before starts at the same instant: a closed loop's hand-over is not 2 in flight.
    events.sort_unstable_by_key(|&(t, d)| (t, d));
    let (from, to) = ((from_s / US).round() as u64, (to_s / US).round() as u64);
    let (mut level, mut max, mut area, mut last) = (0i64, 0i64, 0f64, from);
    for (t, d) in events {
        let t_clamped = t.clamp(from, to);
        area += level as f64 * (t_clamped - last.min(t_clamped)) as f64;
        last = last.max(t_clamped);
        level += d;
        if t >= from && t <= to {
            max = max.max(level);
        }
    }
    let span = to.saturating_sub(from) as f64;
    Concurrency {
        mean: if span > 0.0 { area / span } else { 0.0 },
        max: max.max(0) as u64,
    }
}

fn latency(measured: &[&RequestRecord], ok: &[&RequestRecord]) -> Latency {
    let (mut ttft, mut ttft_sched, mut tpot, mut itl, mut icl, mut e2e, mut lag) = (
        Distribution::new(),
        Distribution::new(),
        Distribution::new(),
        Distribution::new(),
        Distribution::new(),
        Distribution::new(),
        Distribution::new(),
    );
    for r in ok {
        if let Some(v) = r.ttft_us() {
            ttft.record(v as f64);
        }
        if let Some(v) = r.ttft_from_scheduled_us() {
            ttft_sched.record(v as f64);
        }
        if let Some(v) = r.tpot_us() {
            tpot.record(v);
        }
        for (gap, k) in r.itl_us() {
            itl.record_n(gap, k as u64);
        }
        for gap in r.chunk_gaps_us() {
            icl.record(gap as f64);
        }
        e2e.record(r.e2e_us() as f64);
    }
    for r in measured {
        lag.record(r.lag_us() as f64);
    }
    Latency {
        ttft_ms: ttft.summary(US_TO_MS),
        ttft_from_scheduled_ms: ttft_sched.summary(US_TO_MS),
        tpot_ms: tpot.summary(US_TO_MS),
        itl_ms: itl.summary(US_TO_MS),
        icl_ms: icl.summary(US_TO_MS),
        e2e_ms: e2e.summary(US_TO_MS),
        client_lag_ms: lag.summary(US_TO_MS),
    }
}

fn counts(all: &[RequestRecord], measured: &[&RequestRecord]) -> Counts {
    let mut errors = BTreeMap::new();
    for kind in measured.iter().filter_map(|r| r.error_kind) {
        *errors.entry(kind.to_string()).or_insert(0) += 1;
    }
    let failed: u64 = errors.values().sum();
    Counts {
        requests: measured.len() as u64,
        succeeded: measured.len() as u64 - failed,
        failed,
        errors,
        warmup: (all.len() - measured.len()) as u64,
        short_outputs: measured.iter().filter(|r| r.short_output()).count() as u64,
        waited_for_slot: measured.iter().filter(|r| r.waited_for_slot).count() as u64,
        retried: measured.iter().filter(|r| r.retries > 0).count() as u64,
        implausible_usage: measured
            .iter()
            .filter(|r| r.implausible_usage.is_some())
            .count() as u64,
        retried_succeeded: measured
            .iter()
            .filter(|r| r.retries > 0 && r.succeeded())
            .count() as u64,
        top_errors: top_errors(measured),
    }
}

/// The three most frequent (kind, message) pairs among the failures.
fn top_errors(measured: &[&RequestRecord]) -> Vec<ErrorSample> {
    let mut by: BTreeMap<(String, String), u64> = BTreeMap::new();
    for r in measured {
        if let Some(kind) = r.error_kind {
            let message = r.error.clone().unwrap_or_default();
            *by.entry((kind.to_string(), message)).or_insert(0) += 1;
        }
    }
    let mut list: Vec<ErrorSample> = by
        .into_iter()
        .map(|((kind, message), count)| ErrorSample {
            kind,
            message,
            count,
        })
        .collect();
    list.sort_by_key(|e| std::cmp::Reverse(e.count));
    list.truncate(3);
    list
}

fn source_name(s: Option<TokenSource>) -> String {
    match s {
        Some(s) => serde_json::to_value(s)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        None => "unknown".into(),
    }
}

fn tokens(ok: &[&RequestRecord]) -> Tokens {
    let mut t = Tokens::default();
    for r in ok {
        // Saturating: a total never wraps round to a small number.
        t.input_total = t.input_total.saturating_add(r.input_tokens.unwrap_or(0));
        t.output_total = t.output_total.saturating_add(r.output_tokens);
        *t.input_sources
            .entry(source_name(r.input_token_source))
            .or_insert(0) += 1;
        *t.output_sources
            .entry(source_name(r.output_token_source))
            .or_insert(0) += 1;
        for c in &r.chunks {
            *t.tokens_per_chunk.entry(c.tokens()).or_insert(0) += 1;
        }
    }
    t.multi_token_chunks = t.tokens_per_chunk.keys().any(|&k| k > 1);
    t
}

/// The samples of one metric over the successful requests, in microseconds.
fn samples(metric: SloMetric, ok: &[&RequestRecord]) -> Distribution {
    let mut d = Distribution::new();
    for r in ok {
        match metric {
            SloMetric::Ttft => r.ttft_us().into_iter().for_each(|v| d.record(v as f64)),
            SloMetric::Tpot => r.tpot_us().into_iter().for_each(|v| d.record(v)),
            SloMetric::E2e => d.record(r.e2e_us() as f64),
            SloMetric::Itl => r.itl_us().for_each(|(gap, k)| d.record_n(gap, k as u64)),
        }
    }
    d
}

/// Each objective judged on its samples (see [`crate::slo`]), with the
/// summary's figure as the estimate.
pub fn slo_report(
    slo: &Slo,
    ok: &[&RequestRecord],
    latency: &Latency,
    good_requests: u64,
) -> SloReport {
    let objectives: Vec<ObjectiveResult> = slo
        .objectives
        .iter()
        .map(|o| {
            let summary = match o.metric {
                SloMetric::Ttft => latency.ttft_ms,
                SloMetric::Tpot => latency.tpot_ms,
                SloMetric::Itl => latency.itl_ms,
                SloMetric::E2e => latency.e2e_ms,
            };
            o.judge(&samples(o.metric, ok), summary.and_then(|s| s.get(&o.stat)))
        })
        .collect();
    let verdict = Verdict::all(objectives.iter().filter_map(|o| o.verdict));
    SloReport {
        met: verdict == Verdict::Met,
        verdict: Some(verdict),
        objectives,
        good_requests,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Chunk, ErrorKind};

    /// A request sent at `sent` (ms) with `n` tokens: first after `ttft` ms, then every `itl` ms.
    fn req(id: u64, sent: u64, ttft: u64, itl: u64, n: u64) -> RequestRecord {
        let chunks: Vec<Chunk> = (0..n)
            .map(|i| Chunk((sent + ttft + i * itl) * 1000, 1))
            .collect();
        RequestRecord::test_success(id, sent * 1000, chunks, 100)
    }

    #[test]
    fn closed_loop_of_two() {
        // Two slots, each serving back-to-back requests of 1 s: 100 ms TTFT + 9 × 100 ms.
        let mut records = vec![];
        for slot in 0..2u64 {
            for i in 0..5u64 {
                records.push(req(slot * 5 + i, i * 1000, 100, 100, 10));
            }
        }
        let m = measure(&records, None, None);
        assert_eq!(m.counts.requests, 10);
        assert_eq!(m.counts.succeeded, 10);
        assert!((m.window.duration_s - 5.0).abs() < 1e-9);
        assert!((m.throughput.output_tokens_per_s - 20.0).abs() < 1e-9);
        assert!((m.throughput.total_tokens_per_s - 220.0).abs() < 1e-9);
        assert!((m.throughput.requests_per_s - 2.0).abs() < 1e-9);
        assert_eq!(m.throughput.concurrency.max, 2);
        assert!((m.throughput.concurrency.mean - 2.0).abs() < 1e-9);
        let ttft = m.latency.ttft_ms.unwrap();
        assert!((ttft.p50 - 100.0).abs() < 0.1 && (ttft.mean - 100.0).abs() < 1e-9);
        assert!((m.latency.tpot_ms.unwrap().mean - 100.0).abs() < 1e-9);
        assert!((m.latency.e2e_ms.unwrap().mean - 1000.0).abs() < 1e-9);
        let per_user = m.throughput.per_user_output_tokens_per_s.unwrap();
        assert!((per_user.mean - 10.0).abs() < 1e-9);
        let steady = m.window.steady.unwrap();
        assert!((steady.start_s - 1.0).abs() < 1e-9 && (steady.end_s - 4.0).abs() < 1e-9);
        assert!((steady.output_tokens_per_s - 20.0).abs() < 1e-9);
        assert!(!m.tokens.multi_token_chunks);
    }

    #[test]
    fn failures_and_warmup_are_counted_not_averaged() {
        let mut records = vec![
            req(0, 0, 100, 10, 5),
            req(1, 0, 100, 10, 5),
            req(2, 0, 100, 10, 5),
        ];
        records[0].warmup = true;
        records[2].error_kind = Some(ErrorKind::Http(429));
        records[2].chunks.clear();
        records[2].first_token_at_us = None;
        records[2].output_tokens = 0;
        let m = measure(&records, None, None);
        assert_eq!(m.counts.warmup, 1);
        assert_eq!(m.counts.requests, 2);
        assert_eq!(m.counts.failed, 1);
        assert_eq!(m.counts.errors.get("http_429"), Some(&1));
        assert_eq!(m.latency.ttft_ms.unwrap().count, 1);
        assert_eq!(m.tokens.output_total, 5);
    }

    #[test]
    fn goodput_and_slo_verdict() {
        let records = vec![req(0, 0, 100, 10, 5), req(1, 0, 300, 10, 5)];
        let slo = Slo::parse("ttft_p99=200ms").unwrap();
        let m = measure(&records, Some(&slo), None);
        let report = m.slo.unwrap();
        assert_eq!(report.good_requests, 1);
        assert!(!report.met, "p99 TTFT is 300 ms");
        // Two requests cannot decide a p99 that one of them passes.
        assert_eq!(report.verdict, Some(Verdict::NotEnoughData));
        assert_eq!(report.objectives[0].n, Some(2));
        assert!(m.throughput.goodput_requests_per_s.unwrap() > 0.0);
        // The maximum is a statement about these requests: judged at once.
        let lenient = Slo::parse("ttft_max=400ms").unwrap();
        let report = measure(&records, Some(&lenient), None).slo.unwrap();
        assert_eq!(report.verdict, Some(Verdict::Met));
        assert!(report.met);
        let strict = Slo::parse("ttft_max=200ms").unwrap();
        let report = measure(&records, Some(&strict), None).slo.unwrap();
        assert_eq!(report.verdict, Some(Verdict::NotMet));
    }

    #[test]
    fn short_outputs_are_flagged() {
        let mut r = req(0, 0, 10, 10, 5);
        r.requested_output_tokens = Some(8);
        let m = measure(&[r], None, None);
        assert_eq!(m.counts.short_outputs, 1);
    }
}
