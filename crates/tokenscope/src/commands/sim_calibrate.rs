//! `tokenscope sim calibrate RUN_DIR`: fits the engine's efficiency
//! factors to a measured run ([`crate::calibration`]) and writes a profile
//! that `sim plan --profile` and `sim serve --profile` read.

use crate::calibration::{fit, run_dirs, warn_if_pinned, write_profile};
use crate::cli::CalibrateArgs;
use crate::engine::engine_config;
use crate::exit::Exit;
use tokenscope_sim::calibrate::Profile;
use tokenscope_sim::engine::spec::SpecDecode;
use tokenscope_sim::engine::EngineConfig;

/// Who says its warnings.
const WHO: &str = "tokenscope sim calibrate";

/// Fits the efficiency factors and writes the profile.
pub fn run(args: CalibrateArgs) -> anyhow::Result<Exit> {
    let cfg = engine_config(&args.engine)?;
    let dirs = run_dirs(&args.run_dirs)?;
    let fit = fit(cfg, &dirs, args.network_delay, WHO)?;
    let path = args
        .out
        .clone()
        .unwrap_or_else(|| args.run_dirs[0].join("profile.json"));
    write_profile(&path, &fit.profile)?;
    report(&fit.cfg, &fit.profile, &fit.learned);
    crate::outln!("profile: {}", path.display());
    warn_if_pinned(&fit.cfg, &fit.profile.efficiency, WHO);
    Ok(Exit::Success)
}

/// Measured against predicted for each run, and the factors fitted.
fn report(cfg: &EngineConfig, profile: &Profile, learned: &Option<(SpecDecode, f64)>) {
    let efficiency = &profile.efficiency;
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
    if let Some((spec, drafts)) = learned {
        crate::outln!(
            "learned from the servers' counters ({drafts:.0} drafts): {}",
            spec.describe()
        );
    }
}
