//! The same search as [`crate::find`], on the simulated engine's virtual
//! clock: `tune --plan-first K --sim 'FLAGS'` plans every setting's SLO
//! capacity in seconds of CPU, then measures only the K most promising.
//!
//! The probe, the bisection, the point's cap and its verdict (each
//! objective at its upper 95 % bound) are the measured search's; a
//! planned point has no early stop (it costs no GPU time) and no
//! saturation rule (its queue is read from the verdict).

use crate::cli::EngineArgs;
use crate::exit::Exit;
use crate::series::{closed, Level};
use crate::spec::workload::Load;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tokenscope_core::capacity::PointSlo;
use tokenscope_core::metrics::measure;
use tokenscope_core::search::{round3, Bisection, Bracket, SearchOver};
use tokenscope_core::slo::{Slo, Verdict};
use tokenscope_sim::engine::EngineConfig;

/// A setting's capacity as planned.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Planned {
    /// The engine the flags described (`sim plan`'s words).
    pub engine: String,
    pub bracket: Bracket,
    /// The planned probe's requests/s and output tokens/s.
    pub probe_requests_per_s: f64,
    pub probe_output_tokens_per_s: f64,
    pub points: usize,
}

/// `--sim 'FLAGS'` for one setting: the engine flags of `sim plan`, and
/// `--profile` (a `sim calibrate` fit).
pub fn engine_of(flags: &str) -> anyhow::Result<EngineConfig> {
    #[derive(clap::Parser)]
    #[command(name = "--sim")]
    struct SimFlags {
        #[command(flatten)]
        engine: EngineArgs,
        #[arg(long)]
        profile: Option<std::path::PathBuf>,
    }
    let words = std::iter::once("--sim").chain(flags.split_whitespace());
    let parsed = <SimFlags as clap::Parser>::try_parse_from(words).map_err(|e| {
        let first = e.to_string();
        let first = first
            .lines()
            .next()
            .unwrap_or("")
            .trim_start_matches("error: ");
        Exit::usage(format!("--sim '{flags}': {first}"))
    })?;
    let mut cfg = crate::engine::engine_config(&parsed.engine)?;
    if let Some(p) = &parsed.profile {
        crate::engine::apply_profile(&mut cfg, p, parsed.engine.catalogue.as_deref())?;
    }
    Ok(cfg)
}

/// How the search is sized: what it varies, where it stops, its probe's
/// concurrency, a point's request cap and least time.
#[derive(Debug, Clone, Copy)]
pub struct Sizing {
    pub over: SearchOver,
    pub precision: f64,
    pub probe: u64,
    pub cap: u64,
    pub min_point_s: f64,
}

/// Plans the search on `cfg`: the probe at concurrency `probe` (as many
/// requests as the measured probe sends), then bisection to `precision`,
/// each point `cap` requests.
pub fn plan(cfg: &EngineConfig, base: &Load, slo: &Slo, size: &Sizing) -> anyhow::Result<Planned> {
    let Sizing {
        over,
        precision,
        probe,
        cap,
        min_point_s,
    } = *size;
    let at = |level: Level| -> anyhow::Result<(Verdict, f64, f64)> {
        let delay = Duration::from_secs_f64(tokenscope_sim::plan::DEFAULT_NETWORK_DELAY_S);
        let load = crate::engine::plan_load(&level.work, delay);
        let out = tokenscope_sim::plan::simulate(cfg, &load).map_err(Exit::usage)?;
        let m = measure(&out.records, Some(slo), None);
        let objectives = m.slo.map(|s| s.objectives).unwrap_or_default();
        let verdict = PointSlo::judge(&objectives).0.verdict;
        Ok((
            verdict,
            m.throughput.requests_per_s,
            m.throughput.output_tokens_per_s,
        ))
    };
    let (probe_met, rps, tps) = at(closed(base, probe))?;
    let bound = match over {
        SearchOver::Rate => round3(rps),
        SearchOver::Concurrency => probe as f64,
    };
    let mut bisection = Bisection::new(over, bound, precision);
    if over == SearchOver::Concurrency {
        bisection.record(bound, probe_met == Verdict::Met);
    }
    let mut points = 0;
    while let Some(load) = bisection.next().filter(|_| bound > 0.0) {
        // The probe runs as measured (two rounds of its concurrency); a
        // point is sized as the measured search sizes it.
        let level = crate::find::level_at(base, over, load, Some(cap), min_point_s);
        points += 1;
        match at(level)?.0 {
            // As the measured search: a point that cannot be judged ends it.
            Verdict::NotEnoughData => break,
            v => bisection.record(load, v == Verdict::Met),
        }
    }
    Ok(Planned {
        engine: cfg.describe(),
        bracket: bisection.bracket(),
        probe_requests_per_s: rps,
        probe_output_tokens_per_s: tps,
        points,
    })
}
