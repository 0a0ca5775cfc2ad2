//! `tokenscope sweep`: a series of runs — given levels, or chosen by
//! `--auto` — one run directory each (`OUT/point-NN`), every point through
//! the run pipeline, then the series' analysis in `sweep.json` and on the
//! terminal ([`crate::series::finish_series`]).

use crate::cli::SweepArgs;
use crate::exit::Exit;
use crate::points::Points;
use crate::run::builtin::with_runtime;
use crate::run_dir::finished_points;
use crate::series::{closed, finish_series, open, Level, AUTO_MIN_REQUESTS};
use crate::spec::workload::Load;
use std::time::{Duration, SystemTime};
use tokenscope_core::analysis::{self, Point};

pub fn run(mut args: SweepArgs) -> anyhow::Result<Exit> {
    crate::spec::records::refuse_forever(args.bench.load.duration, "a sweep's points each end")?;
    let sharded = sharded_schedule(&args)?;
    if args.consistency {
        match args.bench.request.temperature {
            Some(t) if t != 0.0 => {
                return Err(Exit::usage(format!(
                    "--consistency compares answers at temperature 0; --temperature {t} would make them differ by sampling"
                )))
            }
            _ => args.bench.request.temperature = Some(0.0),
        }
    }
    crate::spec::pricing::price_builtin(&mut args.bench);
    let base = Load::read(args.bench.load.clone(), args.bench.output.quiet)?;
    let flags = &base.flags;
    let explicit: Vec<Level> = if args.auto || args.find.is_some() {
        Vec::new()
    } else if !flags.concurrency.is_empty() {
        flags
            .concurrency
            .iter()
            .map(|&c| closed(&base, c))
            .collect()
    } else if !flags.rate.is_empty() {
        flags.rate.iter().map(|&r| open(&base, r)).collect()
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
        .unwrap_or_else(crate::run_dir::default_out_dir);
    if let (Some(slo), false) = (&args.bench.output.slo, args.bench.output.quiet) {
        let fewest = explicit.iter().filter_map(|l| l.work.flags.requests).min();
        if let Some(w) = fewest.and_then(|n| crate::warnings::slo_sample_size(slo, n)) {
            w.say_as("tokenscope sweep", false);
        }
    }
    let previous = if args.resume {
        finished_points(&dir)?
    } else {
        crate::run_dir::claim_out_dir(&dir, args.bench.output.force)?;
        Vec::new()
    };
    let setup = args.bench.clone();
    with_runtime(
        &setup.target,
        setup.builtin,
        &setup.client,
        |site| async move {
            let mut series = Points::new(&args, base, dir.clone(), site);
            series.previous = previous;
            series.sharded = sharded;
            if let Some(over) = args.find {
                let slo = args
                    .bench
                    .output
                    .slo
                    .as_ref()
                    .expect("--find requires --slo");
                let found = crate::find::search(&mut series, over, slo, &mut || None).await?;
                crate::find::write(&dir, &found)?;
                let exit = finish_series(
                    &dir,
                    series.done,
                    &args.bench.output,
                    &args.series,
                    vec![("find", serde_json::to_value(&found)?)],
                )?;
                if !args.bench.output.json {
                    crate::output::to_stdout(&crate::find::summary(&found));
                }
                return Ok(exit);
            }
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
            let beside = match series.skipped.is_empty() {
                true => Vec::new(),
                false => vec![("skipped", serde_json::to_value(&series.skipped)?)],
            };
            finish_series(&dir, series.done, &args.bench.output, &args.series, beside)
        },
    )
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
    } else if args.find.is_some() {
        Some("--find chooses each point from the last one's verdict, which differs between shards, and stops points early: give the series (--rate 1,2,4)")
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

impl Points<'_> {
    /// `--auto`: baseline, maximum-throughput probe, then powers of two
    /// between them until the server is past saturation.
    async fn auto(&mut self) -> anyhow::Result<bool> {
        let base = self.base.clone();
        let max = self.args.auto_max_concurrency;
        // Unless told how much to run, a point is two rounds of its
        // concurrency and at least AUTO_MIN_REQUESTS: the 100 a point of an
        // explicit series gets would spend most of the sweep at concurrency 1.
        let sized = base.flags.requests.is_none() && base.flags.duration.is_none();
        let slo_min = self.say_slo_sample(sized);
        let point_at = |c: u64| {
            let mut level = closed(&base, c);
            if sized {
                level.work.flags.requests = Some((2 * c).max(AUTO_MIN_REQUESTS).max(slo_min));
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
        let top = self.auto_top(max);
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

    /// With `--slo`, the requests a point needs for its percentiles to be
    /// judged (0 without), said before the sweep: each point runs that many
    /// when the sweep sizes them (`sized`), else a warning or a note on
    /// what `--requests` or `--duration` leaves.
    fn say_slo_sample(&self, sized: bool) -> u64 {
        let flags = &self.base.flags;
        let slo = self.args.bench.output.slo.as_ref();
        let Some((n, key)) = slo.and_then(|s| s.requests_needed()) else {
            return 0;
        };
        if sized {
            self.say(&format!(
                "auto: --slo {key} is judged on ≥ {n} requests: each point runs at least that many"
            ));
        } else if let Some(w) = slo.and_then(|s| {
            flags
                .requests
                .and_then(|r| crate::warnings::slo_sample_size(s, r))
        }) {
            self.say(&format!("warning: {}", w.message()));
        } else if flags.duration.is_some() {
            self.say(&format!("note: --slo needs ≈ {n} requests a point to be judged on its own; --duration decides how many are sent"));
        }
        n
    }

    /// The highest concurrency the climb may reach, from the baseline and
    /// the probe (the first two points): by Little's law, the concurrency
    /// that would carry the probe's request rate at the baseline's latency.
    /// Saturation comes near it; four times past it the server is surely
    /// saturated.
    fn auto_top(&self, max: u64) -> u64 {
        let (baseline, probe) = (&self.done[0].results, &self.done[1].results);
        let e2e_s = baseline.latency.e2e_ms.map_or(1.0, |s| s.mean / 1e3);
        let little = probe.throughput.requests_per_s * e2e_s;
        let top = ((4.0 * little).ceil() as u64).clamp(2, max);
        self.say(&format!(
            "auto: the probe carried {:.1} requests/s; at the baseline's {:.2} s per request that needs concurrency ≈ {little:.0}: points 2 … {top} (×2), stopping past saturation",
            probe.throughput.requests_per_s, e2e_s
        ));
        top
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
