//! A long run's figures window by window (`windows.jsonl`): what a soak or
//! a canary is read by, since its whole-run figures average hours together.
//!
//! Window k holds the measured requests that *ended* in [k·W, (k+1)·W) of
//! the run's clock. Records come in finishing order, so a window closes
//! when the first record past its end arrives; a record that comes later
//! still (threads racing by microseconds) is counted in the open window.
//! Windows with no request are written too, so the series has no holes.
//! The last window is cut by the run's end and says so (`partial`).

use crate::metrics::Aggregator;
use crate::record::RequestRecord;
use crate::slo::Slo;
use crate::stats::Summary;
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

/// The window being filled, and how to make the next.
pub struct Windows {
    every_us: u64,
    slo: Option<Slo>,
    index: u64,
    open: Aggregator,
    /// Records in the open window (the aggregator does not count warm-up).
    seen: u64,
}

impl Windows {
    /// Windows of `every_us` µs, goodput judged by `slo` when given.
    pub fn new(every_us: u64, slo: Option<Slo>) -> Windows {
        Windows {
            every_us: every_us.max(1),
            open: Aggregator::new(slo.clone(), None),
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
        self.open.add(r);
        self.seen += 1;
        closed
    }

    /// The open window, cut at `end_us` (the run's end), when it holds a request.
    pub fn finish(mut self, end_us: Option<u64>) -> Option<WindowSummary> {
        (self.seen > 0).then(|| self.close(true, end_us))
    }

    fn close(&mut self, partial: bool, end_us: Option<u64>) -> WindowSummary {
        let fresh = Aggregator::new(self.slo.clone(), None);
        let m = std::mem::replace(&mut self.open, fresh).finish();
        let start = self.index * self.every_us;
        let full_end = start + self.every_us;
        let end = match (partial, end_us) {
            (true, Some(e)) => e.clamp(start + 1, full_end),
            _ => full_end,
        };
        let span_s = (end - start) as f64 * 1e-6;
        let q = |s: Option<Summary>| s.map(Quantiles::from);
        let out = WindowSummary {
            window: self.index,
            start_s: start as f64 * 1e-6,
            end_s: end as f64 * 1e-6,
            partial: partial && end < full_end,
            requests: m.counts.requests,
            succeeded: m.counts.succeeded,
            failed: m.counts.failed,
            errors: m.counts.errors,
            output_tokens: m.tokens.output_total,
            requests_per_s: m.counts.succeeded as f64 / span_s,
            output_tokens_per_s: m.tokens.output_total as f64 / span_s,
            good_requests: m.slo.as_ref().map(|s| s.good_requests),
            slo: m.slo.as_ref().and_then(|s| s.verdict),
            ttft_ms: q(m.latency.ttft_ms),
            tpot_ms: q(m.latency.tpot_ms),
            itl_ms: q(m.latency.itl_ms),
            e2e_ms: q(m.latency.e2e_ms),
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
}
