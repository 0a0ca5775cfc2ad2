//! Whether an open loop's arrivals outran the server: its queue grew
//! through the run, so the figures describe a backlog at the moment the
//! run ended, not a steady state any user would meet.
//!
//! The rule, over the measured requests sent in the last half of the run's
//! sending (at least [`MIN_REQUESTS`] of them over [`MIN_SPAN_S`]): fit TTFT
//! against send time by least squares. A server whose queue grows because
//! requests arrive at λ and leave at μ < λ makes each request wait
//! (λ − μ)/μ seconds longer for each second later it is sent, so the slope
//! *b* estimates λ/μ − 1, and the server's capacity is about λ / (1 + b).
//! The queue is called growing when *b* ≥ [`MIN_GROWTH`] (arrivals at
//! least 5 % past what it serves) and the 95 % interval of *b* lies above
//! [`MIN_GROWTH_LOW`]. A server that keeps up has a flat TTFT (its slope's
//! interval holds 0) whatever its level; one warming up or cooling has a
//! slope too small to pass.
//!
//! GuideLLM's over-saturation constraint fits the same kind of slope (of
//! TTFT and of the in-flight count, over a sliding 120 s) to stop a run
//! early; this is the after-the-run verdict, with the capacity estimate
//! the slope gives.

use serde_json::json;

/// Fewer requests in the fit decide nothing.
pub const MIN_REQUESTS: usize = 30;
/// A fit over less sending than this decides nothing.
pub const MIN_SPAN_S: f64 = 10.0;
/// The slope (s of TTFT a s of sending) that counts as a growing queue.
pub const MIN_GROWTH: f64 = 0.05;
/// The least the slope's 95 % interval may reach down to.
pub const MIN_GROWTH_LOW: f64 = 0.02;

/// The fit of TTFT against send time over the last half of the sending.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueGrowth {
    /// Seconds of TTFT added for each second later a request was sent.
    pub slope: f64,
    /// Its 95 % interval.
    pub low: f64,
    pub high: f64,
    pub requests: usize,
    /// The sends the fit covers, seconds into the run.
    pub from_s: f64,
    pub to_s: f64,
    /// The fitted TTFT at those two ends, ms.
    pub ttft_from_ms: f64,
    pub ttft_to_ms: f64,
    /// Requests sent a second over the fit (of those that had a first token).
    pub arrival_rate: f64,
}

impl QueueGrowth {
    /// Fits the (send µs, TTFT µs) of the measured requests; `None` when
    /// too few were sent over too short a span to decide.
    pub fn fit(points: impl Iterator<Item = (u64, u64)>) -> Option<QueueGrowth> {
        let points: Vec<(u64, u64)> = points.collect();
        let first = points.iter().map(|p| p.0).min()?;
        let last = points.iter().map(|p| p.0).max()?;
        let half = first + (last - first) / 2;
        QueueGrowth::fit_all(points.into_iter().filter(|p| p.0 >= half))
    }

    /// The fit over every (send µs, TTFT µs) given (a sliding window's:
    /// `--stop-on saturation`); `None` when they are too few or too close.
    pub fn fit_all(points: impl Iterator<Item = (u64, u64)>) -> Option<QueueGrowth> {
        let mut tail: Vec<(f64, f64)> = points
            .map(|(sent, ttft)| (sent as f64 * 1e-6, ttft as f64 * 1e-6))
            .collect();
        tail.sort_by(|a, b| a.0.total_cmp(&b.0));
        let n = tail.len();
        let (from_s, to_s) = (tail.first()?.0, tail.last()?.0);
        if n < MIN_REQUESTS || to_s - from_s < MIN_SPAN_S {
            return None;
        }
        let nf = n as f64;
        let mean_x = tail.iter().map(|p| p.0).sum::<f64>() / nf;
        let mean_y = tail.iter().map(|p| p.1).sum::<f64>() / nf;
        let sxx: f64 = tail.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
        let sxy: f64 = tail.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
        let slope = sxy / sxx;
        let intercept = mean_y - slope * mean_x;
        let rss: f64 = tail
            .iter()
            .map(|p| (p.1 - intercept - slope * p.0).powi(2))
            .sum();
        let dof = nf - 2.0;
        let se = (rss / dof / sxx).sqrt();
        // Student's t at 97.5 %, to within 0.005 for 28 degrees of freedom and more.
        let t = 1.96 + 2.4 / dof;
        Some(QueueGrowth {
            slope,
            low: slope - t * se,
            high: slope + t * se,
            requests: n,
            from_s,
            to_s,
            ttft_from_ms: (intercept + slope * from_s) * 1e3,
            ttft_to_ms: (intercept + slope * to_s) * 1e3,
            arrival_rate: (nf - 1.0) / (to_s - from_s),
        })
    }

    /// The queue grew, by the rule in the module's doc.
    pub fn growing(&self) -> bool {
        self.slope >= MIN_GROWTH && self.low > MIN_GROWTH_LOW
    }

    /// The `queue_growing` finding, when the queue grew.
    pub fn finding(&self) -> Option<crate::results::Finding> {
        if !self.growing() {
            return None;
        }
        let capacity = self.arrival_rate / (1.0 + self.slope);
        let advice = format!(
            "requests came at {:.3}/s and the server kept up with about {capacity:.3}/s: measure at or below that rate for a steady state",
            self.arrival_rate
        );
        let message = format!(
            "arrivals outran the server: over the last {:.0} s of sending, each second later a request was sent it waited {:.0} ms longer for its first token (95 % interval {:.0}–{:.0} ms, {} requests; fitted TTFT {:.0} → {:.0} ms). Its queue grew through the run, so these figures are of a backlog when the run ended, not a steady state; {advice}",
            self.to_s - self.from_s,
            self.slope * 1e3,
            self.low * 1e3,
            self.high * 1e3,
            self.requests,
            self.ttft_from_ms,
            self.ttft_to_ms,
        );
        let evidence = [
            ("ttft_growth_ms_per_s", json!(self.slope * 1e3)),
            ("ttft_growth_low_ms_per_s", json!(self.low * 1e3)),
            ("ttft_growth_high_ms_per_s", json!(self.high * 1e3)),
            ("requests", json!(self.requests)),
            ("from_s", json!(self.from_s)),
            ("to_s", json!(self.to_s)),
            ("fitted_ttft_from_ms", json!(self.ttft_from_ms)),
            ("fitted_ttft_to_ms", json!(self.ttft_to_ms)),
            ("arrival_rate_requests_per_s", json!(self.arrival_rate)),
            ("capacity_estimate_requests_per_s", json!(capacity)),
            ("rule", json!(format!("slope ≥ {MIN_GROWTH} s/s and its 95 % interval above {MIN_GROWTH_LOW}, over ≥ {MIN_REQUESTS} requests sent in the last half of the run (≥ {MIN_SPAN_S} s)"))),
        ];
        Some(crate::diagnosis::finding(
            "queue_growing",
            "critical",
            message,
            &evidence,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Requests every 50 ms for `secs`, TTFT `base` plus `slope` × send
    /// time, with ±`noise` µs of alternating jitter.
    fn sent(secs: u64, base_us: u64, slope: f64, noise: i64) -> Vec<(u64, u64)> {
        (0..secs * 20)
            .map(|i| {
                let at = i * 50_000;
                let jitter = if i % 2 == 0 { noise } else { -noise };
                let ttft = base_us as f64 + slope * at as f64 + jitter as f64;
                (at, ttft.max(0.0) as u64)
            })
            .collect()
    }

    #[test]
    fn a_queue_growing_at_a_fifth_of_the_arrivals_is_found_with_its_capacity() {
        let g = QueueGrowth::fit(sent(60, 200_000, 0.2, 30_000).into_iter()).unwrap();
        assert!((g.slope - 0.2).abs() < 0.01, "{g:?}");
        assert!(g.growing());
        assert!((g.arrival_rate - 20.0).abs() < 0.01, "{g:?}");
        let f = g.finding().unwrap();
        assert_eq!(f.rule, "queue_growing");
        let capacity = f.evidence["capacity_estimate_requests_per_s"]
            .as_f64()
            .unwrap();
        assert!((capacity - 20.0 / 1.2).abs() < 0.1, "{capacity}");
    }

    #[test]
    fn a_flat_ttft_however_noisy_or_high_is_no_growing_queue() {
        for (base, noise) in [(50_000, 1_000), (3_000_000, 900_000)] {
            let g = QueueGrowth::fit(sent(60, base, 0.0, noise).into_iter()).unwrap();
            assert!(!g.growing(), "{g:?}");
            assert!(g.low < 0.0 && g.high > 0.0, "the interval holds 0: {g:?}");
            assert!(g.finding().is_none());
        }
        // A slow drift (a warm cache, 1 % of a second a second) is not a queue.
        let g = QueueGrowth::fit(sent(60, 100_000, 0.01, 1_000).into_iter()).unwrap();
        assert!(!g.growing(), "{g:?}");
    }

    #[test]
    fn too_few_requests_or_too_short_a_span_decide_nothing() {
        assert!(QueueGrowth::fit(sent(60, 0, 0.5, 0).into_iter().step_by(60)).is_none());
        assert!(
            QueueGrowth::fit(sent(15, 0, 0.5, 0).into_iter()).is_none(),
            "7.5 s of tail"
        );
        assert!(QueueGrowth::fit(std::iter::empty()).is_none());
    }
}
