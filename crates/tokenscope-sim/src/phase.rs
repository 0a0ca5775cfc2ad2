//! Closed loops of fixed lengths: how much of their TTFT is the phase in
//! which the users happen to run.
//!
//! Users whose answers all have one length and who start together finish a
//! wave in the same engine step and come back together, so every wave's
//! prompts queue behind each other; users that start spread out stay
//! spread, and each prompt finds the engine free. Neither state decays on
//! its own: a real engine keeps either (llama.cpp on this machine keeps a
//! wave that started together; NIM's published closed loops show one
//! deployment locked and another dissolved — docs/simulator.md, "Closed
//! loops of fixed lengths"). So the simulator cannot say which a real
//! server will be in, and `sim plan` says so: for such a load it also
//! simulates the other start and reports both TTFTs.

use crate::engine::EngineConfig;
use crate::load::PlanLoad;
use serde::Serialize;
use tokenscope_core::metrics::Aggregator;
use tokenscope_core::results::Finding;
use tokenscope_core::stats::Summary;
use tokenscope_workload::arrival::LoadPattern;
use tokenscope_workload::lengths::LengthSpec;

/// The two starts differ when their TTFT p50s differ by more than this
/// share of the smaller, and by more than [`MIN_GAP_MS`].
pub const DIFFERENT_SHARE: f64 = 0.2;
/// Below this gap (ms) a difference is the front end's jitter, not the phase.
pub const MIN_GAP_MS: f64 = 2.0;

/// The same load simulated with both starts.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseCheck {
    pub concurrency: usize,
    /// How the run itself started: `together` or `staggered`.
    pub simulated_start: &'static str,
    /// The staggered start's ramp (`--ramp-up`, or one request's mean
    /// lifetime when the run started together): seconds.
    pub ramp_up_s: f64,
    /// TTFT (ms) of the measured requests, users started at once.
    pub together_ttft_ms: Summary,
    /// TTFT (ms) of the measured requests, users started over `ramp_up_s`.
    pub staggered_ttft_ms: Summary,
    /// Whether the p50s differ past [`DIFFERENT_SHARE`] and [`MIN_GAP_MS`].
    pub differs: bool,
}

/// Whether a load's TTFT can hang on its users' phase: a closed loop of two
/// or more users whose answers (and thinking) all have one length, from no
/// dataset, trace or sessions that would vary them.
pub fn applies(load: &PlanLoad) -> bool {
    let fixed = |s: Option<LengthSpec>| matches!(s, None | Some(LengthSpec::Fixed(_)));
    let w = &load.workload;
    matches!(load.pattern, LoadPattern::Closed { concurrency } if concurrency >= 2)
        && matches!(w.output, Some(LengthSpec::Fixed(_)))
        && fixed(load.reasoning)
        && w.dataset.is_none()
        && w.multi_turn.is_none()
        && load.trace.is_none()
}

/// Simulates `load` with the start it did not have and compares the two.
/// `run_ttft_ms` is the run's own TTFT; `lifetime_s` one request's mean
/// lifetime (E2E), the ramp a staggered start spreads the users over when
/// the run started together. `None` when the load does not qualify
/// ([`applies`]) or either run measured no TTFT.
pub fn check(
    config: &EngineConfig,
    load: &PlanLoad,
    run_ttft_ms: &Summary,
    lifetime_s: f64,
) -> Result<Option<PhaseCheck>, String> {
    let LoadPattern::Closed { concurrency } = load.pattern else {
        return Ok(None);
    };
    if !applies(load) {
        return Ok(None);
    }
    let started_together = load.ramp_up_s.is_none_or(|r| r <= 0.0);
    let ramp = match load.ramp_up_s.filter(|_| !started_together) {
        Some(r) => r,
        // Over one request's lifetime, so the users' requests are evenly
        // spread; within the run, so the spread start is measured.
        None => load
            .duration_s
            .map_or(lifetime_s, |d| lifetime_s.min(d / 2.0)),
    };
    if ramp <= 0.0 {
        return Ok(None);
    }
    let other = PlanLoad {
        ramp_up_s: started_together.then_some(ramp),
        ..load.clone()
    };
    let Some(other_ttft) = ttft_ms(config, &other)? else {
        return Ok(None);
    };
    let (together, staggered) = match started_together {
        true => (*run_ttft_ms, other_ttft),
        false => (other_ttft, *run_ttft_ms),
    };
    let (a, b) = (together.p50, staggered.p50);
    let gap = (a - b).abs();
    Ok(Some(PhaseCheck {
        concurrency,
        simulated_start: if started_together {
            "together"
        } else {
            "staggered"
        },
        ramp_up_s: ramp,
        differs: gap > MIN_GAP_MS && gap > DIFFERENT_SHARE * a.min(b),
        together_ttft_ms: together,
        staggered_ttft_ms: staggered,
    }))
}

/// A load's TTFT (ms), as the run's own figures count it.
fn ttft_ms(config: &EngineConfig, load: &PlanLoad) -> Result<Option<Summary>, String> {
    let mut figures = Aggregator::new(None, None);
    // Sampling the engine's state once per virtual minute: the check reads
    // only the records.
    crate::plan::simulate_into(config, load, 60.0, &mut |r| figures.add(&r))?;
    Ok(figures.finish().latency.ttft_ms)
}

impl PhaseCheck {
    /// A warning when the two starts differ: the TTFT shown rests on a
    /// phase a real server may not be in.
    pub fn finding(&self) -> Option<Finding> {
        if !self.differs {
            return None;
        }
        let (t, s) = (&self.together_ttft_ms, &self.staggered_ttft_ms);
        let message = format!(
            "TTFT rests on how the {} users line up: with answers of one length, users that start together finish together and queue behind each other again. Started together TTFT p50 {:.1} ms (mean {:.1}); started over {:.1} s, p50 {:.1} ms (mean {:.1}). This run started {}. Real engines have been measured in either state (docs/simulator.md, \"Closed loops of fixed lengths\"): plan for the larger, or vary --output-tokens (e.g. uniform:…) for a figure that does not hang on the start",
            self.concurrency,
            t.p50,
            t.mean,
            self.ramp_up_s,
            s.p50,
            s.mean,
            self.simulated_start,
        );
        let evidence = [
            ("concurrency", serde_json::json!(self.concurrency)),
            ("simulated_start", serde_json::json!(self.simulated_start)),
            ("ramp_up_s", serde_json::json!(self.ramp_up_s)),
            ("together_ttft_p50_ms", serde_json::json!(t.p50)),
            ("staggered_ttft_p50_ms", serde_json::json!(s.p50)),
        ];
        Some(Finding {
            rule: "ttft_depends_on_phase".into(),
            severity: "warning".into(),
            message,
            evidence: evidence
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        })
    }
}
