//! The trade-off analysis of a load series: the Pareto frontier of
//! throughput against per-user speed and TTFT, the knee of the
//! throughput–latency curve (with the interval it could be in), the saturation
//! point, and an operating point for each kind of service.

use crate::results::RunResults;
use serde::{Deserialize, Serialize};

/// One load level, reduced to what the trade-offs need.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Concurrency or requests/s.
    pub load: f64,
    /// Output tokens/s per GPU.
    pub output_tps: f64,
    /// Median decode speed one user sees.
    pub per_user_tps: f64,
    pub ttft_p99_ms: f64,
    pub tpot_p99_ms: f64,
    pub e2e_p99_ms: f64,
    pub cost_per_1k: Option<f64>,
    pub gpu_util_pct: Option<f64>,
    pub kv_usage_max: Option<f64>,
    pub preemptions: Option<f64>,
    /// Requests failed at this load.
    pub failed: u64,
}

impl Point {
    pub fn from_results(load: f64, r: &RunResults) -> Point {
        let l = &r.latency;
        let p99 = |s: Option<crate::stats::Summary>| s.map_or(f64::INFINITY, |s| s.p99);
        let gpus = r.efficiency.cost.map_or(1.0, |c| c.gpus.max(1) as f64);
        let kv = r.efficiency.kv_cache.as_ref();
        Point {
            load,
            output_tps: r.throughput.output_tokens_per_s / gpus,
            per_user_tps: r
                .throughput
                .per_user_output_tokens_per_s
                .map_or(0.0, |s| s.p50),
            ttft_p99_ms: p99(l.ttft_ms),
            tpot_p99_ms: p99(l.tpot_ms),
            e2e_p99_ms: p99(l.e2e_ms),
            cost_per_1k: r.efficiency.cost.and_then(|c| c.usd_per_1k_output_tokens),
            gpu_util_pct: r
                .efficiency
                .gpu
                .as_ref()
                .and_then(|g| g["utilisation_time_pct_mean"].as_f64()),
            kv_usage_max: kv.and_then(|k| k["usage_max"].as_f64()),
            preemptions: kv.and_then(|k| k["preemptions"].as_f64()),
            failed: r.counts.failed,
        }
    }
}

/// Indices of the points no other point beats on all of: more output
/// tokens/s, more per-user tokens/s, lower TTFT p99 (ties kept).
pub fn pareto(points: &[Point]) -> Vec<usize> {
    (0..points.len())
        .filter(|&i| {
            let p = &points[i];
            !points.iter().any(|q| {
                q.output_tps >= p.output_tps
                    && q.per_user_tps >= p.per_user_tps
                    && q.ttft_p99_ms <= p.ttft_p99_ms
                    && (q.output_tps > p.output_tps
                        || q.per_user_tps > p.per_user_tps
                        || q.ttft_p99_ms < p.ttft_p99_ms)
            })
        })
        .collect()
}

/// Where more load stops paying: the knee of a rising, flattening curve of
/// tokens/s (y) against what it costs (x: TTFT p99, or load) — Kneedle: the
/// point farthest above the chord of the normalised curve — and the interval
/// it could be in: every point whose distance is within `tolerance` of the
/// largest (noise moves the knee among them). `load`, `low` and `high` are in
/// `xs`'s units; callers map `index` back to the load.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Knee {
    pub index: usize,
    pub load: f64,
    pub low: f64,
    pub high: f64,
}

pub fn knee(xs: &[f64], ys: &[f64], tolerance: f64) -> Option<Knee> {
    if xs.len() < 3 || xs.len() != ys.len() {
        return None;
    }
    // Points in order of x (a latency can dip between loads on a noisy run).
    let mut order: Vec<usize> = (0..xs.len()).collect();
    order.sort_by(|&a, &b| xs[a].total_cmp(&xs[b]));
    let sx: Vec<f64> = order.iter().map(|&i| xs[i]).collect();
    let sy: Vec<f64> = order.iter().map(|&i| ys[i]).collect();
    let (x0, x1) = (sx[0], sx[sx.len() - 1]);
    let (ymin, ymax) = sy
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &y| {
            (a.min(y), b.max(y))
        });
    if x1 <= x0 || ymax <= ymin {
        return None;
    }
    let d: Vec<f64> = sx
        .iter()
        .zip(&sy)
        .map(|(x, y)| (y - ymin) / (ymax - ymin) - (x - x0) / (x1 - x0))
        .collect();
    let (best_at, best) =
        d.iter()
            .copied()
            .enumerate()
            .fold(
                (0, f64::NEG_INFINITY),
                |a, (i, v)| if v > a.1 { (i, v) } else { a },
            );
    if best <= 0.0 {
        return None; // no concave bend: still linear, or steepening
    }
    let near: Vec<usize> = (0..d.len()).filter(|&i| d[i] >= best - tolerance).collect();
    Some(Knee {
        index: order[best_at],
        load: sx[best_at],
        low: sx[*near.first().expect("the best point is near itself")],
        high: sx[*near.last().expect("the best point is near itself")],
    })
}

/// The first load whose tokens/s gain over the previous point is under
/// `min_gain` (e.g. 0.05) while TTFT p99 rose: past it, load buys latency only.
pub fn saturation(points: &[Point], min_gain: f64) -> Option<usize> {
    (1..points.len()).find(|&i| {
        let (a, b) = (&points[i - 1], &points[i]);
        b.output_tps < a.output_tps * (1.0 + min_gain) && b.ttft_p99_ms > a.ttft_p99_ms
    })
}

/// The objectives of one kind of service (documented defaults, overridable).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Objectives {
    pub chat_ttft_p99_ms: f64,
    pub chat_tpot_p99_ms: f64,
    /// Batch: E2E p99 may grow to this multiple of the series' lowest.
    pub batch_e2e_growth: f64,
    /// Cost: TTFT p99 sanity cap.
    pub cost_ttft_cap_ms: f64,
    /// Long context: KV usage ceiling.
    pub long_context_kv_max: f64,
}

impl Default for Objectives {
    fn default() -> Self {
        Objectives {
            chat_ttft_p99_ms: 1000.0,
            chat_tpot_p99_ms: 50.0,
            batch_e2e_growth: 5.0,
            cost_ttft_cap_ms: 10_000.0,
            long_context_kv_max: 0.9,
        }
    }
}

/// The operating point chosen for one service profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recommendation {
    /// `chat`, `batch`, `cost`, `long-context`.
    pub profile: String,
    pub objective: String,
    /// Index into the series; `None` when no point satisfies the profile.
    pub point: Option<usize>,
    pub load: Option<f64>,
    /// Why this point: its numbers against the objective, or what would be needed.
    pub why: String,
    /// The expected figures at the chosen point.
    pub expect: Option<Point>,
}

fn choose(
    profile: &str,
    objective: String,
    points: &[Point],
    eligible: impl Fn(&Point) -> bool,
    better: impl Fn(&Point, &Point) -> bool,
    why: impl Fn(&Point) -> String,
    none: String,
) -> Recommendation {
    let mut best: Option<usize> = None;
    for (i, p) in points.iter().enumerate() {
        if p.failed == 0 && eligible(p) && best.is_none_or(|b| better(p, &points[b])) {
            best = Some(i);
        }
    }
    Recommendation {
        profile: profile.into(),
        objective,
        point: best,
        load: best.map(|i| points[i].load),
        why: best.map_or(none, |i| why(&points[i])),
        expect: best.map(|i| points[i]),
    }
}

/// An operating point for each service profile.
pub fn recommend(points: &[Point], o: &Objectives) -> Vec<Recommendation> {
    let min_e2e = points
        .iter()
        .map(|p| p.e2e_p99_ms)
        .fold(f64::INFINITY, f64::min);
    let kv_known = points.iter().all(|p| p.kv_usage_max.is_some());
    vec![
        choose(
            "chat",
            format!("the most load with TTFT p99 ≤ {} ms and TPOT p99 ≤ {} ms", o.chat_ttft_p99_ms, o.chat_tpot_p99_ms),
            points,
            |p| p.ttft_p99_ms <= o.chat_ttft_p99_ms && p.tpot_p99_ms <= o.chat_tpot_p99_ms,
            |a, b| a.load > b.load,
            |p| {
                format!(
                    "TTFT p99 {:.0} ms ({:.0} % of the limit), TPOT p99 {:.1} ms ({:.0} % of the limit)",
                    p.ttft_p99_ms,
                    p.ttft_p99_ms / o.chat_ttft_p99_ms * 100.0,
                    p.tpot_p99_ms,
                    p.tpot_p99_ms / o.chat_tpot_p99_ms * 100.0
                )
            },
            "no load meets the chat objectives: even the lightest point is slower; a faster GPU, a smaller model or fewer output tokens would".into(),
        ),
        choose(
            "batch",
            format!("the most output tokens/s whose E2E p99 stays within {}× the series' lowest", o.batch_e2e_growth),
            points,
            |p| p.e2e_p99_ms <= o.batch_e2e_growth * min_e2e,
            |a, b| a.output_tps > b.output_tps,
            |p| format!("{:.0} output tokens/s with E2E p99 {:.0} ms ({:.1}× the lowest)", p.output_tps, p.e2e_p99_ms, p.e2e_p99_ms / min_e2e),
            "no point has bounded E2E".into(),
        ),
        choose(
            "cost",
            format!("the least cost per 1K output tokens with TTFT p99 ≤ {} ms", o.cost_ttft_cap_ms),
            points,
            |p| p.ttft_p99_ms <= o.cost_ttft_cap_ms,
            |a, b| match (a.cost_per_1k, b.cost_per_1k) {
                (Some(x), Some(y)) => x < y,
                _ => a.output_tps > b.output_tps, // same GPU: cost ∝ 1 / tokens/s
            },
            |p| match p.cost_per_1k {
                Some(c) => format!("${c:.5} per 1K output tokens at {:.0} tokens/s", p.output_tps),
                None => format!("{:.0} tokens/s: the least cost per token on the same GPUs (give --gpu-price for dollars)", p.output_tps),
            },
            format!("every point's TTFT p99 exceeds the {} ms cap", o.cost_ttft_cap_ms),
        ),
        choose(
            "long-context",
            format!("the most load with KV usage under {:.0} % and no preemptions", o.long_context_kv_max * 100.0),
            points,
            |p| kv_known && p.kv_usage_max.is_some_and(|k| k < o.long_context_kv_max) && p.preemptions.unwrap_or(0.0) == 0.0,
            |a, b| a.load > b.load,
            |p| format!("KV usage max {:.0} %, no preemptions", p.kv_usage_max.unwrap_or(0.0) * 100.0),
            if kv_known {
                "every point fills the KV cache or preempts: more KV memory (or FP8 KV) would".into()
            } else {
                "the server does not expose KV usage: no KV-headroom recommendation".into()
            },
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve(knee_at: f64, noise: f64, seed: u64) -> (Vec<f64>, Vec<f64>) {
        let xs: Vec<f64> = (0..9).map(|i| 2f64.powi(i)).collect(); // 1 … 256
        let mut s = seed;
        let ys = xs
            .iter()
            .map(|&x| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let jitter = ((s >> 33) as f64 / (1u64 << 31) as f64 - 0.5) * 2.0 * noise;
                // Linear up to the knee, then nearly flat.
                let y = if x <= knee_at {
                    x
                } else {
                    knee_at + 0.02 * (x - knee_at)
                };
                y * (1.0 + jitter)
            })
            .collect();
        (xs, ys)
    }

    #[test]
    fn knee_of_a_clean_curve_is_exact() {
        for k in [8.0, 16.0, 32.0] {
            let (xs, ys) = curve(k, 0.0, 1);
            let found = knee(&xs, &ys, 0.05).unwrap();
            assert_eq!(found.load, k, "{found:?}");
            assert!(found.low <= k && found.high >= k);
        }
    }

    #[test]
    fn knee_of_noisy_curves_is_within_one_step_and_inside_its_interval() {
        for seed in 0..50 {
            let (xs, ys) = curve(16.0, 0.05, seed);
            let found = knee(&xs, &ys, 0.05).unwrap();
            assert!((8.0..=32.0).contains(&found.load), "seed {seed}: {found:?}");
            assert!(
                found.low <= 16.0 && 16.0 <= found.high,
                "seed {seed}: the interval holds the true knee: {found:?}"
            );
        }
    }

    #[test]
    fn no_knee_on_a_straight_line_or_a_steepening_curve() {
        let xs: Vec<f64> = (0..6).map(|i| 2f64.powi(i)).collect();
        assert!(knee(&xs, &xs, 0.05).is_none());
        let ys: Vec<f64> = xs.iter().map(|x| x * x).collect();
        assert!(knee(&xs, &ys, 0.05).is_none());
    }

    fn pt(
        load: f64,
        tps: f64,
        user: f64,
        ttft: f64,
        tpot: f64,
        e2e: f64,
        kv: f64,
        pre: f64,
    ) -> Point {
        Point {
            load,
            output_tps: tps,
            per_user_tps: user,
            ttft_p99_ms: ttft,
            tpot_p99_ms: tpot,
            e2e_p99_ms: e2e,
            cost_per_1k: Some(1.0 / tps),
            gpu_util_pct: None,
            kv_usage_max: Some(kv),
            preemptions: Some(pre),
            failed: 0,
        }
    }

    #[test]
    fn frontier_saturation_and_recommendations() {
        let s = vec![
            pt(1.0, 100.0, 100.0, 20.0, 10.0, 2000.0, 0.01, 0.0),
            pt(4.0, 380.0, 95.0, 40.0, 11.0, 2100.0, 0.05, 0.0),
            pt(16.0, 1300.0, 80.0, 300.0, 14.0, 2600.0, 0.3, 0.0),
            pt(64.0, 3000.0, 50.0, 900.0, 25.0, 4500.0, 0.95, 12.0),
            pt(256.0, 3100.0, 15.0, 5000.0, 70.0, 20000.0, 0.99, 300.0),
        ];
        assert_eq!(pareto(&s).len(), 5, "each trades one axis for another");
        assert_eq!(saturation(&s, 0.05), Some(4));
        let r = recommend(&s, &Objectives::default());
        let load = |p: &str| r.iter().find(|x| x.profile == p).unwrap().load.unwrap();
        assert_eq!(load("chat"), 64.0);
        assert_eq!(
            load("batch"),
            64.0,
            "256 has the most tokens/s but E2E exploded"
        );
        assert_eq!(load("cost"), 256.0, "under the 10 s cap, the cheapest");
        assert_eq!(load("long-context"), 16.0);
        let strict = Objectives {
            chat_ttft_p99_ms: 10.0,
            ..Objectives::default()
        };
        let chat = recommend(&s, &strict)
            .into_iter()
            .find(|x| x.profile == "chat")
            .unwrap();
        assert!(chat.point.is_none() && chat.why.contains("no load"));
    }
}
