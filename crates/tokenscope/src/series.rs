//! `tokenscope sweep`: a series of bench runs — given levels, or chosen by
//! `--auto` — one run directory each (`OUT/point-NN`), then the series'
//! analysis in `sweep.json` and on the terminal. `sim plan --sweep` ends in
//! the same [`finish_series`].

use crate::cli::{LoadArgs, OutputArgs, SeriesArgs};
use crate::exit::Exit;
use crate::run::finish::exit_code;
use crate::run_dir::Done;
use crate::spec::workload::Load;
use anyhow::Context;
use serde_json::json;
use std::path::Path;
use tokenscope_core::analysis::{self, Analysis, Point, PointSlo, SloCapacity};
use tokenscope_core::autoscale::{self, ScalePoint};
use tokenscope_core::results::RunResults;
use tokenscope_core::slo::{ObjectiveResult, Slo};
use tokenscope_core::stats::Distribution;

/// One point to run: its label, load and the load's flags and files.
pub struct Level {
    pub label: String,
    pub load: f64,
    pub work: Load,
}

/// `--auto` without `--requests` or `--duration`: the fewest requests a point.
pub const AUTO_MIN_REQUESTS: u64 = 32;

/// A closed-loop point. Without --duration it runs at least 2 × c requests:
/// with fewer, the loop never holds c in flight and the point measures less
/// load than its label says.
pub fn closed(base: &Load, c: u64) -> Level {
    let flags = &base.flags;
    let requests = match (flags.requests, flags.duration) {
        (_, Some(_)) => flags.requests,
        (n, None) => Some(n.unwrap_or(100).max(2 * c)),
    };
    Level {
        label: format!("concurrency {c}"),
        load: c as f64,
        work: base.with_flags(LoadArgs {
            concurrency: vec![c],
            rate: Vec::new(),
            requests,
            seed: point_seed(flags.seed, c as f64),
            ..flags.clone()
        }),
    }
}

/// A point's seed: `--seed` plus its load. Its synthetic prompts are then
/// its own: the same prompts at every point would be served from the
/// server's prefix cache after the first, and later points would read faster
/// than they are. (A dataset's prompt texts are the file's at every point.)
fn point_seed(seed: u64, load: f64) -> u64 {
    seed.wrapping_add(load.to_bits())
}

/// The level sending the series' own prompts (`--seed` unchanged) instead
/// of its own: `sweep --consistency` compares the answers to the same
/// prompts at every load (and accepts that later points may be served
/// from the prefix cache).
pub fn same_prompts(level: Level, seed: u64) -> Level {
    let flags = LoadArgs {
        seed,
        ..level.work.flags.clone()
    };
    Level {
        work: level.work.with_flags(flags),
        ..level
    }
}

/// An open-loop point at `r` requests/s.
pub fn open(base: &Load, r: f64) -> Level {
    let flags = &base.flags;
    Level {
        label: format!("rate {r}/s"),
        load: r,
        work: base.with_flags(LoadArgs {
            rate: vec![r],
            concurrency: Vec::new(),
            ramp_up: None,
            seed: point_seed(flags.seed, r),
            ..flags.clone()
        }),
    }
}

/// Analyses a finished series: sorts it by load, writes `sweep.json` (every
/// point's results and the analysis) and prints the table, the knee, the SLO
/// capacity and the recommendations (or with `--json` the document alone).
///
/// `beside`: what `sweep.json` holds beside its points and analysis — a
/// search's own document (`find`, as in `find.json`), the loads skipped
/// after a saturated point (`skipped`).
pub fn finish_series(
    dir: &Path,
    points: Vec<Done>,
    output: &OutputArgs,
    series: &SeriesArgs,
    beside: Beside,
) -> anyhow::Result<Exit> {
    finish_series_as(dir, points, output, series, beside, true)
}

/// Named documents kept in `sweep.json` beside the points.
pub type Beside = Vec<(&'static str, serde_json::Value)>;

/// [`finish_series`], with or without the table on stdout (a tune's
/// settings each write their series, and the tune prints its own table).
pub fn finish_series_as(
    dir: &Path,
    mut points: Vec<Done>,
    output: &OutputArgs,
    series: &SeriesArgs,
    beside: Beside,
    print: bool,
) -> anyhow::Result<Exit> {
    points.sort_by(|a, b| a.load.total_cmp(&b.load));
    let analysis = analyse(&points, output, series);
    let mut doc = json!({
        "points": points.iter().map(|d| json!({"point": d.label, "load": d.load, "results": d.results})).collect::<Vec<_>>(),
        "analysis": analysis,
    });
    for (name, value) in beside {
        doc[name] = value;
    }
    crate::run_dir::write_sweep(dir, &doc)?;
    write_autoscalers(dir, &analysis, output.quiet || output.json)?;
    crate::run_dir::write_html_after_run(dir, output.quiet || output.json);
    if output.json {
        crate::output::to_stdout(&(serde_json::to_string_pretty(&doc)? + "\n"));
    } else if print {
        let labelled: Vec<(String, RunResults)> = points
            .iter()
            .map(|d| (d.label.clone(), d.results.clone()))
            .collect();
        crate::output::to_stdout(&tokenscope_report::terminal::series(&labelled, &analysis));
        crate::output::to_stdout(&format!(
            "\nseries directory: {} (point-NN/, sweep.json)\n",
            dir.display()
        ));
    }
    crate::recording::record_sweep(dir, &points, &analysis, &output.history, output.json);
    Ok(series_exit(&points, analysis.slo.as_ref()))
}

/// `keda.yaml` and `hpa.yaml` beside `sweep.json`, when the series gives a
/// threshold on the server's running requests.
fn write_autoscalers(dir: &Path, analysis: &Analysis, quiet: bool) -> anyhow::Result<()> {
    let Some(s) = &analysis.scaling else {
        return Ok(());
    };
    let deployment = "my-llm";
    for (name, yaml) in [
        ("keda.yaml", autoscale::keda_yaml(s, deployment)),
        ("hpa.yaml", autoscale::hpa_yaml(s, deployment)),
    ] {
        let Some(yaml) = yaml else { continue };
        let path = dir.join(name);
        std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
        if !quiet {
            eprintln!(
                "tokenscope: autoscaler settings {} (set the deployment's name)",
                path.display()
            );
        }
    }
    Ok(())
}

/// The analysis of points sorted by load.
pub fn analyse(points: &[Done], output: &OutputArgs, series: &SeriesArgs) -> Analysis {
    let mut reduced: Vec<Point> = points
        .iter()
        .map(|d| Point::from_results(d.load, &d.results))
        .collect();
    let slo = output.slo.as_ref().map(|slo| {
        let judged: Vec<Vec<ObjectiveResult>> = points.iter().map(|d| judged(d, slo)).collect();
        for (p, objectives) in reduced.iter_mut().zip(&judged) {
            p.slo = Some(PointSlo::judge(objectives).0);
        }
        // Repeated runs of a load are judged together: all their objectives.
        let mut loads: Vec<f64> = Vec::new();
        let mut per_load: Vec<Vec<ObjectiveResult>> = Vec::new();
        for (d, objectives) in points.iter().zip(judged) {
            match loads.iter().position(|&l| l == d.load) {
                Some(i) => per_load[i].extend(objectives),
                None => {
                    loads.push(d.load);
                    per_load.push(objectives);
                }
            }
        }
        analysis::slo_capacity(&loads, &per_load, slo.describe(), series.target_load)
    });
    let mut a = analysis::analyse(analysis::combine_repeats(reduced), series.objectives, slo);
    a.answers = crate::answers::across(points);
    a.spec_decode = spec_across(points);
    a.scaling = a.slo.as_ref().and_then(|capacity| {
        let kind = points.iter().find_map(|d| d.results.server.kind.clone());
        let (scale, from) = scale_points(points);
        autoscale::threshold(&scale, capacity, series.headroom, kind.as_deref(), from)
    });
    a
}

/// Each point's speculative decoding as its server counted it
/// (`server.metrics.spec_decode`), judged across the loads.
fn spec_across(points: &[Done]) -> Option<tokenscope_core::spec_decode::SpecAcrossLoads> {
    let at = points.iter().filter_map(|d| {
        let s = &d.results.server.metrics.as_ref()?["spec_decode"];
        Some(tokenscope_core::spec_decode::SpecAtLoad {
            point: d.label.clone(),
            load: d.load,
            acceptance_rate: s["acceptance_rate"].as_f64()?,
            mean_accepted_length: s["mean_accepted_length"].as_f64(),
            draft_tokens: s["draft_tokens"].as_f64(),
        })
    });
    tokenscope_core::spec_decode::across(at.collect())
}

/// Scrapes of the server's gauges a point needs for their mean to stand
/// for the point (at a 1 s interval the first and last fall outside the
/// load). A plan's engine state has no scrapes: its clients' in-flight
/// count is exact on the virtual clock.
const GAUGE_SCRAPES: u64 = 10;

/// Each load as an autoscaler sees it: the requests in the server and the
/// request rate, repeated runs averaged; and where the count came from.
/// The server's own gauges (running + waiting) where every point had enough
/// scrapes, else the client's in-flight requests: every request in flight is
/// in the server, running or waiting, but for its time on the wire.
fn scale_points(points: &[Done]) -> (Vec<ScalePoint>, &'static str) {
    let gauges = |d: &Done| {
        let m = d.results.server.metrics.as_ref()?;
        let mean = |k: &str| m[k]["mean"].as_f64();
        let running = mean("running")?;
        let enough = m["scrapes"].as_u64().is_some_and(|n| n >= GAUGE_SCRAPES);
        enough.then(|| running + mean("waiting").unwrap_or(0.0))
    };
    let server = points.iter().all(|d| gauges(d).is_some());
    let from = match server {
        true => "the server's own gauges",
        false => "the client's in-flight requests: each is in the server, running or waiting, but for its time on the wire (the server's gauges were not sampled often enough at every point)",
    };
    let mut out: Vec<(ScalePoint, f64)> = Vec::new();
    for d in points {
        let p = ScalePoint {
            load: d.load,
            in_server: match server {
                true => gauges(d),
                false => Some(d.results.throughput.concurrency.mean),
            },
            requests_per_s: d.results.throughput.requests_per_s,
        };
        match out.iter_mut().find(|(q, _)| q.load == p.load) {
            Some((q, n)) => {
                *n += 1.0;
                q.requests_per_s += (p.requests_per_s - q.requests_per_s) / *n;
                q.in_server = q.in_server.zip(p.in_server).map(|(a, b)| a + (b - a) / *n);
            }
            None => out.push((p, 1.0)),
        }
    }
    out.sort_by(|a, b| a.0.load.total_cmp(&b.0.load));
    (out.into_iter().map(|(p, _)| p).collect(), from)
}

/// A point's objectives judged against `slo`: as the run judged them when
/// it ran with this SLO, else re-judged from its requests (a `--resume` or a
/// re-report may bring another SLO than the points were run with).
pub fn judged(d: &Done, slo: &Slo) -> Vec<ObjectiveResult> {
    let ran_with = serde_json::from_value::<Option<Slo>>(d.results.config["slo"].clone());
    if let (Ok(Some(ran)), Some(report)) = (ran_with, &d.results.slo) {
        if &ran == slo && report.objectives.iter().all(|o| o.verdict.is_some()) {
            return report.objectives.clone();
        }
    }
    let mut agg = tokenscope_core::metrics::Aggregator::new(Some(slo.clone()), None);
    let read = d
        .dir
        .as_ref()
        .and_then(|dir| crate::run_dir::for_each_record(dir, |r| agg.add(&r)).ok());
    match read {
        Some(_) => agg.finish().slo.map(|s| s.objectives).unwrap_or_default(),
        None => slo
            .objectives
            .iter()
            .map(|o| {
                let mut r = o.judge(&Distribution::new(), None);
                r.reason = Some("its requests.jsonl could not be read to judge it".into());
                r
            })
            .collect(),
    }
}

/// A series succeeds unless it was interrupted, every point failed, or the
/// `--target-load` gate did not hold. Points past the SLO are expected in a
/// sweep and are not failures by themselves.
fn series_exit(points: &[Done], slo: Option<&SloCapacity>) -> Exit {
    if points.iter().any(|d| d.results.output_error.is_some()) {
        return Exit::OutputFailed;
    }
    if points.iter().any(|d| d.results.partial) {
        return Exit::Interrupted;
    }
    let codes: Vec<Exit> = points.iter().map(|d| exit_code(&d.results)).collect();
    if !codes.is_empty()
        && codes
            .iter()
            .all(|c| matches!(c, Exit::Unreachable | Exit::AllFailed))
    {
        return codes[0];
    }
    match slo {
        Some(s) if s.target_load.is_some() && s.target_met.is_none() => return Exit::SloNotJudged,
        Some(s) if s.target_met == Some(false) => return Exit::SloNotMet,
        _ => {}
    }
    Exit::Success
}
