//! Closed-loop users in waves: users whose answers all have one length and
//! who finish in the same engine step send their next prompts together, so
//! every prompt of a wave queues behind the others and TTFT holds that
//! queue. Neither the wave nor its absence decays on its own (real engines
//! have been measured in both; docs/metrics.md, "Waves"), so a run that
//! fell into waves reads a TTFT that another start would not.
//!
//! The sign is in the order requests finish: in waves, most finish within
//! a token's time of the one before; out of step, only as many as chance
//! puts in one step ([`share_by_chance`]).

use crate::results::Finding;
use crate::stats::Distribution;
use serde_json::json;

/// The time between each measured, successful request's end and the end
/// of the one before it, in the order they come: a live run's records come
/// as requests end. Records that come out of that order (shards merged one
/// after another) only lengthen gaps, so they can hide waves, never make
/// them up.
#[derive(Debug, Clone, Default)]
pub struct FinishGaps {
    last_done_us: Option<u64>,
    gaps_us: Distribution,
}

impl FinishGaps {
    pub fn add(&mut self, done_at_us: u64) {
        if let Some(last) = self.last_done_us {
            self.gaps_us.record(done_at_us.abs_diff(last) as f64);
        }
        self.last_done_us = Some(done_at_us);
    }

    /// Requests that ended within `within_us` of the one before.
    pub fn within(&self, within_us: f64) -> u64 {
        self.gaps_us.count_at_most(within_us)
    }
}

/// The share of requests that end in the same engine step as the one
/// before by chance, when `users` users are out of step and each request
/// takes `steps` steps: ends fall as a Poisson stream of λ = users / steps
/// a step, and of the ends in a step all but the first follow one in it,
/// so the share is 1 − (1 − e^−λ) / λ.
pub fn share_by_chance(users: f64, steps: f64) -> f64 {
    let lambda = users / steps.max(1.0);
    if lambda <= 0.0 {
        return 0.0;
    }
    1.0 - (1.0 - (-lambda).exp()) / lambda
}

/// What a run's waves rest on.
#[derive(Debug, Clone, Copy)]
pub struct WaveEvidence {
    /// Closed-loop users.
    pub users: u64,
    /// Output tokens every request asked for and got.
    pub output_tokens: u64,
    /// Measured, successful requests, and those that ended within half a
    /// median ITL of the one before.
    pub succeeded: u64,
    pub finished_together: u64,
    pub itl_p50_ms: f64,
    pub e2e_p50_ms: f64,
    /// `--ramp-up` spread the users' starts.
    pub ramped: bool,
}

/// Waves are called when more than half the requests end in the step of
/// the one before, and their share is past halfway from chance to all.
pub fn finding(e: WaveEvidence) -> Option<Finding> {
    // A few waves at least, each of two or more users.
    if e.users < 2 || e.succeeded < (3 * e.users).max(30) {
        return None;
    }
    let share = e.finished_together as f64 / (e.succeeded - 1) as f64;
    let chance = share_by_chance(e.users as f64, e.output_tokens as f64);
    if share <= 0.5 || share <= chance + (1.0 - chance) / 2.0 {
        return None;
    }
    let varied = format!(
        "uniform:{}..{}",
        e.output_tokens * 9 / 10,
        e.output_tokens * 11 / 10
    );
    let advice = match e.ramped {
        true => format!("they fell into step despite --ramp-up (long prefill steps gather the prompts that arrive during them); vary --output-tokens (e.g. {varied}) for a figure that does not hang on the phase"),
        false => format!("the users started together; pass --ramp-up {:.1}s (about one request's lifetime) to start them spread, or vary --output-tokens (e.g. {varied}), and compare", e.e2e_p50_ms / 1e3),
    };
    Some(Finding {
        rule: "waves".into(),
        severity: "warning".into(),
        message: format!(
            "the {} users ran in waves: {:.0} % of requests ended within half a token's time ({:.1} ms) of the one before, where users out of step would give {:.0} %; with answers of one length, users that finish together send together again, and a server that batches queues each wave's prompts behind each other, in their TTFT — {advice}",
            e.users,
            share * 100.0,
            e.itl_p50_ms / 2.0,
            chance * 100.0
        ),
        evidence: [
            ("users", json!(e.users)),
            ("finished_together_share", json!(share)),
            ("by_chance_share", json!(chance)),
            ("itl_p50_ms", json!(e.itl_p50_ms)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn evidence(finished_together: u64) -> WaveEvidence {
        WaveEvidence {
            users: 8,
            output_tokens: 20,
            succeeded: 81,
            finished_together,
            itl_p50_ms: 20.0,
            e2e_p50_ms: 480.0,
            ramped: false,
        }
    }

    #[test]
    fn chance_grows_with_the_users_a_step() {
        // One user a step in ten: ~5 % share a step with the one before.
        assert!((share_by_chance(1.0, 10.0) - 0.0484).abs() < 1e-3);
        // 2.56 a step: most do.
        assert!((share_by_chance(256.0, 100.0) - 0.6396).abs() < 1e-3);
        assert_eq!(share_by_chance(0.0, 100.0), 0.0);
    }

    #[test]
    fn waves_are_called_past_halfway_from_chance_to_all() {
        // 8 users of 20 tokens: chance 17.6 %, the bar 58.8 %.
        assert!(finding(evidence(70)).is_some()); // 87.5 %: every wave whole
        assert!(finding(evidence(45)).is_none()); // 56 %
        assert!(finding(evidence(14)).is_none()); // chance
        let f = finding(evidence(70)).unwrap();
        assert!(f.message.contains("--ramp-up 0.5s"), "{}", f.message);
        let ramped = WaveEvidence {
            ramped: true,
            ..evidence(70)
        };
        assert!(finding(ramped)
            .unwrap()
            .message
            .contains("despite --ramp-up"));
        // Too few requests for three waves.
        assert!(finding(WaveEvidence {
            succeeded: 20,
            ..evidence(18)
        })
        .is_none());
    }

    #[test]
    fn gaps_are_taken_in_the_order_requests_come() {
        let mut g = FinishGaps::default();
        for at in [1_000, 1_200, 1_250, 9_000, 9_100] {
            g.add(at);
        }
        assert_eq!(g.within(200.0), 3); // 200, 50, 100
        assert_eq!(g.within(10.0), 0);
    }
}
