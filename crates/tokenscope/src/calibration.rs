//! Fitting the simulated engine to measured runs: the efficiency factors
//! (`tokenscope_sim::calibrate`) over the runs' replays, the speculation
//! the servers counted, and the doubts about the fit. `sim calibrate` and
//! `tune --plan-first` both calibrate through it.

use crate::engine::{plan_load, read_replay};
use crate::exit::Exit;
use crate::spec::workload::Load;
use crate::warnings::Warning;
use anyhow::Context;
use std::path::{Path, PathBuf};
use tokenscope_sim::calibrate::{CalibrationRun, Profile, Targets};
use tokenscope_sim::engine::cost::Efficiency;
use tokenscope_sim::engine::spec::SpecDecode;
use tokenscope_sim::engine::EngineConfig;
use tokenscope_sim::plan::PlanLoad;

/// Fewer measured requests than this in a calibration run draw a warning:
/// a llama.cpp run of 10 had two stalls as its p90 and the fit missed its
/// own p50 by 20 %.
const CALIBRATION_MIN_REQUESTS: u64 = 20;

/// A calibration: the profile, the engine it was fitted on (with the
/// speculation learned from the servers' counters), and that speculation.
pub struct Fit {
    pub cfg: EngineConfig,
    pub profile: Profile,
    pub learned: Option<(SpecDecode, f64)>,
}

/// Fits `cfg`'s efficiency factors to the runs in `dirs` (each replayed
/// on the virtual clock with `network_delay`); `who` says the warnings.
pub fn fit(
    mut cfg: EngineConfig,
    dirs: &[PathBuf],
    network_delay: std::time::Duration,
    who: &str,
) -> anyhow::Result<Fit> {
    // Speculation first: the TPOT fitted next is explained by it.
    let learned = learned_spec(&cfg, dirs)?;
    if let Some((spec, _)) = &learned {
        cfg.spec = Some(spec.clone());
    }
    let runs = replays(network_delay, dirs, who)?;
    let (efficiency, predicted, residual) =
        tokenscope_sim::calibrate::calibrate(&cfg, &runs).map_err(Exit::usage)?;
    let profile = Profile {
        model: cfg.model.name.clone(),
        gpu: cfg.gpu.name.clone(),
        tp: cfg.tp,
        efficiency,
        runs: dirs
            .iter()
            .zip(runs.iter().zip(&predicted))
            .map(|(dir, ((_, measured), predicted))| CalibrationRun {
                run_dir: dir.display().to_string(),
                measured: *measured,
                predicted: *predicted,
            })
            .collect(),
        residual,
        spec_decode: learned.as_ref().map(|(s, _)| s.text()),
    };
    Ok(Fit {
        cfg,
        profile,
        learned,
    })
}

/// `profile.json`, which `sim plan --profile` and `sim serve --profile` read.
pub fn write_profile(path: &Path, profile: &Profile) -> anyhow::Result<()> {
    std::fs::write(path, serde_json::to_string_pretty(profile)? + "\n")
        .with_context(|| format!("writing {}", path.display()))
}

/// The run directories to fit to: a sweep's directory stands for its
/// points, in order (a series at several loads is what separates the
/// per-step cost from the per-sequence one).
pub fn run_dirs(given: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut dirs = Vec::new();
    for dir in given {
        if dir.join(crate::run_dir::RESULTS).exists() || !crate::run_dir::holds_sweep(dir) {
            dirs.push(dir.clone());
            continue;
        }
        let mut points: Vec<PathBuf> = std::fs::read_dir(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .filter_map(|e| Some(e.ok()?.path()))
            .filter(|p| p.join(crate::run_dir::RESULTS).exists())
            .collect();
        if points.is_empty() {
            return Err(Exit::usage(format!(
                "{}: a sweep with no finished point",
                dir.display()
            )));
        }
        points.sort();
        dirs.extend(points);
    }
    Ok(dirs)
}

/// Each run directory as the load to replay on the simulator and what it
/// measured; a run of too few requests, or with failures, is warned of,
/// and one with no request served is refused.
fn replays(
    network_delay: std::time::Duration,
    dirs: &[PathBuf],
    who: &str,
) -> anyhow::Result<Vec<(PlanLoad, Targets)>> {
    // The load flags' defaults, as clap gives them to a command line without any.
    #[derive(clap::Parser)]
    struct Defaults {
        #[command(flatten)]
        load: crate::cli::LoadArgs,
    }
    let defaults = <Defaults as clap::Parser>::try_parse_from(["defaults"])
        .expect("the load flags parse with none given")
        .load;
    let mut runs = Vec::new();
    for dir in dirs {
        let replay = read_replay(dir, &defaults)?;
        judge_failures(dir, &replay.failures, who)?;
        let measured = replay
            .load
            .requests
            .unwrap_or((replay.trace.len() as u64).saturating_sub(replay.load.warmup));
        if measured < CALIBRATION_MIN_REQUESTS {
            Warning::CalibrationFewRequests {
                dir: dir.display().to_string(),
                measured,
                fewest: CALIBRATION_MIN_REQUESTS,
            }
            .say_as(who, false);
        }
        let load = PlanLoad {
            trace: Some(replay.trace),
            ..plan_load(&Load::read(replay.load, true)?, network_delay)
        };
        runs.push((load, replay.measured));
    }
    Ok(runs)
}

/// A run none of whose requests was served has no latency to fit to; one
/// with failures is replayed whole (the failed requests' lengths as if
/// served), so the fit is warned of.
fn judge_failures(dir: &Path, f: &crate::engine::Failures, who: &str) -> anyhow::Result<()> {
    let (failed, requests) = (f.failed, f.requests);
    let top = f.top.as_deref().unwrap_or("no message");
    if requests > 0 && failed >= requests {
        return Err(Exit::usage(format!(
            "{}: none of its {requests} requests succeeded (most often: {top}); there is no latency to fit to",
            dir.display()
        )));
    }
    if failed > 0 {
        Warning::CalibrationFailedRequests {
            dir: dir.display().to_string(),
            failed,
            requests,
            top: top.to_string(),
        }
        .say_as(who, false);
    }
    Ok(())
}

/// Factors fitted to a bound of their range: the run contradicts the
/// model. Says so, and returns why (`None`: the fit is within the model).
pub fn warn_if_pinned(cfg: &EngineConfig, efficiency: &Efficiency, who: &str) -> Option<String> {
    let pinned = tokenscope_sim::calibrate::at_bounds(efficiency);
    for p in &pinned {
        Warning::CalibrationFit { why: p.to_string() }.say_as(who, false);
    }
    if pinned.is_empty() {
        return None;
    }
    let why = format!(
        "the fit reached the model's limits ({}): this run contradicts the engine model for {} on {} (a CPU server, another GPU, or costs the model lacks); predictions from this profile are not to be trusted",
        pinned.join("; "),
        cfg.model.name,
        cfg.gpu.name
    );
    Warning::CalibrationFit { why: why.clone() }.say_as(who, false);
    Some(why)
}

/// Speculative decoding as the runs' servers counted it
/// (`server.metrics.spec_decode` of each results.json), weighted by their
/// drafts; the proposer is `--spec-decode`'s, else an EAGLE head. `None`
/// when no run's server speculated.
fn learned_spec(
    cfg: &tokenscope_sim::engine::EngineConfig,
    dirs: &[std::path::PathBuf],
) -> anyhow::Result<Option<(tokenscope_sim::engine::spec::SpecDecode, f64)>> {
    let (mut drafts, mut drafted, mut accepted) = (0.0, 0.0, 0.0);
    let mut by_position: Vec<f64> = Vec::new();
    for dir in dirs {
        let path = dir.join(crate::run_dir::RESULTS);
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let r: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Exit::usage(format!("{}: {e}", path.display())))?;
        let s = &r["server"]["metrics"]["spec_decode"];
        let (Some(n), Some(d), Some(a)) = (
            s["drafts"].as_f64(),
            s["draft_tokens"].as_f64(),
            s["accepted_tokens"].as_f64(),
        ) else {
            continue;
        };
        let rates: Vec<f64> = s["acceptance_by_position"]
            .as_array()
            .map(|v| v.iter().filter_map(|x| x.as_f64()).collect())
            .unwrap_or_default();
        if by_position.len() < rates.len() {
            by_position.resize(rates.len(), 0.0);
        }
        for (sum, r) in by_position.iter_mut().zip(&rates) {
            *sum += r * n;
        }
        (drafts, drafted, accepted) = (drafts + n, drafted + d, accepted + a);
    }
    if drafts <= 0.0 || drafted <= 0.0 {
        return Ok(None);
    }
    by_position.iter_mut().for_each(|r| *r /= drafts);
    use tokenscope_sim::engine::spec::{Method, SpecDecode};
    let method = cfg
        .spec
        .as_ref()
        .map_or(Method::Eagle, |s| s.method.clone());
    let length = 1.0 + accepted / drafts;
    let spec = SpecDecode::learned(method, &by_position, accepted / drafted, Some(length))
        .map_err(|e| Exit::usage(format!("the servers' speculative decoding: {e}")))?;
    Ok(Some((spec, drafts)))
}
