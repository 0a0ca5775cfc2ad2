//! The figures the history keeps of each run: the headline numbers a team
//! follows over weeks, each with the number of samples it rests on.

use tokenscope_core::results::RunResults;
use tokenscope_core::stats::Summary;

/// One figure of a run.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Figure {
    pub metric: String,
    pub value: f64,
    /// How many requests (or tokens, for ITL) it was computed over.
    pub samples: Option<u64>,
    /// A percentile's 95 % interval from the run's own samples
    /// ([`quantile_interval`]); `None` for rates.
    #[serde(default)]
    pub ci_low: Option<f64>,
    #[serde(default)]
    pub ci_high: Option<f64>,
}

/// A figure the history knows: its name, unit and which way is better.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Metric {
    pub name: &'static str,
    pub unit: &'static str,
    pub higher_is_better: bool,
    /// The quantile (0–1) it is, for the tail rule; `None` for means and rates.
    pub quantile: Option<f64>,
    pub about: &'static str,
}

const fn latency(name: &'static str, q: f64, about: &'static str) -> Metric {
    Metric {
        name,
        unit: "ms",
        higher_is_better: false,
        quantile: Some(q),
        about,
    }
}

const fn rate(name: &'static str, unit: &'static str, about: &'static str) -> Metric {
    Metric {
        name,
        unit,
        higher_is_better: true,
        quantile: None,
        about,
    }
}

/// Every figure recorded, in the order they are shown.
pub const METRICS: [Metric; 19] = [
    latency("ttft_p50", 0.5, "time to first token, median"),
    latency("ttft_p90", 0.9, "time to first token, p90"),
    latency("ttft_p99", 0.99, "time to first token, p99"),
    latency(
        "answer_start_p50",
        0.5,
        "time to the first answer token (reasoning runs), median",
    ),
    latency(
        "answer_start_p99",
        0.99,
        "time to the first answer token (reasoning runs), p99",
    ),
    latency(
        "reasoning_p50",
        0.5,
        "thinking time on the stream (reasoning runs), median",
    ),
    latency("tpot_p50", 0.5, "time per output token, median"),
    latency("tpot_p99", 0.99, "time per output token, p99"),
    latency(
        "answer_tpot_p50",
        0.5,
        "time per answer token (reasoning runs), median",
    ),
    latency(
        "answer_tpot_p99",
        0.99,
        "time per answer token (reasoning runs), p99",
    ),
    latency("itl_p50", 0.5, "inter-token latency, median"),
    latency("itl_p99", 0.99, "inter-token latency, p99"),
    latency("e2e_p50", 0.5, "end-to-end latency, median"),
    latency("e2e_p99", 0.99, "end-to-end latency, p99"),
    rate("output_tokens_per_s", "tok/s", "output tokens per second"),
    rate("requests_per_s", "req/s", "completed requests per second"),
    rate(
        "goodput_requests_per_s",
        "req/s",
        "requests meeting every SLO per second",
    ),
    Metric {
        name: "error_rate_pct",
        unit: "%",
        higher_is_better: false,
        quantile: None,
        about: "failed ÷ measured requests",
    },
    rate(
        "slo_capacity_load",
        "load",
        "sweep: the heaviest load meeting --slo",
    ),
];

/// The metric of this name.
pub fn metric(name: &str) -> Option<&'static Metric> {
    METRICS.iter().find(|m| m.name == name)
}

/// The names, for an error message.
pub fn names() -> String {
    METRICS
        .iter()
        .map(|m| m.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The figures of one run's `results.json` (a sweep's own figure,
/// `slo_capacity_load`, comes from its analysis instead).
pub fn of_results(r: &RunResults) -> Vec<Figure> {
    let mut out = Vec::new();
    let mut quantiles = |prefix: &str, s: &Option<Summary>, stats: &[&str]| {
        if let Some(s) = s.as_ref().filter(|s| s.count > 0) {
            for stat in stats {
                let name = format!("{prefix}_{stat}");
                let q = metric(&name).and_then(|m| m.quantile).unwrap_or(0.5);
                let value = s.get(stat).unwrap_or(f64::NAN);
                let (lo, hi) = quantile_interval(s, q);
                out.push(Figure {
                    metric: name,
                    value,
                    samples: Some(s.count),
                    ci_low: Some(lo),
                    ci_high: Some(hi),
                });
            }
        }
    };
    let l = &r.latency;
    quantiles("ttft", &l.ttft_ms, &["p50", "p90", "p99"]);
    quantiles("answer_start", &l.answer_start_ms, &["p50", "p99"]);
    quantiles("reasoning", &l.reasoning_ms, &["p50"]);
    quantiles("tpot", &l.tpot_ms, &["p50", "p99"]);
    quantiles("answer_tpot", &l.answer_tpot_ms, &["p50", "p99"]);
    quantiles("itl", &l.itl_ms, &["p50", "p99"]);
    quantiles("e2e", &l.e2e_ms, &["p50", "p99"]);
    let requests = Some(r.counts.requests);
    let t = &r.throughput;
    if r.counts.succeeded > 0 {
        out.push(fig("output_tokens_per_s", t.output_tokens_per_s, requests));
        out.push(fig("requests_per_s", t.requests_per_s, requests));
    }
    if let Some(g) = t.goodput_requests_per_s {
        out.push(fig("goodput_requests_per_s", g, requests));
    }
    // Users who left on purpose (`--cancel`) are no part of the error rate.
    let judged = r.counts.requests.saturating_sub(r.counts.abandoned);
    if judged > 0 {
        let pct = r.counts.failed as f64 * 100.0 / judged as f64;
        out.push(fig("error_rate_pct", pct, requests));
    }
    out.retain(|f| f.value.is_finite());
    out
}

pub fn fig(metric: &str, value: f64, samples: Option<u64>) -> Figure {
    Figure {
        metric: metric.to_string(),
        value,
        samples,
        ci_low: None,
        ci_high: None,
    }
}

/// The 95 % interval of the `q` quantile of a run's `count` samples: the
/// ranks q ± 1.96·√(q(1−q)/n) of the order statistics (the distribution-free
/// interval), read off the quantile function the summary keeps (min, p50,
/// p90, p95, p99, p99.9, max; linear between them).
///
/// It is what tells a p99 that sits on a steep part of the distribution —
/// between a bulk of 8 ms gaps and a few 22 ms ones, where 1.0 % or 1.1 %
/// slow gaps moves it by 2 ms — from one the data pins down, which the
/// run-to-run spread of a short history cannot.
pub fn quantile_interval(s: &Summary, q: f64) -> (f64, f64) {
    let n = s.count.max(1) as f64;
    let half = 1.96 * (q * (1.0 - q) / n).sqrt();
    let known = [
        (0.0, s.min),
        (0.5, s.p50),
        (0.9, s.p90),
        (0.95, s.p95),
        (0.99, s.p99),
        (0.999, s.p999),
        (1.0, s.max),
    ];
    let at = |rank: f64| -> f64 {
        let rank = rank.clamp(0.0, 1.0);
        let i = known
            .iter()
            .position(|(r, _)| *r >= rank)
            .unwrap_or(known.len() - 1);
        if i == 0 {
            return known[0].1;
        }
        let ((r0, v0), (r1, v1)) = (known[i - 1], known[i]);
        v0 + (v1 - v0) * (rank - r0) / (r1 - r0)
    };
    // The interval holds the estimate itself (the linear read-off may not).
    let value = at(q);
    (at(q - half).min(value), at(q + half).max(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(count: u64, q: [f64; 7]) -> Summary {
        Summary {
            count,
            mean: q[1],
            std: 0.0,
            min: q[0],
            p50: q[1],
            p90: q[2],
            p95: q[3],
            p99: q[4],
            p999: q[5],
            max: q[6],
        }
    }

    #[test]
    fn a_p99_on_a_steep_tail_is_known_less_well_than_one_on_a_flat_one() {
        let steep = summary(3780, [7.0, 8.1, 8.2, 8.3, 8.4, 22.0, 22.1]);
        let flat = summary(3780, [7.0, 8.1, 8.2, 8.3, 8.4, 8.6, 8.7]);
        let (lo, hi) = quantile_interval(&steep, 0.99);
        assert!(lo <= 8.4 && hi > 12.0, "{lo}..{hi}");
        let (lo, hi) = quantile_interval(&flat, 0.99);
        assert!(lo <= 8.4 && hi < 8.6, "{lo}..{hi}");
        // More samples, a narrower interval.
        let few = quantile_interval(
            &summary(60, [20.0, 33.0, 33.5, 34.0, 40.0, 41.0, 41.0]),
            0.5,
        );
        let many = quantile_interval(
            &summary(6000, [20.0, 33.0, 33.5, 34.0, 40.0, 41.0, 41.0]),
            0.5,
        );
        assert!(few.1 - few.0 > many.1 - many.0);
        assert!(many.0 <= 33.0 && many.1 >= 33.0);
    }

    #[test]
    fn every_recorded_figure_is_in_the_catalogue() {
        let names = [
            "ttft_p50",
            "ttft_p90",
            "ttft_p99",
            "answer_start_p50",
            "answer_start_p99",
            "reasoning_p50",
            "tpot_p50",
            "tpot_p99",
            "answer_tpot_p50",
            "answer_tpot_p99",
            "itl_p50",
            "itl_p99",
            "e2e_p50",
            "e2e_p99",
        ];
        for n in names {
            let m = metric(n).unwrap();
            assert!(!m.higher_is_better && m.quantile.is_some(), "{n}");
        }
        assert!(metric("output_tokens_per_s").unwrap().higher_is_better);
        assert!(metric("nope").is_none());
    }
}
