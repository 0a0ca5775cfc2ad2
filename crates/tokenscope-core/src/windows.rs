//! A long run's figures window by window (`windows.jsonl`): what a soak or
//! a canary is read by, since its whole-run figures average hours together.
//!
//! Window k holds the measured requests that *ended* in [k·W, (k+1)·W) of
//! the run's clock. Records come in finishing order, so a window closes
//! when the first record past its end arrives; a record that comes later
//! still (threads racing by microseconds) is counted in the open window.
//! Windows with no request are written too, so the series has no holes.
//! The last window is cut by the run's end and says so (`partial`).

use crate::metrics::{slo_report, Aggregator};
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

/// A window's counts, record by record. Its distributions are not kept
/// here: each is the difference of the run's own between the window's
/// edges ([`Edge`]), so no sample (a token's gap above all) is recorded twice.
#[derive(Default)]
struct Counts {
    requests: u64,
    succeeded: u64,
    failed: u64,
    errors: BTreeMap<String, u64>,
    output_tokens: u64,
    good_requests: u64,
}

impl Counts {
    /// A measured record, counted as the run's figures count it.
    fn add(&mut self, r: &RequestRecord, slo: Option<&Slo>) {
        self.requests += 1;
        if r.abandoned() {
            return;
        }
        if let Some(kind) = r.error_kind {
            self.failed += 1;
            *self.errors.entry(kind.to_string()).or_insert(0) += 1;
            return;
        }
        self.succeeded += 1;
        self.output_tokens = self.output_tokens.saturating_add(r.output_tokens);
        if slo.is_some_and(|s| s.request_is_good(r)) {
            self.good_requests += 1;
        }
    }
}

/// The run's latency distributions as they stood at a window's edge.
#[derive(Default)]
struct Edge {
    ttft: Distribution,
    tpot: Distribution,
    itl: Distribution,
    e2e: Distribution,
    answer_or_ttft: Distribution,
    lag: Distribution,
}

impl Edge {
    fn of(run: &Aggregator) -> Edge {
        let [(_, ttft), (_, tpot), (_, itl), (_, e2e)] = run.distributions();
        Edge {
            ttft,
            tpot,
            itl,
            e2e,
            answer_or_ttft: run.answer_or_ttft().clone(),
            lag: run.realtime_lag().clone(),
        }
    }

    /// The samples between `earlier` and this edge: one window's (none
    /// where `earlier` was not this run's: a caller's mistake, never a panic).
    fn since(&self, earlier: &Edge) -> Edge {
        let cut = |now: &Distribution, then: &Distribution| now.since(then).unwrap_or_default();
        Edge {
            ttft: cut(&self.ttft, &earlier.ttft),
            tpot: cut(&self.tpot, &earlier.tpot),
            itl: cut(&self.itl, &earlier.itl),
            e2e: cut(&self.e2e, &earlier.e2e),
            answer_or_ttft: cut(&self.answer_or_ttft, &earlier.answer_or_ttft),
            lag: cut(&self.lag, &earlier.lag),
        }
    }
}

const US_TO_MS: f64 = 1e-3;

/// The window being filled, and where the run's figures stood when it opened.
pub struct Windows {
    every_us: u64,
    slo: Option<Slo>,
    index: u64,
    open: Counts,
    opened_at: Edge,
    /// Records in the open window (the figures do not count warm-up).
    seen: u64,
}

impl Windows {
    /// Windows of `every_us` µs, goodput judged by `slo` when given.
    pub fn new(every_us: u64, slo: Option<Slo>) -> Windows {
        Windows {
            every_us: every_us.max(1),
            open: Counts::default(),
            opened_at: Edge::default(),
            slo,
            index: 0,
            seen: 0,
        }
    }

    /// Takes one record; returns the windows it closed (oldest first).
    /// `run`: the run's figures, which take every record right after this
    /// (it holds the records before `r`, none after).
    pub fn add(&mut self, r: &RequestRecord, run: &Aggregator) -> Vec<WindowSummary> {
        let mut closed = Vec::new();
        if r.warmup {
            return closed;
        }
        let k = r.done_at_us / self.every_us;
        while k > self.index {
            closed.push(self.close(false, None, run));
        }
        self.open.add(r, self.slo.as_ref());
        self.seen += 1;
        closed
    }

    /// The open window, cut at `end_us` (the run's end), when it holds a
    /// request; `run` holds every record.
    pub fn finish(mut self, end_us: Option<u64>, run: &Aggregator) -> Option<WindowSummary> {
        (self.seen > 0).then(|| self.close(true, end_us, run))
    }

    fn close(&mut self, partial: bool, end_us: Option<u64>, run: &Aggregator) -> WindowSummary {
        let counts = std::mem::take(&mut self.open);
        // An empty window leaves the edge where it was.
        let dist = match self.seen {
            0 => Edge::default(),
            _ => {
                let now = Edge::of(run);
                let window = now.since(&self.opened_at);
                self.opened_at = now;
                window
            }
        };
        let start = self.index * self.every_us;
        let full_end = start + self.every_us;
        let end = match (partial, end_us) {
            (true, Some(e)) => e.clamp(start + 1, full_end),
            _ => full_end,
        };
        let out = self.line(counts, &dist, (start, end, full_end), partial);
        self.index += 1;
        self.seen = 0;
        out
    }

    /// The window's line from its counts and distributions.
    fn line(
        &self,
        m: Counts,
        d: &Edge,
        (start, end, full_end): (u64, u64, u64),
        partial: bool,
    ) -> WindowSummary {
        let span_s = (end - start) as f64 * 1e-6;
        let latency = Latency {
            ttft_ms: d.ttft.summary(US_TO_MS),
            tpot_ms: d.tpot.summary(US_TO_MS),
            itl_ms: d.itl.summary(US_TO_MS),
            e2e_ms: d.e2e.summary(US_TO_MS),
            ..Latency::default()
        };
        let slo = self.slo.as_ref().map(|s| {
            let samples = |metric: SloMetric| match metric {
                SloMetric::Ttft => &d.ttft,
                SloMetric::AnswerStart => &d.answer_or_ttft,
                SloMetric::Tpot => &d.tpot,
                SloMetric::Itl => &d.itl,
                SloMetric::E2e => &d.e2e,
                SloMetric::Lag => &d.lag,
            };
            slo_report(s, samples, &latency, m.good_requests)
        });
        let q = |s: Option<Summary>| s.map(Quantiles::from);
        WindowSummary {
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
        }
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
        let mut run = Aggregator::new(None, None);
        let mut lines = Vec::new();
        for (id, ms) in [(0, 400), (1, 900), (2, 1500), (3, 3200), (4, 3300)] {
            let r = done_at(id, ms);
            lines.extend(w.add(&r, &run));
            run.add(&r);
        }
        lines.extend(w.finish(Some(3_500_000), &run));
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

    /// A window's figures against the same records' own: counts exact, the
    /// mean to rounding, the quantiles and max to the histogram's 3
    /// significant digits (a window's extremes are its buckets' edges).
    fn agrees(got: Option<Quantiles>, want: Option<Summary>) -> bool {
        match (got, want) {
            (None, None) => true,
            (Some(g), Some(w)) => {
                let near = |a: f64, b: f64, rel: f64| (a - b).abs() <= rel * b.abs() + 1e-3;
                g.count == w.count
                    && near(g.mean, w.mean, 1e-9)
                    && [
                        (g.p50, w.p50),
                        (g.p90, w.p90),
                        (g.p99, w.p99),
                        (g.max, w.max),
                    ]
                    .iter()
                    .all(|&(a, b)| near(a, b, 1e-3))
            }
            _ => false,
        }
    }

    proptest::proptest! {
        /// A window's line holds what the run's own figures would say of
        /// the same records: its four distributions, counts, goodput and
        /// the SLO's verdict, though it records no sample of its own (a
        /// window's distributions are the run's, less the run's at its start).
        #[test]
        fn a_window_says_what_the_run_figures_say_of_its_records(
            records in proptest::collection::vec(
                (proptest::collection::vec((1u64..200_000, 1u32..4), 0..12),
                 proptest::bool::weighted(0.2), 1u64..2_000_000),
                1..40),
        ) {
            let slo = Slo::parse("ttft_p90=800ms,itl_p99=150ms").unwrap();
            let mut w = Windows::new(1 << 40, Some(slo.clone()));
            let mut run = Aggregator::new(Some(slo), None);
            // A first window whose records the second must not count.
            let early = drawn(u64::MAX, &[(50_000, 1), (7, 1)], false, 3);
            proptest::prop_assert!(w.add(&early, &run).is_empty());
            run.add(&early);
            let mut alone = Aggregator::new(w.slo.clone(), None);
            let mut lines = Vec::new();
            for (id, (gaps, failed, ttft)) in records.iter().enumerate() {
                let mut r = drawn(id as u64, gaps, *failed, *ttft);
                r.done_at_us += 1 << 40; // past the first window
                lines.extend(w.add(&r, &run));
                run.add(&r);
                alone.add(&r);
            }
            lines.extend(w.finish(None, &run));
            proptest::prop_assert_eq!(lines.len(), 2);
            let line = lines.pop().unwrap();
            let m = alone.finish();
            proptest::prop_assert_eq!(line.requests, m.counts.requests);
            proptest::prop_assert_eq!(line.failed, m.counts.failed);
            proptest::prop_assert_eq!(&line.errors, &m.counts.errors);
            proptest::prop_assert_eq!(line.output_tokens, m.tokens.output_total);
            for (name, got, want) in [
                ("ttft", line.ttft_ms, m.latency.ttft_ms),
                ("tpot", line.tpot_ms, m.latency.tpot_ms),
                ("itl", line.itl_ms, m.latency.itl_ms),
                ("e2e", line.e2e_ms, m.latency.e2e_ms),
            ] {
                proptest::prop_assert!(agrees(got, want), "{name}: {got:?} vs {want:?}");
            }
            let slo = m.slo.unwrap();
            proptest::prop_assert_eq!(line.good_requests, Some(slo.good_requests));
            proptest::prop_assert_eq!(line.slo, slo.verdict);
        }
    }
}
