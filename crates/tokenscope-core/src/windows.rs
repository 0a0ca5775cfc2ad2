//! A long run's figures window by window (`windows.jsonl`): what a soak or
//! a canary is read by, since its whole-run figures average hours together.
//!
//! Window k holds the measured requests that *ended* in [k·W, (k+1)·W) of
//! the run's clock. Records come in finishing order, so a window closes
//! when the first record past its end arrives; a record that comes later
//! still (threads racing by microseconds) is counted in the open window.
//! Windows with no request are written too, so the series has no holes.
//! The last window is cut by the run's end and says so (`partial`).

use crate::metrics::slo_report;
use crate::record::RequestRecord;
use crate::results::Latency;
use crate::slo::{Slo, SloMetric};
use crate::stats::{Distribution, Summary};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One line of `windows.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WindowSummary {
    pub window: u64,
    pub start_s: f64,
    pub end_s: f64,
    /// The run ended inside this window: its rates are over the part run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
    pub requests: u64,
    pub succeeded: u64,
    pub failed: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub errors: BTreeMap<String, u64>,
    pub output_tokens: u64,
    /// Over the window's length (not the requests' own span).
    pub requests_per_s: f64,
    pub output_tokens_per_s: f64,
    /// With `--slo`: requests that met every objective.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub good_requests: Option<u64>,
    /// With `--slo`: the objectives judged over this window's requests
    /// alone (`not_enough_data` when a statistic rests on too few).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo: Option<crate::slo::Verdict>,
    pub ttft_ms: Option<Quantiles>,
    pub tpot_ms: Option<Quantiles>,
    pub itl_ms: Option<Quantiles>,
    pub e2e_ms: Option<Quantiles>,
}

/// A window's distribution, reduced to what a time series plots.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Quantiles {
    pub count: u64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl From<Summary> for Quantiles {
    fn from(s: Summary) -> Self {
        Quantiles {
            count: s.count,
            mean: s.mean,
            p50: s.p50,
            p90: s.p90,
            p99: s.p99,
            max: s.max,
        }
    }
}

/// What a window's line is made of: its counts and four distributions,
/// nothing else of the run's figures (a window closes every minute of a
/// soak, and each record's every gap is taken here as well as in the run's).
struct Figures {
    requests: u64,
    succeeded: u64,
    failed: u64,
    errors: BTreeMap<String, u64>,
    output_tokens: u64,
    good_requests: u64,
    ttft: Distribution,
    tpot: Distribution,
    itl: Distribution,
    e2e: Distribution,
    /// What an `answer_start` objective is judged on (only with one).
    answer_or_ttft: Distribution,
}

impl Figures {
    fn new() -> Figures {
        Figures {
            requests: 0,
            succeeded: 0,
            failed: 0,
            errors: BTreeMap::new(),
            output_tokens: 0,
            good_requests: 0,
            ttft: Distribution::new(),
            tpot: Distribution::new(),
            itl: Distribution::new(),
            e2e: Distribution::new(),
            answer_or_ttft: Distribution::new(),
        }
    }

    /// A measured record, as the run's figures take it (ITL: the gaps of
    /// single-token chunks as they are, a multi-token chunk's split).
    fn add(&mut self, r: &RequestRecord, slo: Option<&Slo>) {
        self.requests += 1;
        if let Some(kind) = r.error_kind {
            self.failed += 1;
            *self.errors.entry(kind.to_string()).or_insert(0) += 1;
            return;
        }
        self.succeeded += 1;
        self.output_tokens = self.output_tokens.saturating_add(r.output_tokens);
        if let Some(v) = r.ttft_us() {
            self.ttft.record_us(v);
        }
        if let Some(v) = r.tpot_us() {
            self.tpot.record(v);
        }
        if r.chunks.iter().all(|c| c.tokens() <= 1) {
            r.chunk_gaps_us().for_each(|gap| self.itl.record_us(gap));
        } else {
            r.itl_us().for_each(|(gap, k)| self.itl.record_n(gap, k as u64));
        }
        self.e2e.record_us(r.e2e_us());
        let Some(slo) = slo else { return };
        if let Some(v) = r.answer_start_or_ttft_us() {
            self.answer_or_ttft.record_us(v);
        }
        self.good_requests += slo.request_is_good(r) as u64;
    }
}

const US_TO_MS: f64 = 1e-3;

/// The window being filled, and how to make the next.
pub struct Windows {
    every_us: u64,
    slo: Option<Slo>,
    index: u64,
    open: Figures,
    /// Records in the open window (the figures do not count warm-up).
    seen: u64,
}

impl Windows {
    /// Windows of `every_us` µs, goodput judged by `slo` when given.
    pub fn new(every_us: u64, slo: Option<Slo>) -> Windows {
        Windows {
            every_us: every_us.max(1),
            open: Figures::new(),
            slo,
            index: 0,
            seen: 0,
        }
    }

    /// Takes one record; returns the windows it closed (oldest first).
    pub fn add(&mut self, r: &RequestRecord) -> Vec<WindowSummary> {
        let mut closed = Vec::new();
        if r.warmup {
            return closed;
        }
        let k = r.done_at_us / self.every_us;
        while k > self.index {
            closed.push(self.close(false, None));
        }
        self.open.add(r, self.slo.as_ref());
        self.seen += 1;
        closed
    }

    /// The open window, cut at `end_us` (the run's end), when it holds a request.
    pub fn finish(mut self, end_us: Option<u64>) -> Option<WindowSummary> {
        (self.seen > 0).then(|| self.close(true, end_us))
    }

    fn close(&mut self, partial: bool, end_us: Option<u64>) -> WindowSummary {
        let m = std::mem::replace(&mut self.open, Figures::new());
        let start = self.index * self.every_us;
        let full_end = start + self.every_us;
        let end = match (partial, end_us) {
            (true, Some(e)) => e.clamp(start + 1, full_end),
            _ => full_end,
        };
        let span_s = (end - start) as f64 * 1e-6;
        let latency = Latency {
            ttft_ms: m.ttft.summary(US_TO_MS),
            tpot_ms: m.tpot.summary(US_TO_MS),
            itl_ms: m.itl.summary(US_TO_MS),
            e2e_ms: m.e2e.summary(US_TO_MS),
            ..Latency::default()
        };
        let slo = self.slo.as_ref().map(|s| {
            let samples = |metric: SloMetric| match metric {
                SloMetric::Ttft => &m.ttft,
                SloMetric::AnswerStart => &m.answer_or_ttft,
                SloMetric::Tpot => &m.tpot,
                SloMetric::Itl => &m.itl,
                SloMetric::E2e => &m.e2e,
            };
            slo_report(s, samples, &latency, m.good_requests)
        });
        let q = |s: Option<Summary>| s.map(Quantiles::from);
        let out = WindowSummary {
            window: self.index,
            start_s: start as f64 * 1e-6,
            end_s: end as f64 * 1e-6,
            partial: partial && end < full_end,
            requests: m.requests,
            succeeded: m.succeeded,
            failed: m.failed,
            errors: m.errors,
            output_tokens: m.output_tokens,
            requests_per_s: m.succeeded as f64 / span_s,
            output_tokens_per_s: m.output_tokens as f64 / span_s,
            good_requests: slo.as_ref().map(|s| s.good_requests),
            slo: slo.as_ref().and_then(|s| s.verdict),
            ttft_ms: q(latency.ttft_ms),
            tpot_ms: q(latency.tpot_ms),
            itl_ms: q(latency.itl_ms),
            e2e_ms: q(latency.e2e_ms),
        };
        self.index += 1;
        self.seen = 0;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Chunk;

    fn done_at(id: u64, done_ms: u64) -> RequestRecord {
        let sent = done_ms.saturating_sub(300) * 1000;
        let mut r = RequestRecord::sent(id, sent, sent);
        r.chunks = (0..10)
            .map(|i| Chunk(sent + 100_000 + i * 20_000, 1))
            .collect();
        r.first_token_at_us = Some(sent + 100_000);
        r.output_tokens = 10;
        r.done_at_us = done_ms * 1000;
        r
    }

    #[test]
    fn windows_split_by_end_time_and_fill_the_holes() {
        let mut w = Windows::new(1_000_000, None);
        let mut lines = Vec::new();
        for (id, ms) in [(0, 400), (1, 900), (2, 1500), (3, 3200), (4, 3300)] {
            lines.extend(w.add(&done_at(id, ms)));
        }
        lines.extend(w.finish(Some(3_500_000)));
        let counts: Vec<(u64, u64, bool)> = lines
            .iter()
            .map(|l| (l.window, l.requests, l.partial))
            .collect();
        assert_eq!(
            counts,
            [(0, 2, false), (1, 1, false), (2, 0, false), (3, 2, true)]
        );
        assert_eq!(lines[0].output_tokens_per_s, 20.0);
        assert!(lines[2].ttft_ms.is_none());
        assert_eq!(lines[3].end_s, 3.5);
        assert_eq!(
            lines[3].output_tokens_per_s, 40.0,
            "over the half window run"
        );
        assert_eq!(lines[0].ttft_ms.unwrap().p50.round(), 100.0);
    }

    /// A record from drawn numbers: chunks of one or several tokens, or a failure.
    fn drawn(id: u64, gaps: &[(u64, u32)], failed: bool, ttft: u64) -> RequestRecord {
        let mut r = RequestRecord::sent(id, 1000, 1000);
        let mut at = 1000 + ttft;
        r.first_token_at_us = Some(at);
        for &(gap, k) in gaps {
            r.chunks.push(Chunk(at, k));
            at += gap;
        }
        r.output_tokens = r.chunks.iter().map(|c| c.1 as u64).sum();
        r.done_at_us = at;
        if failed {
            r.error_kind = Some(crate::record::ErrorKind::Timeout);
        }
        r
    }

    proptest::proptest! {
        /// A window's line holds what the run's own figures would say of
        /// the same records: its four distributions, counts, goodput and
        /// the SLO's verdict, though it keeps nothing else of them.
        #[test]
        fn a_window_says_what_the_run_figures_say_of_its_records(
            records in proptest::collection::vec(
                (proptest::collection::vec((1u64..200_000, 1u32..4), 0..12),
                 proptest::bool::weighted(0.2), 1u64..2_000_000),
                1..40),
        ) {
            let slo = Slo::parse("ttft_p90=800ms,itl_p99=150ms").unwrap();
            let mut w = Windows::new(u64::MAX / 2, Some(slo.clone()));
            let mut run = crate::metrics::Aggregator::new(Some(slo), None);
            for (id, (gaps, failed, ttft)) in records.iter().enumerate() {
                let r = drawn(id as u64, gaps, *failed, *ttft);
                proptest::prop_assert!(w.add(&r).is_empty());
                run.add(&r);
            }
            let line = w.finish(None).unwrap();
            let m = run.finish();
            let q = |s: Option<Summary>| s.map(Quantiles::from);
            proptest::prop_assert_eq!(line.requests, m.counts.requests);
            proptest::prop_assert_eq!(line.failed, m.counts.failed);
            proptest::prop_assert_eq!(&line.errors, &m.counts.errors);
            proptest::prop_assert_eq!(line.output_tokens, m.tokens.output_total);
            proptest::prop_assert_eq!(line.ttft_ms, q(m.latency.ttft_ms));
            proptest::prop_assert_eq!(line.tpot_ms, q(m.latency.tpot_ms));
            proptest::prop_assert_eq!(line.itl_ms, q(m.latency.itl_ms));
            proptest::prop_assert_eq!(line.e2e_ms, q(m.latency.e2e_ms));
            let slo = m.slo.unwrap();
            proptest::prop_assert_eq!(line.good_requests, Some(slo.good_requests));
            proptest::prop_assert_eq!(line.slo, slo.verdict);
        }
    }
}
