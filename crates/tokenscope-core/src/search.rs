//! The SLO capacity found by search (`sweep --find`, `tune`): the highest
//! load that meets the SLO, bracketed between a load measured to meet it
//! and one that does not (or the server's maximum throughput), and
//! narrowed by bisection until the bracket is within the precision asked.
//!
//! The bracket's top starts at a maximum-throughput probe: an open loop
//! sending more requests a second than the server carried with every
//! slot busy builds a queue without bound, so no SLO holds there for long.
//! A closed-loop search's top is the probe's concurrency itself. Where every
//! point meets the SLO, the top is measured too, once; if it meets it, the
//! capacity is at least the probe's figure, and the search says that the
//! probe bounded it.

use serde::{Deserialize, Serialize};

/// The load a search varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchOver {
    /// Open-loop requests a second.
    Rate,
    /// Closed-loop requests in flight (whole numbers).
    Concurrency,
}

impl SearchOver {
    pub fn parse(text: &str) -> Result<SearchOver, String> {
        match text {
            "rate" => Ok(SearchOver::Rate),
            "concurrency" => Ok(SearchOver::Concurrency),
            _ => Err(format!("`{text}`: expected rate or concurrency")),
        }
    }

    /// `rate` or `concurrency`, as `--find` takes it.
    pub fn name(self) -> &'static str {
        match self {
            SearchOver::Rate => "rate",
            SearchOver::Concurrency => "concurrency",
        }
    }

    pub fn unit(self) -> &'static str {
        match self {
            SearchOver::Rate => "requests/s",
            SearchOver::Concurrency => "concurrent requests",
        }
    }
}

/// A bisection's state: `low` meets the SLO (0: nothing measured meets
/// it yet), `high` does not, or is the probe's bound.
#[derive(Debug, Clone)]
pub struct Bisection {
    over: SearchOver,
    precision: f64,
    /// The probe's figure the search started below.
    bound: f64,
    low: f64,
    high: f64,
    /// Whether `high` was measured to miss (else it is the probe's bound).
    high_measured: bool,
    /// The probe's bound was measured and met: the search ends there.
    met_at_bound: bool,
}

/// What the search settled on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bracket {
    /// The highest load measured to meet the SLO (`None`: none did).
    pub capacity: Option<f64>,
    /// The capacity lies in `[low, high]`: `low` met (0 when none did),
    /// `high` missed, or is the probe's bound.
    pub low: f64,
    pub high: f64,
    /// `measured` (a point missed there) or `probe` (the maximum-throughput
    /// probe's figure: the bracket never closed below it).
    pub high_from: String,
    /// The probe's figure was measured and met: the capacity is at least
    /// there and the search could not look higher (a larger probe might).
    pub at_least: bool,
    /// (high − low) ÷ high.
    pub width: f64,
}

impl Bisection {
    /// A search below `bound` (the probe's figure) to within `precision`
    /// (a share of the bracket's top, 0–1).
    pub fn new(over: SearchOver, bound: f64, precision: f64) -> Bisection {
        Bisection {
            over,
            precision,
            bound,
            low: 0.0,
            high: bound,
            high_measured: false,
            met_at_bound: false,
        }
    }

    /// The next load to measure, or `None` when the bracket is narrow
    /// enough, nothing met down to the smallest load worth measuring, or
    /// the bound itself met.
    pub fn next(&self) -> Option<f64> {
        if self.met_at_bound || self.high <= 0.0 || !self.high.is_finite() {
            return None;
        }
        let whole = self.over == SearchOver::Concurrency;
        // Nothing met down to the smallest load worth measuring: a
        // precision's share of the bound, or a concurrency of 1.
        let floor = match whole {
            true => 1.0,
            false => self.precision * self.bound,
        };
        if self.low == 0.0 && self.high_measured && self.high <= floor {
            return None;
        }
        let mid = (self.low + self.high) / 2.0;
        let mid = match whole {
            true => mid.floor().max(1.0),
            false => round3(mid),
        };
        // Narrow enough, or no load left between the two that the
        // rounding can name (a step of 3 significant digits, a whole
        // request).
        let close = self.high - self.low <= self.precision * self.high
            || mid <= self.low
            || mid >= self.high;
        match (close, self.high_measured) {
            // All met up to near the bound: measure the bound once.
            (true, false) => Some(self.high),
            (true, true) => None,
            (false, _) => Some(mid),
        }
    }

    /// A point's outcome at `load`.
    pub fn record(&mut self, load: f64, met: bool) {
        match met {
            true if load >= self.high => self.met_at_bound = true,
            true => self.low = self.low.max(load),
            false => {
                self.high = self.high.min(load);
                self.high_measured = true;
            }
        }
    }

    pub fn bracket(&self) -> Bracket {
        let (low, high) = match self.met_at_bound {
            true => (self.high, self.high),
            false => (self.low, self.high),
        };
        Bracket {
            capacity: (low > 0.0).then_some(low),
            low,
            high,
            high_from: if self.high_measured {
                "measured"
            } else {
                "probe"
            }
            .into(),
            at_least: self.met_at_bound,
            width: if high > 0.0 { (high - low) / high } else { 0.0 },
        }
    }
}

/// Three significant digits: loads a person reads and types back.
pub fn round3(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return v;
    }
    let scale = 10f64.powi(2 - v.log10().floor() as i32);
    (v * scale).round() / scale
}

/// What a fixed grid of the same precision would have run: points every
/// `precision × bound` up to the bound, each sized as the search sizes
/// its points (`requests_at(load)`) and run whole (a grid point has no
/// verdict to stop on).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GridCost {
    pub points: u64,
    pub requests: u64,
}

pub fn grid_cost(precision: f64, bound: f64, requests_at: impl Fn(f64) -> u64) -> GridCost {
    let points = (1.0 / precision).ceil().max(1.0) as u64;
    let requests = (1..=points)
        .map(|k| requests_at(bound * (k as f64 * precision).min(1.0)))
        .fold(0u64, u64::saturating_add);
    GridCost { points, requests }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a bisection against a server that meets the SLO below `truth`.
    fn search(over: SearchOver, bound: f64, truth: f64, precision: f64) -> (Bracket, usize) {
        let mut b = Bisection::new(over, bound, precision);
        let mut points = 0;
        while let Some(load) = b.next() {
            points += 1;
            assert!(points < 50, "the search ends");
            b.record(load, load <= truth);
        }
        (b.bracket(), points)
    }

    #[test]
    fn the_bracket_closes_on_the_truth_within_the_precision() {
        for truth in [0.7, 3.0, 9.5, 15.0, 19.0] {
            let (b, points) = search(SearchOver::Rate, 20.0, truth, 0.05);
            assert!(b.low <= truth && truth <= b.high, "{truth}: {b:?}");
            assert!(b.width <= 0.05, "{truth}: {b:?}");
            assert_eq!(b.capacity, Some(b.low));
            // Halvings down to the truth, then to the precision: far
            // fewer points than a grid of 20, unless the truth is tiny.
            let most = (20.0 / truth).log2() + (1.0 / 0.05f64).log2() + 2.0;
            assert!(points as f64 <= most, "{truth}: {points}");
        }
    }

    #[test]
    fn a_capacity_past_the_probe_is_said_to_be_at_least_the_probe() {
        let (b, _) = search(SearchOver::Rate, 20.0, 50.0, 0.05);
        assert!(b.at_least, "{b:?}");
        assert_eq!((b.low, b.high, b.capacity), (20.0, 20.0, Some(20.0)));
        // All met but the bound itself: the probe is the measured top.
        let (b, _) = search(SearchOver::Rate, 20.0, 19.9, 0.05);
        assert!(!b.at_least && b.high_from == "measured", "{b:?}");
    }

    #[test]
    fn nothing_met_ends_with_no_capacity() {
        let (b, points) = search(SearchOver::Rate, 20.0, 0.0, 0.05);
        assert_eq!(b.capacity, None);
        assert!(b.high <= 20.0 * 0.05 * 2.0, "{b:?}");
        assert!(points <= 8, "{points}");
    }

    #[test]
    fn concurrency_is_searched_in_whole_requests() {
        for truth in [1.0, 2.0, 5.0, 37.0, 63.0] {
            let (b, _) = search(SearchOver::Concurrency, 256.0, truth, 0.05);
            assert_eq!(b.low.fract(), 0.0);
            assert!(b.low <= truth && truth < b.high, "{truth}: {b:?}");
            // Within the precision, or the next whole request.
            assert!(b.width <= 0.05 || b.high - b.low <= 1.0, "{truth}: {b:?}");
            assert_eq!(b.capacity, Some(b.low), "{truth}: {b:?}");
        }
        // Nothing met: concurrency 1 itself was measured to miss.
        let (b, _) = search(SearchOver::Concurrency, 256.0, 0.5, 0.05);
        assert_eq!((b.capacity, b.high), (None, 1.0), "{b:?}");
    }

    #[test]
    fn a_precision_finer_than_the_rounding_ends_without_repeating_a_load() {
        for precision in [0.001, 0.003, 0.01] {
            let mut b = Bisection::new(SearchOver::Rate, 20.0, precision);
            let mut seen = Vec::new();
            while let Some(load) = b.next() {
                assert!(
                    !seen.contains(&load),
                    "{precision}: {load} again after {seen:?}"
                );
                seen.push(load);
                b.record(load, load <= 10.14);
            }
            let got = b.bracket();
            assert!(got.low <= 10.14 && 10.14 < got.high, "{got:?}");
        }
    }

    #[test]
    fn a_grid_of_the_same_precision_costs_a_point_per_step() {
        assert_eq!(
            grid_cost(0.05, 20.0, |_| 200),
            GridCost {
                points: 20,
                requests: 4000
            }
        );
        assert_eq!(grid_cost(0.3, 20.0, |_| u64::MAX).requests, u64::MAX);
        // Sized like the search's points: at least 10 s of each rate.
        let g = grid_cost(0.25, 20.0, |r| 100u64.max((r * 10.0) as u64));
        assert_eq!((g.points, g.requests), (4, 100 + 100 + 150 + 200));
        assert_eq!(round3(13.3333), 13.3);
        assert_eq!(round3(0.012345), 0.0123);
    }
}
