//! The SLO capacity by search: `sweep --find rate|concurrency` against a
//! server already running, and each setting of `tune`.
//!
//! A maximum-throughput probe (a closed loop at `--auto-max-concurrency`)
//! bounds the capacity; bisection narrows the bracket
//! ([`tokenscope_core::search::Bisection`]) until it is within
//! `--precision`. Each point runs until its verdict is decided
//! ([`StopRule::Decided`]) or to its request cap, and counts as a miss when
//! it does not meet the SLO at its objectives' upper 95 % bounds, or was
//! stopped because its queue grew (`saturation`, open loops) or its
//! requests failed (`errors>5%`). The search is written to `find.json`.

use crate::points::Points;
use crate::run_dir::Done;
use crate::series::{closed, judged, open, Level};
use crate::spec::workload::Load;
use serde::{Deserialize, Serialize};
use tokenscope_core::breaker::{Decide, StopRule, Tripped};
use tokenscope_core::capacity::PointSlo;
use tokenscope_core::search::{grid_cost, Bisection, Bracket, GridCost, SearchOver};
use tokenscope_core::slo::{thousands, Slo};

pub const FIND_JSON: &str = "find.json";
pub const SCHEMA: &str = "tokenscope.find/v1";
/// A point's request cap when neither `--requests` nor the SLO asks for more.
pub const MIN_POINT_REQUESTS: u64 = 100;
/// A search's points stop once this share of their requests fail.
pub const ERRORS_STOP: f64 = 0.05;

/// What a search did and found (`find.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Found {
    pub schema: String,
    pub over: SearchOver,
    /// The objectives in words.
    pub slo: String,
    pub precision: f64,
    pub probe: Option<Probe>,
    /// `None` when the search ended before the probe did.
    pub bracket: Option<Bracket>,
    /// The points in the order they ran.
    pub points: Vec<Searched>,
    /// Every request sent (the probe's too), and the seconds the runs took.
    pub requests: u64,
    pub seconds: f64,
    /// A point's cap (`None`: `--duration` bounded the points instead).
    pub requests_per_point: Option<u64>,
    /// What a fixed grid of the same precision would have sent.
    pub grid: Option<GridCost>,
    /// Ctrl-C, or a run that could not write its output, ended the search.
    pub interrupted: bool,
    /// Why the search ended before its bracket closed (the server died).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
}

/// The maximum-throughput probe.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Probe {
    pub concurrency: u64,
    pub requests_per_s: f64,
    pub output_tokens_per_s: f64,
    pub requests: u64,
    pub seconds: f64,
    /// Whether it met the SLO (a concurrency search's top point).
    pub met: bool,
}

/// One point of the search.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Searched {
    pub load: f64,
    pub met: bool,
    /// `met`, `not_met`, `not_enough_data`, `saturation` or `errors`
    /// (stopped on them, or more than 5 % failed).
    pub verdict: String,
    /// The objective that binds (the worst bound ÷ limit).
    pub binding: Option<String>,
    /// Why a verdict could not be reached (`not_enough_data`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undecided: Option<String>,
    /// Why the point ended before its cap.
    pub stopped: Option<Tripped>,
    pub requests: u64,
    pub seconds: f64,
    pub output_tokens_per_s: f64,
    /// Its run directory, relative to the search's.
    pub dir: Option<String>,
    /// `--between-points` before it: what was done, or (`refused: …`) why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub between: Option<String>,
}

impl Found {
    fn new(over: SearchOver, slo: &Slo, precision: f64) -> Found {
        Found {
            schema: SCHEMA.into(),
            over,
            slo: slo.describe(),
            precision,
            probe: None,
            bracket: None,
            points: Vec::new(),
            requests: 0,
            seconds: 0.0,
            requests_per_point: None,
            grid: None,
            interrupted: false,
            ended: None,
        }
    }
}

/// Runs the search on `points` (its directory, site and load); the points
/// searched stay in `points.done`, the probe does not. `gone` is asked
/// after each run whether the server is gone (and why): the search ends
/// there rather than read a dead server's failures as misses.
pub async fn search(
    points: &mut Points<'_>,
    over: SearchOver,
    slo: &Slo,
    gone: &mut dyn FnMut() -> Option<String>,
) -> anyhow::Result<Found> {
    let args = points.args;
    let mut found = Found::new(over, slo, args.precision);
    let cap = point_cap(&points.base.flags, slo);
    found.requests_per_point = cap;
    if let Some(w) = cap.and_then(|n| crate::warnings::slo_sample_size(slo, n)) {
        points.say(&format!("warning: {}", w.message()));
    }
    let c = args.auto_max_concurrency;
    points.say(&format!(
        "find: maximum-throughput probe at concurrency {c}"
    ));
    let probe = closed(&points.base, c);
    if !points.run_apart(probe, "probe").await? {
        found.interrupted = true;
        return Ok(found);
    }
    let d = points.done.pop().expect("the probe ran");
    if let Some(why) = gone() {
        found.ended = Some(why);
        return Ok(found);
    }
    let probe = probe_of(&d, c, slo);
    found.requests += probe.requests;
    found.seconds += probe.seconds;
    let bound = match over {
        SearchOver::Rate => tokenscope_core::search::round3(probe.requests_per_s),
        SearchOver::Concurrency => c as f64,
    };
    if bound <= 0.0 {
        anyhow::bail!(
            "find: the probe at concurrency {c} finished no request ({} failed): nothing to search below",
            d.results.counts.failed
        );
    }
    let mut bisection = Bisection::new(over, bound, args.precision);
    if over == SearchOver::Concurrency {
        bisection.record(bound, probe.met);
    }
    points.say(&format!(
        "find: the probe carried {:.2} requests/s; the capacity lies below {bound} {}",
        probe.requests_per_s,
        over.unit()
    ));
    found.probe = Some(probe);
    // A concurrency search's probe is its top point, in the series' own
    // unit: kept, so a capacity at it has its figures (a rate search's
    // probe is a closed loop, outside its series).
    if over == SearchOver::Concurrency {
        points.done.push(d);
    }
    found.grid = cap.map(|_| {
        grid_cost(args.precision, bound, |load| {
            level(points, over, load, cap)
                .work
                .flags
                .requests
                .unwrap_or(0)
        })
    });
    points.stop_rules = stop_rules(over, slo, args.min_point_time.as_secs_f64());
    while let Some(load) = bisection.next() {
        let b = bisection.bracket();
        points.say(&format!(
            "find: {load} {} (bracket {}–{})",
            over.unit(),
            b.low,
            b.high
        ));
        let before = points.done.len();
        if !points.point(level(points, over, load, cap)).await? {
            found.interrupted = true;
            break;
        }
        if let Some(why) = gone() {
            found.ended = Some(why);
            break;
        }
        if points.done.len() == before {
            // Skipped (at or above a load that saturated): a miss, run or not.
            bisection.record(load, false);
            continue;
        }
        let d = points.done.last().expect("the point ran");
        let mut searched = searched(d, &points.dir, slo);
        searched.between = points
            .between
            .clone()
            .map(|b| b.unwrap_or_else(|e| format!("refused: {e}")));
        points.say(&format!(
            "find: {load}: {}{}",
            searched.verdict,
            searched
                .stopped
                .as_ref()
                .map_or(String::new(), |t| format!(" ({})", t.why))
        ));
        found.requests += searched.requests;
        found.seconds += searched.seconds;
        // Not a miss: the data cannot say, and a search on it would conclude
        // what it cannot support.
        if let Some(why) = &searched.undecided {
            found.ended = Some(format!(
                "the point at {load} could not be judged ({why}): give each point more requests (--requests)"
            ));
            found.points.push(searched);
            break;
        }
        bisection.record(load, searched.met);
        found.points.push(searched);
    }
    points.stop_rules.clear();
    found.bracket = Some(bisection.bracket());
    Ok(found)
}

/// A point's request cap: `--requests`, else what the SLO's percentiles
/// need (at least [`MIN_POINT_REQUESTS`]); `None` when `--duration` bounds
/// the points.
pub fn point_cap(flags: &crate::cli::LoadArgs, slo: &Slo) -> Option<u64> {
    match (flags.requests, flags.duration) {
        (Some(n), _) => Some(n),
        (None, Some(_)) => None,
        (None, None) => Some(
            slo.requests_needed()
                .map_or(0, |(n, _)| n)
                .max(MIN_POINT_REQUESTS),
        ),
    }
}

/// A point's level: its cap, but never fewer requests than a closed loop
/// needs to hold its concurrency (two rounds of it) or an open loop sends
/// in `min_point_s` (so its queue has time to build). The planned search
/// (`plan_search`) sizes its points here too.
pub fn level_at(
    base: &Load,
    over: SearchOver,
    load: f64,
    cap: Option<u64>,
    min_point_s: f64,
) -> Level {
    let mut level = match over {
        SearchOver::Rate => open(base, load),
        SearchOver::Concurrency => closed(base, load as u64),
    };
    let least = match over {
        SearchOver::Rate => (load * min_point_s).ceil() as u64,
        SearchOver::Concurrency => 2 * load as u64,
    };
    if let Some(cap) = cap {
        level.work.flags.requests = Some(cap.max(least));
    }
    level
}

fn level(points: &Points, over: SearchOver, load: f64, cap: Option<u64>) -> Level {
    let min_point_s = points.args.min_point_time.as_secs_f64();
    level_at(&points.base, over, load, cap, min_point_s)
}

/// Enforce mode: a point stops once decided, when its requests fail, and
/// (an open loop) when its queue grows.
fn stop_rules(over: SearchOver, slo: &Slo, met_after_s: f64) -> Vec<StopRule> {
    let mut rules = vec![
        StopRule::Decided(Decide {
            slo: slo.clone(),
            met_after_s,
            failed_share: ERRORS_STOP,
        }),
        StopRule::Errors(ERRORS_STOP),
    ];
    if over == SearchOver::Rate {
        rules.push(StopRule::Saturation);
    }
    rules
}

fn probe_of(d: &Done, concurrency: u64, slo: &Slo) -> Probe {
    let r = &d.results;
    Probe {
        concurrency,
        requests_per_s: r.throughput.requests_per_s,
        output_tokens_per_s: r.throughput.output_tokens_per_s,
        requests: r.counts.requests,
        seconds: r.window.duration_s,
        met: PointSlo::judge(&judged(d, slo)).0.met(),
    }
}

/// A point's outcome: the SLO at its upper bounds, unless a rule other
/// than the verdict stopped it.
fn searched(d: &Done, dir: &std::path::Path, slo: &Slo) -> Searched {
    let r = &d.results;
    let objectives = judged(d, slo);
    let (standing, binding) = PointSlo::judge(&objectives);
    let reasons: Vec<String> = objectives.iter().filter_map(|o| o.reason.clone()).collect();
    let stopped = r.stopped.clone();
    // Those in flight when a rule stopped the point were cancelled, not failed.
    let cancelled = r.counts.errors.get("cancelled").copied().unwrap_or(0);
    let failed_share = r.counts.failed.saturating_sub(cancelled) as f64
        / r.counts.requests.saturating_sub(cancelled).max(1) as f64;
    let verdict = match stopped.as_ref().filter(|t| t.rule != "decided") {
        Some(t) => t.rule.clone(),
        // Met on the requests it served while shedding the rest is a miss.
        None if failed_share > ERRORS_STOP => "errors".into(),
        None => serde_json::to_value(standing.verdict)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
    };
    Searched {
        load: d.load,
        met: verdict == "met",
        undecided: (verdict == "not_enough_data").then(|| reasons.join("; ")),
        verdict,
        binding,
        stopped,
        requests: r.counts.requests,
        seconds: r.window.duration_s,
        output_tokens_per_s: r.throughput.output_tokens_per_s,
        dir: d
            .dir
            .as_ref()
            .and_then(|p| p.strip_prefix(dir).ok())
            .map(|p| p.display().to_string()),
        between: None,
    }
}

/// Writes `find.json` into `dir`.
pub fn write(dir: &std::path::Path, found: &Found) -> anyhow::Result<()> {
    crate::run_dir::write_json(dir, FIND_JSON, found)
}

/// The search in a few lines for the terminal.
pub fn summary(found: &Found) -> String {
    let unit = found.over.unit();
    let mut out = String::new();
    let head = match &found.bracket {
        None => "find: ended before its probe finished; no capacity".to_string(),
        Some(b) => match (b.capacity, b.at_least) {
            (None, _) if found.ended.is_some() || found.interrupted => {
                "find: no capacity: no load was measured to meet the SLO before the search ended".into()
            }
            (None, _) => format!(
                "find: no load met {} — not even {} {unit}",
                found.slo, b.high
            ),
            (Some(c), true) => format!(
                "find: capacity at least {c} {unit}: {} held at the probe's maximum throughput (the server's, unless the probe's concurrency limited it: a larger --auto-max-concurrency would tell)",
                found.slo
            ),
            (Some(c), false) => format!(
                "find: capacity {c} {unit} for {} (bracket {}–{}, {:.1} % wide; the top {})",
                found.slo,
                b.low,
                b.high,
                b.width * 100.0,
                match b.high_from.as_str() {
                    "measured" => "measured to miss",
                    _ => "the probe's maximum throughput",
                }
            ),
        },
    };
    out.push_str(&head);
    if found.interrupted {
        out.push_str(" (interrupted: the bracket is where the search stopped)");
    }
    if let Some(why) = &found.ended {
        out.push_str(&format!(" (the search ended early: {why})"));
    }
    out.push('\n');
    out.push_str(&format!(
        "  {} points and the probe: {} requests, {:.0} s",
        found.points.len(),
        thousands(found.requests),
        found.seconds
    ));
    if let (Some(g), Some(n)) = (&found.grid, found.requests_per_point) {
        out.push_str(&format!(
            "; a fixed grid of {:.0} % ({} points of ≥ {} requests) would send {}",
            found.precision * 100.0,
            g.points,
            thousands(n),
            thousands(g.requests)
        ));
    }
    out.push('\n');
    for p in &found.points {
        out.push_str(&format!(
            "  {:>10} {unit}: {:<16} {:>6} requests {:>6.1} s{}\n",
            p.load,
            p.verdict,
            p.requests,
            p.seconds,
            p.binding
                .as_ref()
                .map_or(String::new(), |b| format!("  ({b} binds)"))
        ));
    }
    out
}
