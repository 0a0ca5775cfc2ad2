//! Running a series' points: each load one run directory (`OUT/point-NN`,
//! or one kept from an earlier series with `--resume`), each run through
//! the pipeline, its stop rules added, its outcome kept for the analysis.
//! `sweep` walks them in order or climbs (`--auto`); `sweep --find` and
//! `tune` search them ([`crate::find`]).

use crate::cli::SweepArgs;
use crate::run::Site;
use crate::run_dir::{same_point, Done};
use crate::series::Level;
use crate::spec::workload::Load;
use crate::spec::RunSpec;
use crate::warnings::Warning;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};
use tokenscope_core::breaker::StopRule;
use tokenscope_core::results::RunResults;

/// The points run so far and how to run the next.
pub struct Points<'a> {
    pub args: &'a SweepArgs,
    /// The sweep's load, its files read once for every point.
    pub base: Load,
    pub dir: PathBuf,
    pub site: Site,
    /// With `--resume`: finished points found in the directory.
    pub previous: Vec<(PathBuf, RunResults)>,
    pub done: Vec<Done>,
    /// A sharded sweep: when run 0 starts, and the time from one run's
    /// start to the next's.
    pub sharded: Option<(SystemTime, Duration)>,
    /// Runs started so far.
    pub runs: u32,
    /// The load at which a point stopped on `--stop-on saturation`: the
    /// explicit series' points at or above it are skipped.
    pub saturated_at: Option<f64>,
    /// Rules every point stops on besides `--stop-on`'s (a search's
    /// [`StopRule::Decided`]).
    pub stop_rules: Vec<StopRule>,
    /// The server's kind as the last run detected it (for `--between-points`).
    pub kind: Option<String>,
    /// What `--between-points` did before the last point run, or why not.
    pub between: Option<Result<String, String>>,
    /// The loads not run, and why (at or above a saturated point).
    pub skipped: Vec<Skipped>,
}

/// A load of the series that was not run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Skipped {
    pub point: String,
    pub load: f64,
    pub why: String,
}

impl<'a> Points<'a> {
    /// No point run yet: the series' flags, its load read once, its
    /// directory and where it runs from.
    pub fn new(args: &'a SweepArgs, base: Load, dir: PathBuf, site: Site) -> Points<'a> {
        Points {
            args,
            base,
            dir,
            site,
            previous: Vec::new(),
            done: Vec::new(),
            sharded: None,
            runs: 0,
            saturated_at: None,
            stop_rules: Vec::new(),
            kind: None,
            between: None,
            skipped: Vec::new(),
        }
    }
}

impl Points<'_> {
    pub fn say(&self, line: &str) {
        if !self.args.bench.output.quiet {
            eprintln!("tokenscope sweep: {line}");
        }
    }

    /// Runs one point `--repeat` times (each run taken from a previous one
    /// with `--resume` where it can be); false when it was interrupted.
    pub async fn point(&mut self, level: Level) -> anyhow::Result<bool> {
        if let Some(at) = self.saturated_at.filter(|&at| level.load >= at) {
            let why =
                format!("at or above {at}, where the server's queue grew (--stop-on saturation)");
            self.say(&format!("{}: skipped, {why}", level.label));
            self.skipped.push(Skipped {
                point: level.label,
                load: level.load,
                why,
            });
            return Ok(true);
        }
        let level = match self.args.consistency {
            true => crate::series::same_prompts(level, self.base.flags.seed),
            false => level,
        };
        let k = self.args.repeat;
        for run in 1..=k {
            let label = if k > 1 {
                format!("{} (run {run} of {k})", level.label)
            } else {
                level.label.clone()
            };
            if !self.one_run(&level, label, None).await? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// One run of `level` in `OUT/NAME`, apart from the series' points (a
    /// search's probe); false when it was interrupted.
    pub async fn run_apart(&mut self, level: Level, name: &str) -> anyhow::Result<bool> {
        let dir = self.dir.join(name);
        let label = level.label.clone();
        self.one_run(&level, label, Some(dir)).await
    }

    /// One run of a point (in `into`, else the next free `point-NN`);
    /// false when it was interrupted.
    async fn one_run(
        &mut self,
        level: &Level,
        label: String,
        into: Option<PathBuf>,
    ) -> anyhow::Result<bool> {
        let mut point = self.args.bench.clone();
        let config = level.work.config_json(&level.work.plan(), &point.output);
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
            point.shard.start_at = Some(crate::cli::StartAt::at(at));
            self.say(&format!(
                "{label}: this shard's part, from {}",
                humantime::format_rfc3339_millis(at)
            ));
        } else {
            // Only a sharded sweep splits its points.
            point.shard = Default::default();
        }
        self.between().await;
        self.runs += 1;
        let dir = into.unwrap_or_else(|| self.free_dir());
        point.output.out = Some(dir.clone());
        // The sweep owns its point directories: a killed point's leftovers go.
        point.output.force = true;
        point.output.json = false;
        point.client.stop_on.extend(self.stop_rules.iter().cloned());
        let spec = RunSpec::with_load(point, level.work.clone())?;
        // The SLO's sample size is said once for the series.
        for w in spec.warnings() {
            if !matches!(w, Warning::SloSampleSize { .. }) {
                w.say(spec.output.quiet);
            }
        }
        let (results, _) = crate::self_check::then_run(&spec, &self.site).await?;
        self.kind = results.server.kind.clone().or(self.kind.take());
        // Interrupted, or its output could not be written: the series stops.
        let interrupted = results.partial || results.output_error.is_some();
        if results
            .stopped
            .as_ref()
            .is_some_and(|t| t.rule == "saturation")
        {
            self.say(&format!(
                "{label}: stopped on saturation; the loads above it are skipped"
            ));
            self.saturated_at = Some(self.saturated_at.map_or(level.load, |s| s.min(level.load)));
        }
        self.done.push(Done {
            label,
            load: level.load,
            results,
            dir: Some(dir),
        });
        Ok(!interrupted)
    }

    /// `--between-points` before every run but the first.
    async fn between(&mut self) {
        self.between = None;
        let Some(action) = self.args.between_points.as_ref().filter(|_| self.runs > 0) else {
            return;
        };
        let request = &self.args.bench.request;
        let done = match crate::run::target::target_headers(
            request.api_key_env.as_deref(),
            &request.headers,
        ) {
            Ok(headers) => {
                action
                    .apply(&self.site.url, self.kind.as_deref(), &headers)
                    .await
            }
            Err(e) => Err(format!("{e:#}")),
        };
        match &done {
            Ok(what) => self.say(&format!("between points: {what}")),
            Err(why) => self.say(&format!("warning: between points: {why}")),
        }
        self.between = Some(done);
    }

    /// The first `point-NN` directory not holding a finished point.
    fn free_dir(&self) -> PathBuf {
        (0..)
            .map(|i| self.dir.join(format!("point-{i:02}")))
            .find(|d| {
                !d.join(crate::run_dir::RESULTS).exists()
                    && !d.join(crate::run_dir::REQUESTS).exists()
            })
            .expect("an unused index")
    }
}
