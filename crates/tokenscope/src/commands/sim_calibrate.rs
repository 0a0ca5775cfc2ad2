//! `tokenscope sim calibrate RUN_DIR`: fits the engine's efficiency
//! factors to a measured run and writes a profile that `sim plan --profile`
//! and `sim serve --profile` read.

use crate::cli::CalibrateArgs;
use crate::engine::engine_config;
use crate::engine::{plan_load, read_replay};
use crate::exit::Exit;
use crate::spec::workload::Load;
use crate::warnings::Warning;
use anyhow::Context;
use tokenscope_sim::calibrate::CalibrationRun;
use tokenscope_sim::calibrate::Profile;
use tokenscope_sim::plan::PlanLoad;

/// Who says its warnings.
const WHO: &str = "tokenscope sim calibrate";

/// Fewer measured requests than this in a calibration run draw a warning:
/// a llama.cpp run of 10 had two stalls as its p90 and the fit missed its
/// own p50 by 20 %.
const CALIBRATION_MIN_REQUESTS: u64 = 20;

/// Fits the efficiency factors and writes the profile.
pub fn run(args: CalibrateArgs) -> anyhow::Result<Exit> {
    let cfg = engine_config(&args.engine)?;
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
    for dir in &args.run_dirs {
        let replay = read_replay(dir, &defaults)?;
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
            .say_as(WHO, false);
        }
        let load = PlanLoad {
            trace: Some(replay.trace),
            ..plan_load(&Load::read(replay.load, true)?, args.network_delay)
        };
        runs.push((load, replay.measured));
    }
    let (efficiency, predicted, residual) =
        tokenscope_sim::calibrate::calibrate(&cfg, &runs).map_err(Exit::usage)?;
    let profile = Profile {
        model: cfg.model.name.clone(),
        gpu: cfg.gpu.name.clone(),
        tp: cfg.tp,
        efficiency,
        runs: args
            .run_dirs
            .iter()
            .zip(runs.iter().zip(&predicted))
            .map(|(dir, ((_, measured), predicted))| CalibrationRun {
                run_dir: dir.display().to_string(),
                measured: *measured,
                predicted: *predicted,
            })
            .collect(),
        residual,
    };
    let path = args
        .out
        .clone()
        .unwrap_or_else(|| args.run_dirs[0].join("profile.json"));
    std::fs::write(&path, serde_json::to_string_pretty(&profile)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    crate::outln!(
        "calibrated {} on {} × {}",
        cfg.model.name,
        cfg.tp,
        cfg.gpu.name
    );
    for run in &profile.runs {
        let (m, p) = (&run.measured, &run.predicted);
        crate::outln!("{}\n                 measured   predicted", run.run_dir);
        for (name, a, b) in [
            ("TTFT p50 (ms)", m.ttft_p50_ms, p.ttft_p50_ms),
            ("TTFT p90 (ms)", m.ttft_p90_ms, p.ttft_p90_ms),
            ("TPOT p50 (ms)", m.tpot_p50_ms, p.tpot_p50_ms),
            ("E2E p50 (ms)", m.e2e_p50_ms, p.e2e_p50_ms),
        ] {
            crate::outln!(
                "  {name:<14} {a:>9.2} {b:>11.2}   ({:+.1} %)",
                (b - a) / a.max(1e-9) * 100.0
            );
        }
    }
    crate::outln!(
        "fitted: compute efficiency {:.3}, memory efficiency {:.3}, step overhead {:.2} ms, per sequence {:.3} ms (each layer's kernels {:.0} µs a step, not fitted)",
        efficiency.compute,
        efficiency.memory,
        efficiency.step_overhead_s * 1e3,
        efficiency.per_sequence_s * 1e3,
        efficiency.per_layer_s * 1e6
    );
    crate::outln!("profile: {}", path.display());
    let pinned = tokenscope_sim::calibrate::at_bounds(&efficiency);
    for p in &pinned {
        Warning::CalibrationFit { why: p.to_string() }.say_as(WHO, false);
    }
    if !pinned.is_empty() {
        let why = format!(
            "the fit reached the model's limits: this run contradicts the engine model for {} on {} (a CPU server, another GPU, or costs the model lacks); predictions from this profile are not to be trusted",
            cfg.model.name, cfg.gpu.name
        );
        Warning::CalibrationFit { why }.say_as(WHO, false);
    }
    Ok(Exit::Success)
}
