//! `tokenscope sweep`: a series of bench runs — given levels, or chosen by
//! `--auto` — one run directory each (`OUT/point-NN`), then the series'
//! analysis in `sweep.json` and on the terminal. `sim plan --sweep` ends in
//! the same [`finish_series`].

use crate::bench::{bench, with_runtime};
use crate::cli::{LoadArgs, OutputArgs, SeriesArgs, SweepArgs};
use crate::exit::Exit;
use crate::outcome::{self, exit_code};
use anyhow::Context;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use tokenscope_core::analysis::{self, Analysis, Point, PointSlo, SloCapacity};
use tokenscope_core::autoscale::{self, ScalePoint};
use tokenscope_core::results::RunResults;
use tokenscope_core::slo::{ObjectiveResult, Slo};
use tokenscope_core::stats::Distribution;

/// One finished point of a series.
pub struct Done {
    pub label: String,
    /// Concurrency or requests/s.
    pub load: f64,
    pub results: RunResults,
    /// Its run directory, where the requests can be re-judged.
    pub dir: Option<PathBuf>,
}

/// One point to run: its label, load and flags.
pub struct Level {
    pub label: String,
    pub load: f64,
    pub args: LoadArgs,
}

/// `--auto` without `--requests` or `--duration`: the fewest requests a point.
pub const AUTO_MIN_REQUESTS: u64 = 32;

/// A closed-loop point. Without --duration it runs at least 2 × c requests:
/// with fewer, the loop never holds c in flight and the point measures less
/// load than its label says.
pub fn closed(base: &LoadArgs, c: u64) -> Level {
    let requests = match (base.requests, base.duration) {
        (_, Some(_)) => base.requests,
        (n, None) => Some(n.unwrap_or(100).max(2 * c)),
    };
    Level {
        label: format!("concurrency {c}"),
        load: c as f64,
        args: LoadArgs {
            concurrency: vec![c],
            rate: Vec::new(),
            requests,
            seed: point_seed(base.seed, c as f64),
            ..base.clone()
        },
    }
}

/// A point's seed: `--seed` plus its load. Its synthetic prompts are then
/// its own: the same prompts at every point would be served from the
/// server's prefix cache after the first, and later points would read faster
/// than they are. (A dataset's prompt texts are the file's at every point.)
fn point_seed(seed: u64, load: f64) -> u64 {
    seed.wrapping_add(load.to_bits())
}

/// An open-loop point at `r` requests/s.
pub fn open(base: &LoadArgs, r: f64) -> Level {
    Level {
        label: format!("rate {r}/s"),
        load: r,
        args: LoadArgs {
            rate: vec![r],
            concurrency: Vec::new(),
            ramp_up: None,
            seed: point_seed(base.seed, r),
            ..base.clone()
        },
    }
}

pub fn run(mut args: SweepArgs) -> anyhow::Result<Exit> {
    let sharded = sharded_schedule(&args)?;
    crate::bench::price_builtin(&mut args.bench);
    outcome::load_workload_files(&mut args.bench.load, args.bench.output.quiet)?;
    let load = &args.bench.load;
    let explicit: Vec<Level> = if args.auto {
        Vec::new()
    } else if !load.concurrency.is_empty() {
        load.concurrency.iter().map(|&c| closed(load, c)).collect()
    } else if !load.rate.is_empty() {
        load.rate.iter().map(|&r| open(load, r)).collect()
    } else {
        return Err(Exit::usage(
            "sweep needs a series: --auto, --concurrency 1,2,4,8 or --rate 1,2,4".into(),
        ));
    };
    let dir = args
        .bench
        .output
        .out
        .clone()
        .unwrap_or_else(outcome::default_out_dir);
    if let (Some(slo), false) = (&args.bench.output.slo, args.bench.output.quiet) {
        let fewest = explicit.iter().filter_map(|l| l.args.requests).min();
        if let Some(w) = fewest.and_then(|n| slo.sample_warning(n)) {
            eprintln!("tokenscope sweep: warning: {w}");
        }
    }
    let previous = if args.resume {
        finished_points(&dir)?
    } else {
        outcome::claim_out_dir(&dir, args.bench.output.force)?;
        Vec::new()
    };
    let setup = args.bench.clone();
    with_runtime(&setup, |url, builtin, threads| async move {
        let mut series = Series {
            args: &args,
            dir: dir.clone(),
            url,
            builtin,
            threads,
            previous,
            done: Vec::new(),
            sharded,
            runs: 0,
        };
        if args.auto {
            series.auto().await?;
        } else {
            let total = explicit.len();
            for (i, level) in explicit.into_iter().enumerate() {
                series.say(&format!("point {} of {total}: {}", i + 1, level.label));
                if !series.point(level).await? {
                    break; // interrupted: the series so far is still reported
                }
            }
        }
        finish_series(&dir, series.done, &args.bench.output, &args.series)
    })
}

/// A sharded sweep's schedule (the first run's start, and the time from one
/// run's start to the next), when `--shard`/`--shards` are given; the
/// conditions under which every shard can keep it, else why not.
fn sharded_schedule(args: &SweepArgs) -> anyhow::Result<Option<(SystemTime, Duration)>> {
    let flags = &args.bench.shard;
    if flags.shard.is_none() && flags.shards.is_none() {
        return match flags.start_at {
            Some(_) => Err(Exit::usage(
                "--start-at in a sweep schedules the points of a sharded sweep: give --shard I/N or --shards N too".into(),
            )),
            None => Ok(None),
        };
    }
    let why = if args.auto {
        Some("--auto chooses each point from the last one's figures, which differ between shards: give the series (--concurrency 1,4,16 or --rate 1,2,4)")
    } else if args.resume {
        Some("--resume cannot keep a shared schedule")
    } else if flags.start_at.is_none() {
        Some("every shard must start each point at the same instant: give --start-at")
    } else if args.bench.load.duration.is_none() {
        Some("each point must end at a known time for the next to start together: give --duration")
    } else {
        None
    };
    if let Some(why) = why {
        return Err(Exit::usage(format!("a sharded sweep: {why}")));
    }
    let start = flags.start_at.as_ref().expect("checked").at;
    let every = args.bench.load.duration.expect("checked") + args.point_gap;
    Ok(Some((start, every)))
}

/// The points run so far and how to run the next.
struct Series<'a> {
    args: &'a SweepArgs,
    dir: PathBuf,
    url: String,
    builtin: Option<String>,
    threads: usize,
    /// With `--resume`: finished points found in the directory.
    previous: Vec<(PathBuf, RunResults)>,
    done: Vec<Done>,
    /// A sharded sweep: when run 0 starts, and the time from one run's
    /// start to the next's.
    sharded: Option<(SystemTime, Duration)>,
    /// Runs started so far.
    runs: u32,
}

impl Series<'_> {
    fn say(&self, line: &str) {
        if !self.args.bench.output.quiet {
            eprintln!("tokenscope sweep: {line}");
        }
    }

    /// Runs one point `--repeat` times (each run taken from a previous one
    /// with `--resume` where it can be); false when it was interrupted.
    async fn point(&mut self, level: Level) -> anyhow::Result<bool> {
        let k = self.args.repeat;
        for run in 1..=k {
            let label = if k > 1 {
                format!("{} (run {run} of {k})", level.label)
            } else {
                level.label.clone()
            };
            if !self.one_run(&level, label).await? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// One run of a point; false when it was interrupted.
    async fn one_run(&mut self, level: &Level, label: String) -> anyhow::Result<bool> {
        let mut point = self.args.bench.clone();
        point.load = level.args.clone();
        let config = outcome::config_json(&point.load, &outcome::plan(&point.load), &point.output);
        if let Some(i) = self
            .previous
            .iter()
            .position(|(_, r)| same_point(&r.config, &config))
        {
            let (from, results) = self.previous.swap_remove(i);
            self.say(&format!("{label}: kept from {}", from.display()));
            self.done.push(Done {
                label,
                load: level.load,
                results,
                dir: Some(from),
            });
            return Ok(true);
        }
        if let Some((start, every)) = self.sharded {
            // Every shard runs the same series: run k starts at the same instant on all.
            let at = start + every * self.runs;
            point.shard.start_at = Some(crate::shard::StartAt::at(at));
            self.say(&format!(
                "{label}: this shard's part, from {}",
                humantime::format_rfc3339_millis(at)
            ));
            crate::bench::take_shard(&mut point)?;
        }
        self.runs += 1;
        let dir = self.free_dir();
        point.output.out = Some(dir.clone());
        // The sweep owns its point directories: a killed point's leftovers go.
        point.output.force = true;
        point.output.json = false;
        let (results, _) =
            bench(point, self.url.clone(), self.builtin.clone(), self.threads).await?;
        // Interrupted, or its output could not be written: the series stops.
        let interrupted = results.partial || results.output_error.is_some();
        self.done.push(Done {
            label,
            load: level.load,
            results,
            dir: Some(dir),
        });
        Ok(!interrupted)
    }

    /// The first `point-NN` directory not holding a finished point.
    fn free_dir(&self) -> PathBuf {
        (0..)
            .map(|i| self.dir.join(format!("point-{i:02}")))
            .find(|d| !d.join("results.json").exists() && !d.join("requests.jsonl").exists())
            .expect("an unused index")
    }

    /// `--auto`: baseline, maximum-throughput probe, then powers of two
    /// between them until the server is past saturation.
    async fn auto(&mut self) -> anyhow::Result<bool> {
        let base = self.args.bench.load.clone();
        let max = self.args.auto_max_concurrency;
        // Unless told how much to run, a point is two rounds of its
        // concurrency and at least AUTO_MIN_REQUESTS: the 100 a point of an
        // explicit series gets would spend most of the sweep at concurrency 1.
        let sized = base.requests.is_none() && base.duration.is_none();
        // With --slo, enough requests that its percentiles can be judged.
        let slo_needs = self
            .args
            .bench
            .output
            .slo
            .as_ref()
            .and_then(|s| s.requests_needed());
        match (&slo_needs, sized) {
            (Some((n, key)), true) => self.say(&format!(
                "auto: --slo {key} is judged on ≥ {n} requests: each point runs at least that many"
            )),
            (Some((n, _)), false) => {
                if let Some(w) = self
                    .args
                    .bench
                    .output
                    .slo
                    .as_ref()
                    .and_then(|s| base.requests.and_then(|r| s.sample_warning(r)))
                {
                    self.say(&format!("warning: {w}"));
                } else if base.duration.is_some() {
                    self.say(&format!("note: --slo needs ≈ {n} requests a point to be judged on its own; --duration decides how many are sent"));
                }
            }
            _ => {}
        }
        let slo_min = slo_needs.map_or(0, |(n, _)| n);
        let point_at = |c: u64| {
            let mut level = closed(&base, c);
            if sized {
                level.args.requests = Some((2 * c).max(AUTO_MIN_REQUESTS).max(slo_min));
            }
            level
        };
        self.say("auto: baseline at concurrency 1");
        if !self.point(point_at(1)).await? {
            return Ok(false);
        }
        self.say(&format!(
            "auto: maximum-throughput probe at concurrency {max}"
        ));
        if !self.point(point_at(max)).await? {
            return Ok(false);
        }
        let (baseline, probe) = (&self.done[0].results, &self.done[1].results);
        // Little's law: the concurrency that would carry the probe's request
        // rate at the baseline's latency. Saturation comes near it; four
        // times past it the server is surely saturated.
        let e2e_s = baseline.latency.e2e_ms.map_or(1.0, |s| s.mean / 1e3);
        let little = probe.throughput.requests_per_s * e2e_s;
        let top = ((4.0 * little).ceil() as u64).clamp(2, max);
        self.say(&format!(
            "auto: the probe carried {:.1} requests/s; at the baseline's {:.2} s per request that needs concurrency ≈ {little:.0}: points 2 … {top} (×2), stopping past saturation",
            probe.throughput.requests_per_s, e2e_s
        ));
        let mut c = 2;
        while c < max && c <= top {
            self.say(&format!("auto: point at concurrency {c}"));
            if !self.point(point_at(c)).await? {
                return Ok(false);
            }
            if let Some(why) = self.past_saturation() {
                self.say(&format!("auto: stopping after concurrency {c}: {why}"));
                return Ok(true);
            }
            c *= 2;
        }
        if c > 2 && c / 2 < max {
            let next = if c >= max {
                "the next is the probe's".to_string()
            } else {
                format!(
                    "the next would pass {top}, four times the concurrency the probe's rate needs"
                )
            };
            self.say(&format!(
                "auto: stopping after concurrency {}: {next}",
                c / 2
            ));
        }
        Ok(true)
    }

    /// Whether the last point run (ascending, probe left out) is past
    /// saturation: its tokens/s gained < 5 % over the previous point while
    /// TTFT p99 rose, or the server's queue grew through it.
    fn past_saturation(&self) -> Option<String> {
        let probe_load = self.args.auto_max_concurrency as f64;
        let climb: Vec<Point> = analysis::combine_repeats(
            self.done
                .iter()
                .filter(|d| d.load != probe_load)
                .map(|d| Point::from_results(d.load, &d.results))
                .collect(),
        );
        let last = self.done.last()?;
        if last.results.diagnosis.iter().any(|f| f.rule == "overload") {
            return Some("the server's waiting requests grew through the point".into());
        }
        match analysis::saturation(&climb, 0.05) {
            Some(i) if i == climb.len() - 1 => Some(format!(
                "tokens/s {:.0} → {:.0} (< 5 % more) while TTFT p99 rose {:.0} → {:.0} ms",
                climb[i - 1].output_tps,
                climb[i].output_tps,
                climb[i - 1].ttft_p99_ms,
                climb[i].ttft_p99_ms
            )),
            _ => None,
        }
    }
}

/// The finished (not partial) points under `dir`, for `--resume`.
fn finished_points(dir: &Path) -> anyhow::Result<Vec<(PathBuf, RunResults)>> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(found); // nothing to resume yet
    };
    for entry in entries {
        let path = entry?.path().join("results.json");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let results: RunResults = serde_json::from_str(&text)
            .with_context(|| format!("--resume: reading {}", path.display()))?;
        if !results.partial {
            found.push((
                path.parent().expect("a file in a directory").into(),
                results,
            ));
        }
    }
    Ok(found)
}

/// Whether a finished point's `config` describes the same load and workload.
fn same_point(old: &serde_json::Value, new: &serde_json::Value) -> bool {
    [
        "load",
        "requests",
        "duration_s",
        "warmup",
        "ramp_up_s",
        "input_tokens",
        "output_tokens",
        "shared_prefix",
        "seed",
    ]
    .iter()
    .all(|k| old[k] == new[k])
}

/// The points of a series directory, for re-reporting (`tokenscope report`).
pub fn read_series(dir: &Path) -> anyhow::Result<Vec<Done>> {
    let mut done: Vec<Done> = finished_points(dir)?
        .into_iter()
        .filter_map(|(dir, results)| {
            let load = &results.config["load"];
            let (label, level) = match load["mode"].as_str()? {
                "closed" => {
                    let c = load["concurrency"].as_f64()?;
                    (format!("concurrency {c}"), c)
                }
                _ => {
                    let r = load["rate"].as_f64()?;
                    (format!("rate {r}/s"), r)
                }
            };
            Some(Done {
                label,
                load: level,
                results,
                dir: Some(dir),
            })
        })
        .collect();
    done.sort_by(|a, b| a.load.total_cmp(&b.load));
    Ok(done)
}

/// Analyses a finished series: sorts it by load, writes `sweep.json` (every
/// point's results and the analysis) and prints the table, the knee, the SLO
/// capacity and the recommendations (or with `--json` the document alone).
pub fn finish_series(
    dir: &Path,
    mut points: Vec<Done>,
    output: &OutputArgs,
    series: &SeriesArgs,
) -> anyhow::Result<Exit> {
    points.sort_by(|a, b| a.load.total_cmp(&b.load));
    let analysis = analyse(&points, output, series);
    let doc = json!({
        "points": points.iter().map(|d| json!({"point": d.label, "load": d.load, "results": d.results})).collect::<Vec<_>>(),
        "analysis": analysis,
    });
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(
        dir.join("sweep.json"),
        serde_json::to_string_pretty(&doc)? + "\n",
    )
    .with_context(|| format!("writing {}", dir.join("sweep.json").display()))?;
    write_autoscalers(dir, &analysis, output.quiet || output.json)?;
    crate::report::write_html_after_run(dir, output.quiet || output.json);
    if output.json {
        outcome::to_stdout(&(serde_json::to_string_pretty(&doc)? + "\n"));
    } else {
        let labelled: Vec<(String, RunResults)> = points
            .iter()
            .map(|d| (d.label.clone(), d.results.clone()))
            .collect();
        outcome::to_stdout(&tokenscope_report::terminal::series_table(&labelled));
        outcome::to_stdout(&tokenscope_report::terminal::analysis(&analysis));
        outcome::to_stdout(&format!(
            "\nseries directory: {} (point-NN/, sweep.json)\n",
            dir.display()
        ));
    }
    crate::history::record_sweep(dir, &points, &analysis, &output.history, output.json);
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
    a.scaling = a.slo.as_ref().and_then(|capacity| {
        let kind = points.iter().find_map(|d| d.results.server.kind.clone());
        let (scale, from) = scale_points(points);
        autoscale::threshold(&scale, capacity, series.headroom, kind.as_deref(), from)
    });
    a
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
fn judged(d: &Done, slo: &Slo) -> Vec<ObjectiveResult> {
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
        .and_then(|dir| tokenscope_report::run_dir::for_each_record(dir, |r| agg.add(&r)).ok());
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
