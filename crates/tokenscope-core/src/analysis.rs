//! The trade-off analysis of a load series: the Pareto frontier of
//! throughput against per-user speed and TTFT, the knee of the
//! throughput–latency curve (with the interval it could be in), the saturation
//! point, and an operating point for each kind of service.
//!
//! Nothing here concludes more than the series shows: a knee is named only
//! where the marginal gain has clearly fallen ([`flattening`]); a series that
//! never flattened says so and its top-point recommendations are lower
//! bounds; with `--slo` every recommendation meets it at the 95 % upper
//! bound of each objective, or is "none" with the reason.

pub use crate::capacity::{slo_capacity, PointSlo, SloCapacity};
use crate::results::RunResults;
use crate::slo::Verdict;
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
    #[serde(deserialize_with = "null_is_unbounded")]
    pub ttft_p99_ms: f64,
    /// With reasoning: the time to the first answer token, p99 — what a
    /// chat user waits for (the chat profile judges by it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_start_p99_ms: Option<f64>,
    #[serde(deserialize_with = "null_is_unbounded")]
    pub tpot_p99_ms: f64,
    #[serde(deserialize_with = "null_is_unbounded")]
    pub e2e_p99_ms: f64,
    pub cost_per_1k: Option<f64>,
    /// Requests that answered (not a spent thinking budget), per second per
    /// GPU: on the same GPUs, cost per answer ∝ 1 / this.
    #[serde(default)]
    pub answers_per_s: f64,
    /// Dollars per answered request, with a GPU price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_per_answer: Option<f64>,
    /// With reasoning: the share of output tokens that were thinking — GPU
    /// work the user never reads, which may change with load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_share: Option<f64>,
    pub gpu_util_pct: Option<f64>,
    pub kv_usage_max: Option<f64>,
    pub preemptions: Option<f64>,
    /// Requests failed at this load.
    pub failed: u64,
    /// The server's queue grew through the run (the `overload` finding):
    /// latency here grows with the run's length, so it is not bounded.
    #[serde(default)]
    pub overloaded: bool,
    /// With `--slo`: whether every objective holds at this load at its 95 %
    /// upper bound ([`PointSlo::judge`]).
    #[serde(default)]
    pub slo: Option<PointSlo>,
    /// With `sweep --repeat`: the spread across this load's runs (the point
    /// itself is the run with the median tokens/s).
    #[serde(default)]
    pub spread: Option<Spread>,
    /// Realtime speech: the lag behind the speaker, p99 over every delta, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_p99_ms: Option<f64>,
    /// Realtime speech: the transcript fell behind as sessions went on
    /// (the `realtime_lag_grows` finding).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lag_grows: bool,
}

/// How much repeated runs of one load differed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub runs: u32,
    pub output_tps: [f64; 2],
    #[serde(deserialize_with = "nulls_are_unbounded")]
    pub ttft_p99_ms: [f64; 2],
}

impl Spread {
    /// Half the range of tokens/s relative to the point's own: its noise.
    pub fn relative_noise(&self, output_tps: f64) -> f64 {
        if output_tps > 0.0 {
            (self.output_tps[1] - self.output_tps[0]) / 2.0 / output_tps
        } else {
            0.0
        }
    }
}

/// Runs of the same loads (`sweep --repeat`) into one point per load: the
/// run with the median tokens/s, its spread, and an SLO standing that holds
/// only if every run's does. `runs` need not be sorted; the result is.
pub fn combine_repeats(runs: Vec<Point>) -> Vec<Point> {
    let mut runs = runs;
    runs.sort_by(|a, b| a.load.total_cmp(&b.load));
    let mut out: Vec<Point> = Vec::new();
    for group in runs.chunk_by(|a, b| a.load == b.load) {
        if group.len() == 1 {
            out.push(group[0]);
            continue;
        }
        let mut by_tps = group.to_vec();
        by_tps.sort_by(|a, b| a.output_tps.total_cmp(&b.output_tps));
        let mut p = by_tps[(by_tps.len() - 1) / 2];
        let range = |f: fn(&Point) -> f64| {
            group
                .iter()
                .map(f)
                .fold([f64::INFINITY, f64::NEG_INFINITY], |[lo, hi], v| {
                    [lo.min(v), hi.max(v)]
                })
        };
        p.spread = Some(Spread {
            runs: group.len() as u32,
            output_tps: range(|p| p.output_tps),
            ttft_p99_ms: range(|p| p.ttft_p99_ms),
        });
        let slos: Vec<PointSlo> = group.iter().filter_map(|p| p.slo).collect();
        if !slos.is_empty() {
            p.slo = Some(PointSlo {
                verdict: Verdict::all(slos.iter().map(|s| s.verdict)),
                ratio: slos.iter().map(|s| s.ratio).fold(0.0, f64::max),
            });
        }
        p.failed = group.iter().map(|p| p.failed).sum();
        p.overloaded = group.iter().any(|p| p.overloaded);
        out.push(p);
    }
    out
}

/// A percentile no request gave (every one failed, or a stopped point's
/// were all cancelled) is held as unbounded; JSON writes it `null`, and
/// reads `null` back as unbounded.
fn null_is_unbounded<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Option::<f64>::deserialize(d).map(|v| v.unwrap_or(f64::INFINITY))
}

/// [`null_is_unbounded`] for a range (a repeat with no answer).
fn nulls_are_unbounded<'de, D: serde::Deserializer<'de>>(d: D) -> Result<[f64; 2], D::Error> {
    <[Option<f64>; 2]>::deserialize(d).map(|r| r.map(|v| v.unwrap_or(f64::INFINITY)))
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
            answer_start_p99_ms: l.answer_start_ms.map(|s| s.p99),
            tpot_p99_ms: p99(l.tpot_ms),
            e2e_p99_ms: p99(l.e2e_ms),
            cost_per_1k: r.efficiency.cost.and_then(|c| c.usd_per_1k_output_tokens),
            answers_per_s: r.throughput.requests_per_s * answered_share(r) / gpus,
            cost_per_answer: r.efficiency.cost.and_then(|c| c.usd_per_answer),
            reasoning_share: r.tokens.reasoning_share(),
            gpu_util_pct: r
                .efficiency
                .gpu
                .as_ref()
                .and_then(|g| g["utilisation_time_pct_mean"].as_f64()),
            kv_usage_max: kv.and_then(|k| k["usage_max"].as_f64()),
            preemptions: kv.and_then(|k| k["preemptions"].as_f64()),
            failed: r.counts.failed,
            overloaded: r.diagnosis.iter().any(|f| f.rule == "overload"),
            slo: None,
            spread: None,
            lag_p99_ms: r.speech.as_ref().and_then(|s| s.lag_ms).map(|s| s.p99),
            lag_grows: r.diagnosis.iter().any(|f| f.rule == "realtime_lag_grows"),
        }
    }
}

/// The share of successful requests that answered: all but those that
/// spent their whole length thinking.
fn answered_share(r: &RunResults) -> f64 {
    let spent = r
        .tokens
        .reasoning
        .as_ref()
        .map_or(0, |x| x.budget_spent_requests);
    match r.counts.succeeded {
        0 => 0.0,
        n => n.saturating_sub(spent) as f64 / n as f64,
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

/// The knee rule's thresholds (docs/metrics.md). Over the series' last
/// doubling of load (the heaviest point against the last point at half its
/// load or less), tokens/s must have grown less than [`KNEE_ELASTICITY`]
/// times as fast as load — `(y₁/y₀ − 1) / (x₁/x₀ − 1)`; 1 is linear scaling,
/// 0 no gain — and fallen short of proportional growth by more than twice
/// [`KNEE_NOISE`] (a point's run-to-run spread of tokens/s), so that noise
/// alone never makes a knee.
pub const KNEE_ELASTICITY: f64 = 0.5;
pub const KNEE_NOISE: f64 = 0.05;

/// Whether the series' tokens/s stopped growing with load, with the numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Flattening {
    pub saturated: bool,
    /// The loads the last doubling spans.
    pub from_load: f64,
    pub to_load: f64,
    /// Relative growth of tokens/s ÷ relative growth of load over it.
    pub elasticity: f64,
    /// How far the heaviest point falls short of proportional growth, in %.
    pub shortfall_pct: f64,
    /// The noise the shortfall had to exceed twice: 5 %, or the spread of
    /// repeated runs where that is larger.
    #[serde(default)]
    pub noise_pct: f64,
    /// The same test over the first doubling: flat already there puts the
    /// knee at or below the lightest load.
    pub flat_from_start: bool,
    /// The rule, with this series' numbers.
    pub rule: String,
}

/// Elasticity and shortfall of tokens/s from `a` to `b`.
fn growth(a: &Point, b: &Point) -> (f64, f64) {
    let load = b.load / a.load - 1.0;
    if a.output_tps <= 0.0 || load <= 0.0 {
        return (0.0, 0.0);
    }
    let elasticity = (b.output_tps / a.output_tps - 1.0) / load;
    let proportional = a.output_tps * b.load / a.load;
    (elasticity, (proportional - b.output_tps) / proportional)
}

fn is_flat(elasticity: f64, shortfall: f64, noise: f64) -> bool {
    elasticity < KNEE_ELASTICITY && shortfall > 2.0 * noise
}

/// Applies the knee rule to points sorted by load; `None` with fewer than two
/// points or loads that are not positive.
pub fn flattening(points: &[Point]) -> Option<Flattening> {
    let (first, top) = (points.first()?, points.last()?);
    if points.len() < 2 || first.load <= 0.0 || top.load <= first.load {
        return None;
    }
    // The last point at half the top load or less (else the lightest).
    let from = points
        .iter()
        .rev()
        .find(|p| p.load <= top.load / 2.0)
        .unwrap_or(first);
    let (elasticity, shortfall) = growth(from, top);
    // Repeated runs measure the noise; it only ever raises the bar.
    let noise = points
        .iter()
        .filter_map(|p| p.spread.map(|s| s.relative_noise(p.output_tps)))
        .fold(KNEE_NOISE, f64::max);
    let start = points
        .iter()
        .find(|p| p.load >= first.load * 2.0)
        .unwrap_or(top);
    let (e0, s0) = growth(first, start);
    let saturated = is_flat(elasticity, shortfall, noise);
    let rule = format!(
        "load {} → {}: tokens/s {:.0} → {:.0}, elasticity {:.2} (a knee needs < {KNEE_ELASTICITY}), {:.0} % short of proportional growth (needs > {:.0} %)",
        from.load,
        top.load,
        from.output_tps,
        top.output_tps,
        elasticity,
        shortfall * 100.0,
        2.0 * noise * 100.0
    );
    Some(Flattening {
        saturated,
        from_load: from.load,
        to_load: top.load,
        elasticity,
        shortfall_pct: shortfall * 100.0,
        noise_pct: noise * 100.0,
        flat_from_start: saturated && is_flat(e0, s0, noise),
        rule,
    })
}

/// The objectives of one kind of service (documented defaults, overridable).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Objectives {
    pub chat_ttft_p99_ms: f64,
    pub chat_tpot_p99_ms: f64,
    /// Batch: E2E p99 may grow to this multiple of the series' lowest (a
    /// batch job trades individual latency for tokens/s, up to a point).
    pub batch_e2e_growth: f64,
    /// Cost: TTFT p99 sanity cap.
    pub cost_ttft_cap_ms: f64,
    /// Long context: KV usage ceiling.
    pub long_context_kv_max: f64,
    /// Agent (reasoning and tool-calling services): E2E p99 cap — such a
    /// service waits for whole answers, so it is judged by E2E and cost
    /// per answer, not by when the first token came.
    #[serde(default = "default_agent_e2e_p99_ms")]
    pub agent_e2e_p99_ms: f64,
    /// Voice (realtime speech): the lag behind the speaker, p99 cap.
    #[serde(default = "default_voice_lag_p99_ms")]
    pub voice_lag_p99_ms: f64,
}

fn default_voice_lag_p99_ms() -> f64 {
    500.0
}

fn default_agent_e2e_p99_ms() -> f64 {
    60_000.0
}

impl Objectives {
    /// Applies overrides such as
    /// `chat_ttft_p99=500ms,chat_tpot_p99=30ms,batch_e2e_growth=3,cost_ttft_cap=5s,long_context_kv_max=0.8,agent_e2e_p99=30s`.
    pub fn with_overrides(mut self, text: &str) -> Result<Objectives, String> {
        const KEYS: &str = "chat_ttft_p99, chat_tpot_p99, batch_e2e_growth, cost_ttft_cap, long_context_kv_max, agent_e2e_p99, voice_lag_p99";
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}`: expected NAME=VALUE ({KEYS})"))?;
            let ms = || {
                crate::slo::parse_limit_ms(key.trim(), value).map_err(|e| format!("`{part}`: {e}"))
            };
            let number = || match value.trim_end_matches('%').parse::<f64>() {
                Ok(v) if v > 0.0 && v.is_finite() => {
                    Ok(if value.ends_with('%') { v / 100.0 } else { v })
                }
                _ => Err(format!("`{part}`: `{value}` is not a positive number")),
            };
            match key.trim() {
                "chat_ttft_p99" => self.chat_ttft_p99_ms = ms()?,
                "chat_tpot_p99" => self.chat_tpot_p99_ms = ms()?,
                "batch_e2e_growth" => self.batch_e2e_growth = number()?,
                "cost_ttft_cap" => self.cost_ttft_cap_ms = ms()?,
                "agent_e2e_p99" => self.agent_e2e_p99_ms = ms()?,
                "voice_lag_p99" => self.voice_lag_p99_ms = ms()?,
                "long_context_kv_max" => match number()? {
                    v if v <= 1.0 => self.long_context_kv_max = v,
                    _ => {
                        return Err(format!(
                            "`{part}`: a share of the KV cache is at most 1 (or 100%)"
                        ))
                    }
                },
                other => return Err(format!("`{other}`: unknown objective ({KEYS})")),
            }
        }
        Ok(self)
    }
}

impl Default for Objectives {
    fn default() -> Self {
        Objectives {
            chat_ttft_p99_ms: 1000.0,
            chat_tpot_p99_ms: 50.0,
            batch_e2e_growth: 10.0,
            cost_ttft_cap_ms: 10_000.0,
            long_context_kv_max: 0.9,
            agent_e2e_p99_ms: default_agent_e2e_p99_ms(),
            voice_lag_p99_ms: default_voice_lag_p99_ms(),
        }
    }
}

/// The operating point chosen for one service profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recommendation {
    /// `chat`, `batch`, `cost`, `long-context`, `agent`.
    pub profile: String,
    pub objective: String,
    /// The metrics the choice rested on, in words (the chat profile's
    /// change to the answer start when the series reasoned, `--slo` when
    /// one is set).
    #[serde(default)]
    pub judged_by: String,
    /// Index into the series; `None` when no point satisfies the profile.
    pub point: Option<usize>,
    pub load: Option<f64>,
    /// Why this point: its numbers against the objective, or what would be needed.
    pub why: String,
    /// The expected figures at the chosen point.
    pub expect: Option<Point>,
    /// How far inside its objective the chosen point is, in % of the limit
    /// that binds first (chat: the nearer of TTFT and TPOT; batch: E2E
    /// against its bound; cost: TTFT against the cap; long-context: KV usage
    /// against its ceiling).
    #[serde(default)]
    pub margin_pct: Option<f64>,
    /// Chosen at the heaviest load measured while the limit it answers to
    /// never bound (a series that did not saturate, or an SLO still met at
    /// the top): the real operating point is at least this load.
    #[serde(default)]
    pub lower_bound: bool,
}

/// Whether a point may be recommended under `--slo` (always, without one).
fn meets_slo(p: &Point) -> bool {
    p.slo.is_none_or(|s| s.met())
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
        if p.failed == 0
            && eligible(p)
            && meets_slo(p)
            && best.is_none_or(|b| better(p, &points[b]))
        {
            best = Some(i);
        }
    }
    // A profile whose own objective some point meets, but none of those
    // meets --slo: say that, not the profile's own reason.
    let blocked_by_slo = best.is_none()
        && points
            .iter()
            .any(|p| p.failed == 0 && eligible(p) && !meets_slo(p));
    let none = if blocked_by_slo {
        format!("no point meets both --slo and this profile's objective ({objective})")
    } else {
        none
    };
    Recommendation {
        profile: profile.into(),
        objective,
        point: best,
        load: best.map(|i| points[i].load),
        why: best.map_or(none, |i| why(&points[i])),
        judged_by: String::new(),
        expect: best.map(|i| points[i]),
        margin_pct: None,
        lower_bound: false,
    }
}

/// The chat profile under `--slo`: the SLO is its objective.
fn chat_under_slo(points: &[Point], slo: &str) -> Recommendation {
    let undecided = points
        .iter()
        .any(|p| p.slo.is_some_and(|s| s.verdict == Verdict::NotEnoughData));
    let lightest = points.first().and_then(|p| p.slo.map(|s| (p.load, s)));
    let none = match lightest {
        _ if undecided => "the SLO could not be judged where it mattered: too few requests for its percentiles (see the SLO line; more --requests a point)".to_string(),
        Some((load, s)) => format!(
            "no load meets --slo {slo} (at the lightest load, {load}, the worst objective's upper bound is {:.0} % of its limit); a faster GPU, tensor parallelism or shorter prompts would",
            s.ratio * 100.0
        ),
        None => "no point was judged against --slo".into(),
    };
    choose(
        "chat",
        format!("the most load meeting --slo {slo} (each objective's 95 % upper bound within its limit)"),
        points,
        |p| p.slo.is_some_and(|s| s.met()),
        |a, b| a.load > b.load,
        |p| {
            format!(
                "meets --slo: the worst objective's upper bound is {:.0} % of its limit (TTFT p99 {:.0} ms, TPOT p99 {:.1} ms)",
                p.slo.map_or(0.0, |s| s.ratio * 100.0),
                p.ttft_p99_ms,
                p.tpot_p99_ms
            )
        },
        none,
    )
}

/// An operating point for each service profile. With `slo` (its objectives
/// in words; the points carry their judgement) the SLO is the chat
/// profile's objective and every profile's point must meet it.
pub fn recommend(points: &[Point], o: &Objectives, slo: Option<&str>) -> Vec<Recommendation> {
    let series = Series::of(points);
    let min_e2e = series.min_e2e;
    let start_name = series.start_name();
    let used = |profile: &str, p: &Point| match profile {
        "chat" if slo.is_some() => p.slo.map_or(1.0, |s| s.ratio),
        "chat" => (series.start(p) / o.chat_ttft_p99_ms).max(p.tpot_p99_ms / o.chat_tpot_p99_ms),
        "batch" => p.e2e_p99_ms / (o.batch_e2e_growth * min_e2e),
        "cost" => p.ttft_p99_ms / o.cost_ttft_cap_ms,
        "agent" => p.e2e_p99_ms / o.agent_e2e_p99_ms,
        "voice" => p.lag_p99_ms.unwrap_or(f64::INFINITY) / o.voice_lag_p99_ms,
        _ => p.kv_usage_max.unwrap_or(0.0) / o.long_context_kv_max,
    };
    let judged_by = |profile: &str| match profile {
        "chat" if slo.is_some() => "--slo".to_string(),
        "chat" => format!("{start_name}, TPOT p99"),
        "batch" => "output tokens/s, E2E p99".into(),
        "cost" => "cost per 1K output tokens, TTFT p99".into(),
        "agent" => "cost per answer, E2E p99".into(),
        "voice" => "realtime lag p99, the lag's growth along sessions".into(),
        _ => "KV usage, preemptions".into(),
    };
    let mut chosen = vec![
        match slo {
            Some(text) => chat_under_slo(points, text),
            None => chat(&series, o),
        },
        batch(&series, o),
        cost(&series, o),
        long_context(&series, o),
        agent(points, o),
    ];
    // Only a realtime speech series is judged for voice.
    if points.iter().any(|p| p.lag_p99_ms.is_some()) {
        chosen.push(voice(points, o));
    }
    chosen
        .into_iter()
        .map(|mut r| {
            r.margin_pct = r.expect.map(|p| (1.0 - used(&r.profile, &p)) * 100.0);
            r.judged_by = judged_by(&r.profile);
            r
        })
        .collect()
}

/// What the profiles' rules read off a whole series.
struct Series<'a> {
    points: &'a [Point],
    /// The lowest E2E p99 of any point (the batch profile's bound grows from it).
    min_e2e: f64,
    /// Every point knows its KV usage.
    kv_known: bool,
    /// A series that reasoned is judged for chat by when the answer
    /// starts, not by the first thought.
    reasoning: bool,
}

impl<'a> Series<'a> {
    fn of(points: &'a [Point]) -> Series<'a> {
        Series {
            points,
            min_e2e: points
                .iter()
                .map(|p| p.e2e_p99_ms)
                .fold(f64::INFINITY, f64::min),
            kv_known: points.iter().all(|p| p.kv_usage_max.is_some()),
            reasoning: points.iter().any(|p| p.answer_start_p99_ms.is_some()),
        }
    }

    /// The chat profile's start: the answer's where the series reasoned.
    fn start(&self, p: &Point) -> f64 {
        p.answer_start_p99_ms.unwrap_or(p.ttft_p99_ms)
    }

    fn start_name(&self) -> &'static str {
        if self.reasoning {
            "answer start p99"
        } else {
            "TTFT p99"
        }
    }

    /// What the lightest point measured, for "no point meets it" answers.
    fn at_lightest(&self, what: &dyn Fn(&Point) -> String) -> String {
        let lightest = self.points.iter().min_by(|a, b| a.load.total_cmp(&b.load));
        lightest.map_or(String::new(), |p| {
            format!(" (at the lightest load, {}: {})", p.load, what(p))
        })
    }
}

/// The chat profile without `--slo`: the most load whose start and TPOT
/// p99 keep the objectives.
fn chat(series: &Series, o: &Objectives) -> Recommendation {
    let (points, reasoning, start_name) = (series.points, series.reasoning, series.start_name());
    let start = |p: &Point| series.start(p);
    let at_lightest = |what: &dyn Fn(&Point) -> String| series.at_lightest(what);
    choose(
        "chat",
        format!("the most load with {start_name} ≤ {} ms and TPOT p99 ≤ {} ms", o.chat_ttft_p99_ms, o.chat_tpot_p99_ms),
        points,
        |p| start(p) <= o.chat_ttft_p99_ms && p.tpot_p99_ms <= o.chat_tpot_p99_ms,
        |a, b| a.load > b.load,
        |p| {
            format!(
                "{start_name} {:.0} ms ({:.0} % of the limit), TPOT p99 {:.1} ms ({:.0} % of the limit)",
                start(p),
                start(p) / o.chat_ttft_p99_ms * 100.0,
                p.tpot_p99_ms,
                p.tpot_p99_ms / o.chat_tpot_p99_ms * 100.0
            )
        },
        format!(
            "no load meets the chat objectives{}; meeting them takes a faster GPU or tensor parallelism, a smaller or quantised model, or shorter prompts (TTFT){}",
            at_lightest(&|p| format!("{start_name} {:.0} ms, TPOT p99 {:.1} ms", start(p), p.tpot_p99_ms)),
            if reasoning { ", or a smaller reasoning budget" } else { "" }
        ),
    )
}

/// The batch profile: the most output tokens/s whose E2E stays bounded.
fn batch(series: &Series, o: &Objectives) -> Recommendation {
    let (points, min_e2e) = (series.points, series.min_e2e);
    choose(
        "batch",
        format!("the most output tokens/s whose E2E p99 stays bounded: within {}× the series' lowest, the server's queue not growing", o.batch_e2e_growth),
        points,
        |p| !p.overloaded && p.e2e_p99_ms <= o.batch_e2e_growth * min_e2e,
        |a, b| a.output_tps > b.output_tps,
        |p| format!("{:.0} output tokens/s with E2E p99 {:.0} ms ({:.1}× the lowest)", p.output_tps, p.e2e_p99_ms, p.e2e_p99_ms / min_e2e),
        format!(
            "no point has bounded E2E: each one's queue grew or its E2E p99 passed {}× the lowest; lighter loads would",
            o.batch_e2e_growth
        ),
    )
}

/// The cost profile: the least cost per 1K output tokens under a TTFT cap.
fn cost(series: &Series, o: &Objectives) -> Recommendation {
    let points = series.points;
    let at_lightest = |what: &dyn Fn(&Point) -> String| series.at_lightest(what);
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
        format!(
            "every point's TTFT p99 exceeds the {} ms cap{}; a higher cap (--objectives cost_ttft_cap=…), a faster GPU or shorter prompts would",
            o.cost_ttft_cap_ms,
            at_lightest(&|p| format!("{:.0} ms", p.ttft_p99_ms))
        ),
    )
}

/// The long-context profile: the most load that leaves KV headroom and
/// preempts nothing.
fn long_context(series: &Series, o: &Objectives) -> Recommendation {
    let (points, kv_known) = (series.points, series.kv_known);
    let at_lightest = |what: &dyn Fn(&Point) -> String| series.at_lightest(what);
    choose(
        "long-context",
        format!(
            "the most load with KV usage under {:.0} % and no preemptions",
            o.long_context_kv_max * 100.0
        ),
        points,
        |p| {
            kv_known
                && p.kv_usage_max.is_some_and(|k| k < o.long_context_kv_max)
                && p.preemptions.unwrap_or(0.0) == 0.0
        },
        |a, b| a.load > b.load,
        |p| {
            format!(
                "KV usage max {:.0} %, no preemptions",
                p.kv_usage_max.unwrap_or(0.0) * 100.0
            )
        },
        if kv_known {
            format!(
                "every point fills the KV cache or preempts{}; more KV memory (an FP8 KV cache, more GPUs) or lighter loads would leave headroom",
                at_lightest(&|p| format!(
                    "KV usage max {:.0} %, {:.0} preemptions",
                    p.kv_usage_max.unwrap_or(0.0) * 100.0,
                    p.preemptions.unwrap_or(0.0)
                ))
            )
        } else {
            "the server does not expose KV usage: no KV-headroom recommendation".into()
        },
    )
}

/// The agent profile (reasoning and tool-calling services): the least cost
/// per answer whose E2E p99 is within its cap and whose queue is steady.
fn agent(points: &[Point], o: &Objectives) -> Recommendation {
    let cap = o.agent_e2e_p99_ms;
    choose(
        "agent",
        format!("the least cost per answer with E2E p99 ≤ {:.0} s, the server's queue not growing", cap / 1e3),
        points,
        |p| !p.overloaded && p.e2e_p99_ms <= cap && p.answers_per_s > 0.0,
        |a, b| match (a.cost_per_answer, b.cost_per_answer) {
            (Some(x), Some(y)) => x < y,
            _ => a.answers_per_s > b.answers_per_s, // same GPU: cost ∝ 1 / answers/s
        },
        |p| {
            let thinking = p
                .reasoning_share
                .map(|s| format!(", {:.0} % of output thinking", s * 100.0))
                .unwrap_or_default();
            match p.cost_per_answer {
                Some(c) => format!("${c:.5} per answer at {:.2} answers/s per GPU, E2E p99 {:.1} s{thinking}", p.answers_per_s, p.e2e_p99_ms / 1e3),
                None => format!("{:.2} answers/s per GPU with E2E p99 {:.1} s{thinking}: the least cost per answer on the same GPUs (give --gpu-price for dollars)", p.answers_per_s, p.e2e_p99_ms / 1e3),
            }
        },
        format!(
            "no point answers within E2E p99 {:.0} s with a steady queue; a higher cap (--objectives agent_e2e_p99=…), a faster GPU, a smaller reasoning budget or lighter loads would",
            cap / 1e3
        ),
    )
}

/// The voice profile (realtime speech to text): the most load whose
/// transcript keeps up with the speaker — each delta's lag p99 within its
/// cap, and the lag not growing along the sessions.
fn voice(points: &[Point], o: &Objectives) -> Recommendation {
    let cap = o.voice_lag_p99_ms;
    let behind = |p: &&Point| p.lag_grows || p.lag_p99_ms.is_some_and(|l| l > cap);
    let said = |p: &Point| {
        let growing = if p.lag_grows { ", growing" } else { "" };
        format!(
            "{} (lag p99 {:.0} ms{growing})",
            p.load,
            p.lag_p99_ms.unwrap_or(f64::NAN)
        )
    };
    let none = match points.iter().find(behind) {
        Some(p) => format!(
            "the transcript falls behind the speaker from the lightest load measured, {}; a faster GPU, more replicas or a smaller model would",
            said(p)
        ),
        None => "no point measured a realtime lag".into(),
    };
    let mut r = choose(
        "voice",
        format!("the most load whose realtime lag p99 ≤ {cap:.0} ms and does not grow along the sessions"),
        points,
        |p| !p.lag_grows && p.lag_p99_ms.is_some_and(|l| l <= cap),
        |a, b| a.load > b.load,
        |p| format!("lag p99 {:.0} ms, steady", p.lag_p99_ms.unwrap_or(0.0)),
        none,
    );
    // Name the load where it stops keeping up, when one was measured.
    if let Some(b) = r.point.and_then(|i| points[i..].iter().find(behind)) {
        r.why = format!("{}; it stops keeping up at {}", r.why, said(b));
    }
    r
}

/// Where a series saturates (see [`saturation`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Saturation {
    pub index: usize,
    pub load: f64,
}

/// Everything `sweep.json` says about a series (its `analysis` object).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Analysis {
    /// The points in ascending load.
    pub series: Vec<Point>,
    pub pareto_frontier: Vec<usize>,
    /// The knee of tokens/s against TTFT p99, in loads; `null` unless the
    /// series flattened by the knee rule (see `flattening`).
    pub knee: Option<Knee>,
    /// The knee rule applied to this series (absent with fewer than 2 points).
    #[serde(default)]
    pub flattening: Option<Flattening>,
    /// "not saturated up to load X: test higher loads", when it did not flatten.
    #[serde(default)]
    pub note: Option<String>,
    pub saturation: Option<Saturation>,
    pub objectives: Objectives,
    pub recommendations: Vec<Recommendation>,
    /// With `--slo`: the highest load that meets it.
    #[serde(default)]
    pub slo: Option<SloCapacity>,
    /// With `--slo`: what an autoscaler should hold per replica.
    #[serde(default)]
    pub scaling: Option<crate::autoscale::Scaling>,
    /// What the answers did across the loads (`--consistency`, `--grade`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answers: Option<crate::consistency::AcrossLoads>,
    /// Speculative decoding's acceptance across the loads, where the server counted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_decode: Option<crate::spec_decode::SpecAcrossLoads>,
}

/// The knee by Kneedle on tokens/s against TTFT p99 (falling back to load),
/// as loads, with the interval widened to the measured neighbours: between
/// grid points the knee could lie anywhere.
fn placed_knee(series: &[Point]) -> Option<Knee> {
    let ttft: Vec<f64> = series.iter().map(|p| p.ttft_p99_ms).collect();
    let load: Vec<f64> = series.iter().map(|p| p.load).collect();
    let tps: Vec<f64> = series.iter().map(|p| p.output_tps).collect();
    let (xs, k) = match knee(&ttft, &tps, 0.05) {
        Some(k) => (&ttft, k),
        None => (&load, knee(&load, &tps, 0.05)?),
    };
    // The points Kneedle cannot tell apart from the knee, by index.
    let near: Vec<usize> = (0..series.len())
        .filter(|&i| xs[i] >= k.low && xs[i] <= k.high)
        .chain([k.index])
        .collect();
    let first = near.iter().copied().min()?;
    let last = near.iter().copied().max()?;
    Some(Knee {
        index: k.index,
        load: series[k.index].load,
        low: series[first.saturating_sub(1)].load,
        high: series[(last + 1).min(series.len() - 1)].load,
    })
}

/// The whole analysis of a series sorted by load.
pub fn analyse(series: Vec<Point>, objectives: Objectives, slo: Option<SloCapacity>) -> Analysis {
    let flat = flattening(&series);
    let saturated = flat.as_ref().is_some_and(|f| f.saturated);
    let knee = match &flat {
        Some(f) if f.flat_from_start => Some(Knee {
            index: 0,
            load: series[0].load,
            low: 0.0,
            high: series[0].load,
        }),
        Some(f) if f.saturated => placed_knee(&series),
        _ => None,
    };
    let top = series.last().map(|p| p.load);
    let note = match (&flat, top) {
        (Some(f), Some(top)) if !f.saturated => Some(format!(
            "not saturated up to load {top}: test higher loads ({})",
            f.rule
        )),
        (Some(f), _) if f.flat_from_start => Some(format!(
            "flat from the lightest load: the knee is at or below load {} (test lighter loads)",
            series[0].load
        )),
        (None, Some(top)) => Some(format!(
            "one point (load {top}): a series needs two or more to show where it saturates"
        )),
        _ => None,
    };
    let mut recommendations = recommend(
        &series,
        &objectives,
        slo.as_ref().map(|c| c.objectives.as_str()),
    );
    let slo_beyond = slo.as_ref().is_some_and(|c| c.beyond_series());
    for r in &mut recommendations {
        let at_top = r.point.is_some() && r.point == series.len().checked_sub(1);
        let open_ended = !saturated
            || matches!(r.profile.as_str(), "long-context")
            || (r.profile == "chat" && (slo_beyond || slo.is_none()));
        if at_top && open_ended {
            r.lower_bound = true;
            r.why += "; a lower bound: its limit never bound in this series, higher loads may still qualify";
        }
    }
    Analysis {
        pareto_frontier: pareto(&series),
        knee,
        flattening: flat,
        note,
        saturation: saturation(&series, 0.05).map(|index| Saturation {
            index,
            load: series[index].load,
        }),
        recommendations,
        objectives,
        slo,
        scaling: None,
        answers: None,
        spec_decode: None,
        series,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slo::ObjectiveResult;

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

    #[allow(clippy::too_many_arguments)] // one column of the test table each
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
            answer_start_p99_ms: None,
            tpot_p99_ms: tpot,
            e2e_p99_ms: e2e,
            cost_per_1k: Some(1.0 / tps),
            answers_per_s: tps / 100.0,
            cost_per_answer: None,
            reasoning_share: None,
            gpu_util_pct: None,
            kv_usage_max: Some(kv),
            preemptions: Some(pre),
            failed: 0,
            overloaded: false,
            slo: None,
            spread: None,
            lag_p99_ms: None,
            lag_grows: false,
        }
    }

    #[test]
    fn a_point_no_request_answered_reads_back_unbounded() {
        let inf = f64::INFINITY;
        let p = pt(150.0, 0.0, 0.0, inf, inf, inf, 0.9, 0.0);
        let text = serde_json::to_string(&p).unwrap();
        assert!(text.contains(r#""e2e_p99_ms":null"#), "{text}");
        let back: Point = serde_json::from_str(&text).unwrap();
        assert_eq!(back.ttft_p99_ms, inf);
        assert_eq!(back.tpot_p99_ms, inf);
        assert_eq!(back.e2e_p99_ms, inf);
        let bad = text.replace(r#""e2e_p99_ms":null"#, r#""e2e_p99_ms":"x""#);
        assert!(serde_json::from_str::<Point>(&bad).is_err());
        // A repeat with no answer, in a point's spread.
        let spread = Spread {
            runs: 2,
            output_tps: [0.0, 10.0],
            ttft_p99_ms: [5.0, inf],
        };
        let text = serde_json::to_string(&spread).unwrap();
        let back: Spread = serde_json::from_str(&text).unwrap();
        assert_eq!(back.ttft_p99_ms, [5.0, inf]);
    }

    /// An objective whose upper bound is `ratio` × its limit (`None`: no value).
    fn judged(name: &str, ratio: Option<f64>) -> ObjectiveResult {
        let (metric, stat) = name.split_once('_').unwrap();
        ObjectiveResult {
            metric: metric.into(),
            stat: stat.into(),
            limit_ms: 100.0,
            value_ms: ratio.map(|r| r * 90.0),
            met: ratio.is_some_and(|r| r <= 1.0),
            verdict: Some(match ratio {
                Some(r) if r <= 1.0 => Verdict::Met,
                Some(_) => Verdict::NotMet,
                None => Verdict::NotEnoughData,
            }),
            n: Some(2000),
            needed: Some(1000),
            ci_low_ms: ratio.map(|r| r * 80.0),
            ci_high_ms: ratio.map(|r| r * 100.0),
            reason: ratio.is_none().then(|| "not enough requests".to_string()),
        }
    }

    #[test]
    fn slo_capacity_interpolates_between_the_last_good_and_first_bad_point() {
        let r = |v: &[f64]| {
            vec![
                judged("ttft_p99", Some(v[0])),
                judged("tpot_p99", Some(v[1])),
            ]
        };
        let loads = [1.0, 2.0, 4.0, 8.0];
        let ratios = [
            r(&[0.2, 0.1]),
            r(&[0.3, 0.4]),
            r(&[0.5, 0.8]),
            r(&[0.6, 1.2]),
        ];
        let cap = |ratios: &[Vec<ObjectiveResult>], t| {
            slo_capacity(&loads[..ratios.len()], ratios, "slo".into(), Some(t))
        };
        let c = cap(&ratios, 6.0);
        assert_eq!(c.highest_met_load, Some(4.0));
        // tpot: 0.8 at 4, 1.2 at 8 → 1.0 at 6.
        assert!((c.interpolated_load.unwrap() - 6.0).abs() < 1e-9, "{c:?}");
        assert!((c.margin_pct.unwrap() - 20.0).abs() < 1e-9);
        assert_eq!(c.limiting.as_deref(), Some("tpot_p99"));
        assert_eq!(c.target_met, Some(true));
        assert_eq!(cap(&ratios, 7.0).target_met, Some(false));
        // Nothing fails: the capacity is at least the heaviest point.
        let easy = [
            r(&[0.1, 0.1]),
            r(&[0.2, 0.2]),
            r(&[0.3, 0.3]),
            r(&[0.4, 0.4]),
        ];
        let c = cap(&easy, 8.0);
        assert_eq!((c.highest_met_load, c.interpolated_load), (Some(8.0), None));
        assert_eq!(c.target_met, Some(true));
        assert!(c.beyond_series());
        // Even the lightest fails.
        let hard = [
            vec![judged("ttft_p99", Some(1.5))],
            vec![judged("ttft_p99", Some(0.5))],
        ];
        let c = cap(&hard, 1.0);
        assert_eq!((c.highest_met_load, c.target_met), (None, Some(false)));
    }

    #[test]
    fn slo_capacity_stops_at_a_point_it_cannot_judge() {
        let loads = [1.0, 2.0, 4.0];
        let points = [
            vec![judged("ttft_p99", Some(0.3))],
            vec![judged("ttft_p99", None)],
            vec![judged("ttft_p99", Some(2.0))],
        ];
        let c = slo_capacity(&loads, &points, "slo".into(), Some(4.0));
        assert_eq!(c.highest_met_load, Some(1.0));
        assert_eq!(c.interpolated_load, None);
        assert_eq!(c.undecided_load, Some(2.0));
        assert_eq!(c.target_met, None, "the data cannot tell");
        assert!(!c.beyond_series());
        let c = slo_capacity(&loads, &points, "slo".into(), Some(1.0));
        assert_eq!(c.target_met, Some(true));
    }

    /// The issue's series: tokens/s doubles with every doubling of load.
    fn doubling(loads: &[f64]) -> Vec<Point> {
        loads
            .iter()
            .map(|&x| pt(x, 100.0 * x, 100.0, 20.0 + x, 10.0, 2000.0, 0.01, 0.0))
            .collect()
    }

    #[test]
    fn a_reasoning_series_is_judged_for_chat_by_when_the_answer_starts() {
        // TTFT p99 stays ~30 ms, but the answer starts after the thinking:
        // 400, 800, then 1,600 ms past the 1 s chat limit.
        let mut s = doubling(&[1.0, 2.0, 4.0]);
        for (p, start) in s.iter_mut().zip([400.0, 800.0, 1600.0]) {
            p.answer_start_p99_ms = Some(start);
        }
        let chat = &recommend(&s, &Objectives::default(), None)[0];
        assert_eq!(chat.load, Some(2.0), "{chat:?}");
        assert!(
            chat.objective.contains("answer start p99"),
            "{}",
            chat.objective
        );
        assert!(chat.why.contains("answer start p99 800 ms"), "{}", chat.why);
        // Without reasoning the same series is judged by TTFT: all of it meets.
        let plain = &recommend(&doubling(&[1.0, 2.0, 4.0]), &Objectives::default(), None)[0];
        assert_eq!(plain.load, Some(4.0));
        assert!(plain.objective.contains("TTFT p99"), "{}", plain.objective);
    }

    #[test]
    fn no_knee_on_a_series_that_never_bent() {
        let a = analyse(
            doubling(&[1.0, 2.0, 4.0, 8.0, 16.0]),
            Objectives::default(),
            None,
        );
        assert_eq!(a.knee, None);
        assert!(!a.flattening.as_ref().unwrap().saturated);
        let note = a.note.unwrap();
        assert!(
            note.starts_with("not saturated up to load 16: test higher loads"),
            "{note}"
        );
        // Every profile chose the top point, and says it is a lower bound.
        for r in &a.recommendations {
            assert_eq!(r.load, Some(16.0), "{r:?}");
            assert!(r.lower_bound && r.why.contains("lower bound"), "{r:?}");
        }
    }

    #[test]
    fn a_knee_where_the_gain_clearly_fell_with_its_neighbours_as_interval() {
        let tps = [100.0, 200.0, 400.0, 780.0, 1300.0, 1500.0, 1540.0];
        let s: Vec<Point> = tps
            .iter()
            .enumerate()
            .map(|(i, &y)| {
                let x = 2f64.powi(i as i32);
                pt(x, y, 100.0, 20.0 * x, 10.0, 2000.0, 0.1, 0.0)
            })
            .collect();
        let a = analyse(s, Objectives::default(), None);
        let f = a.flattening.unwrap();
        assert!(f.saturated && f.elasticity < 0.1, "{f:?}");
        let k = a.knee.unwrap();
        assert!(
            k.low < k.load && k.load < k.high,
            "an interval, not a point: {k:?}"
        );
        assert!((8.0..=32.0).contains(&k.load), "{k:?}");
        assert!(a.note.is_none());
    }

    #[test]
    fn repeats_become_one_point_with_their_spread_and_raise_the_noise_bar() {
        let mut runs = doubling(&[1.0, 2.0, 4.0]);
        runs.extend(doubling(&[1.0, 2.0, 4.0]).into_iter().map(|mut p| {
            p.output_tps *= 1.3;
            p
        }));
        runs.extend(doubling(&[1.0, 2.0, 4.0]).into_iter().map(|mut p| {
            p.output_tps *= 0.7;
            p
        }));
        runs[2].slo = Some(PointSlo {
            verdict: Verdict::NotMet,
            ratio: 1.5,
        });
        let points = combine_repeats(runs);
        assert_eq!(points.len(), 3);
        let s = points[2].spread.unwrap();
        assert_eq!(s.runs, 3);
        assert_eq!(points[2].output_tps, 400.0, "the median run");
        assert_eq!(s.output_tps, [280.0, 520.0]);
        assert_eq!(
            points[2].slo.unwrap().verdict,
            Verdict::NotMet,
            "one run failed it"
        );
        let f = flattening(&points).unwrap();
        assert!((f.noise_pct - 30.0).abs() < 1e-9, "{f:?}");
    }

    #[test]
    fn recommendations_never_break_the_slo() {
        // TTFT p99 passes 100 ms between loads 1 and 4.
        let mut s = doubling(&[1.0, 4.0, 16.0]);
        let ratios = [0.6, 1.4, 3.0];
        for (p, r) in s.iter_mut().zip(ratios) {
            p.slo = Some(PointSlo {
                verdict: if r <= 1.0 {
                    Verdict::Met
                } else {
                    Verdict::NotMet
                },
                ratio: r,
            });
        }
        let recs = recommend(&s, &Objectives::default(), Some("ttft_p99 ≤ 100 ms"));
        for r in &recs {
            assert_eq!(r.load, Some(1.0), "{r:?}");
        }
        let chat = &recs[0];
        assert!(
            chat.objective.contains("ttft_p99 ≤ 100 ms"),
            "{}",
            chat.objective
        );
        assert!((chat.margin_pct.unwrap() - 40.0).abs() < 1e-9);
    }

    #[test]
    fn objectives_are_overridable_with_clear_errors() {
        let o = Objectives::default()
            .with_overrides("chat_ttft_p99=300ms, long_context_kv_max=80%,batch_e2e_growth=2")
            .unwrap();
        assert_eq!(o.chat_ttft_p99_ms, 300.0);
        assert_eq!(o.long_context_kv_max, 0.8);
        assert_eq!(o.batch_e2e_growth, 2.0);
        assert_eq!(o.chat_tpot_p99_ms, Objectives::default().chat_tpot_p99_ms);
        for bad in [
            "chat_ttft_p99=300",
            "chat_ttft=1s",
            "chat_ttft_p99",
            "batch_e2e_growth=-1",
            "long_context_kv_max=1.5",
        ] {
            let e = Objectives::default().with_overrides(bad).unwrap_err();
            assert!(e.contains(bad.split('=').next().unwrap()), "{bad}: {e}");
        }
    }

    #[test]
    fn frontier_saturation_and_recommendations() {
        let s = vec![
            pt(1.0, 100.0, 100.0, 20.0, 10.0, 2000.0, 0.01, 0.0),
            pt(4.0, 380.0, 95.0, 40.0, 11.0, 2100.0, 0.05, 0.0),
            pt(16.0, 1300.0, 80.0, 300.0, 14.0, 2600.0, 0.3, 0.0),
            pt(64.0, 3000.0, 50.0, 900.0, 25.0, 4500.0, 0.95, 12.0),
            pt(256.0, 3100.0, 15.0, 5000.0, 70.0, 25000.0, 0.99, 300.0),
        ];
        assert_eq!(pareto(&s).len(), 5, "each trades one axis for another");
        assert_eq!(saturation(&s, 0.05), Some(4));
        let r = recommend(&s, &Objectives::default(), None);
        let load = |p: &str| r.iter().find(|x| x.profile == p).unwrap().load.unwrap();
        assert_eq!(load("chat"), 64.0);
        assert_eq!(
            load("batch"),
            64.0,
            "256 has the most tokens/s but E2E exploded"
        );
        assert_eq!(load("cost"), 256.0, "under the 10 s cap, the cheapest");
        assert_eq!(load("long-context"), 16.0);
        let margin = |p: &str| {
            r.iter()
                .find(|x| x.profile == p)
                .unwrap()
                .margin_pct
                .unwrap()
        };
        // Chat at 64: TTFT 900 of 1000 ms binds (TPOT 25 of 50 ms): 10 % left.
        assert!((margin("chat") - 10.0).abs() < 1e-9);
        // Long context at 16: KV 0.3 of 0.9.
        assert!((margin("long-context") - 66.666_666_666).abs() < 1e-6);
        let strict = Objectives {
            chat_ttft_p99_ms: 10.0,
            ..Objectives::default()
        };
        let chat = recommend(&s, &strict, None)
            .into_iter()
            .find(|x| x.profile == "chat")
            .unwrap();
        assert!(chat.point.is_none() && chat.why.contains("no load"));
        // It says what the lightest load measured, so the gap is visible.
        assert!(
            chat.why.contains("at the lightest load, 1: TTFT p99"),
            "{}",
            chat.why
        );
    }
}
