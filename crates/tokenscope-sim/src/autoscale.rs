//! Replicas added and removed by a policy, as KEDA or an HPA would, and
//! what a new replica costs before it serves: `sim plan --replicas MIN..MAX
//! --autoscale metric=running,target=8,delay=30s`.
//!
//! The policy is evaluated every `interval`: the metric summed over the
//! replicas serving, divided by `target`, rounded up, is the replicas
//! wanted (within MIN..MAX). A scale-up happens once more are wanted for
//! `delay` (the autoscaler's reaction: its polling and stabilisation);
//! the new replicas then take their start-up (weights over disk and PCIe,
//! plus the engine's initialisation) before they are routed to, and are
//! paid for from the moment they start. A scale-down retires one replica
//! once fewer are wanted for `cooldown`: it takes no new requests and
//! leaves when its last one finishes.

use crate::engine::EngineConfig;

/// What the policy reads, per replica, summed over those serving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// Requests in the running batch (vLLM `num_requests_running`).
    Running,
    /// Requests queued (vLLM `num_requests_waiting`).
    Waiting,
    /// Running + waiting.
    InServer,
}

impl Metric {
    pub fn name(self) -> &'static str {
        match self {
            Metric::Running => "running",
            Metric::Waiting => "waiting",
            Metric::InServer => "in-server",
        }
    }
}

/// An autoscaling policy and the fleet's bounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    pub metric: Metric,
    /// The metric's value per replica the policy holds.
    pub target: f64,
    pub delay_s: f64,
    pub interval_s: f64,
    pub cooldown_s: f64,
    pub min: u32,
    pub max: u32,
    /// From a replica's start to its first request served, s.
    pub startup_s: f64,
}

impl Policy {
    /// Parses `metric=running,target=8,delay=30s[,interval=15s][,cooldown=5m]`;
    /// the bounds and the start-up are set by the caller.
    pub fn parse(s: &str) -> Result<Policy, String> {
        let mut p = Policy {
            metric: Metric::Running,
            target: 0.0,
            delay_s: 30.0,
            interval_s: 15.0,
            cooldown_s: 300.0,
            min: 1,
            max: 1,
            startup_s: 0.0,
        };
        let secs = |v: &str| {
            humantime::parse_duration(v)
                .map(|d| d.as_secs_f64())
                .map_err(|e| format!("`{v}`: {e}"))
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}`: expected key=value"))?;
            match k {
                "metric" => {
                    p.metric = match v {
                        "running" => Metric::Running,
                        "waiting" => Metric::Waiting,
                        "in-server" => Metric::InServer,
                        _ => return Err(format!("metric `{v}`: running, waiting or in-server")),
                    }
                }
                "target" => {
                    p.target = v
                        .parse()
                        .ok()
                        .filter(|t: &f64| *t > 0.0)
                        .ok_or_else(|| format!("target `{v}`: a positive number"))?
                }
                "delay" => p.delay_s = secs(v)?,
                "interval" => p.interval_s = secs(v)?.max(1.0),
                "cooldown" => p.cooldown_s = secs(v)?,
                _ => {
                    return Err(format!(
                        "`{k}`: metric, target, delay, interval or cooldown"
                    ))
                }
            }
        }
        if p.target <= 0.0 {
            return Err("target=X is needed (the metric's value per replica to hold)".into());
        }
        Ok(p)
    }

    pub fn describe(&self) -> String {
        format!(
            "metric={},target={},delay={}s,interval={}s,cooldown={}s",
            self.metric.name(),
            self.target,
            self.delay_s,
            self.interval_s,
            self.cooldown_s
        )
    }
}

/// Host-to-GPU copy speed of a PCIe Gen4 x16 link in practice, GB/s.
pub const PCIE_GBS: f64 = 25.0;

/// A replica's start-up: its weights read from storage (at `load_gbps`
/// GB/s, shared by its GPUs) and copied over each GPU's PCIe link, the
/// slower of the two, then the engine's initialisation (CUDA graphs,
/// compilation, KV-cache allocation: `init_s`).
pub fn startup_s(config: &EngineConfig, load_gbps: f64, init_s: f64) -> f64 {
    let bytes = config.cost_model().weight_bytes_per_gpu();
    let storage = bytes * config.tp as f64 / (load_gbps * 1e9);
    let pcie = bytes / (PCIE_GBS * 1e9);
    storage.max(pcie) + init_s
}

/// One change of the fleet.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ScaleEvent {
    pub t_s: f64,
    pub from: u32,
    pub to: u32,
    pub why: String,
}

/// What the scaler decided at one evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Hold,
    Add(u32),
    Retire,
}

/// The policy's memory between evaluations.
pub struct Scaler {
    pub policy: Policy,
    pub next_eval_s: f64,
    above_since: Option<f64>,
    below_since: Option<f64>,
}

impl Scaler {
    pub fn new(policy: Policy) -> Scaler {
        Scaler {
            policy,
            next_eval_s: policy.interval_s,
            above_since: None,
            below_since: None,
        }
    }

    /// Evaluates at `now`: `metric` summed over the serving replicas,
    /// `fleet` the replicas serving or starting.
    pub fn decide(&mut self, now: f64, metric: f64, fleet: u32) -> (Decision, u32) {
        self.next_eval_s = now + self.policy.interval_s;
        let p = self.policy;
        let wanted = ((metric / p.target).ceil() as u32).clamp(p.min, p.max);
        if wanted > fleet {
            self.below_since = None;
            let since = *self.above_since.get_or_insert(now);
            if now - since >= p.delay_s {
                self.above_since = None;
                return (Decision::Add(wanted - fleet), wanted);
            }
        } else if wanted < fleet {
            self.above_since = None;
            let since = *self.below_since.get_or_insert(now);
            if now - since >= p.cooldown_s {
                self.below_since = Some(now);
                return (Decision::Retire, wanted);
            }
        } else {
            self.above_since = None;
            self.below_since = None;
        }
        (Decision::Hold, wanted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy {
            min: 1,
            max: 4,
            ..Policy::parse("metric=running,target=8,delay=30s,interval=10s,cooldown=60s").unwrap()
        }
    }

    #[test]
    fn policies_parse_and_refuse_clearly() {
        let p = policy();
        assert_eq!(
            (p.metric, p.target, p.delay_s, p.interval_s),
            (Metric::Running, 8.0, 30.0, 10.0)
        );
        assert!(Policy::parse("metric=gpu,target=1")
            .unwrap_err()
            .contains("running, waiting"));
        assert!(Policy::parse("metric=running")
            .unwrap_err()
            .contains("target=X"));
        assert!(Policy::parse("target=0").is_err());
    }

    #[test]
    fn scale_up_waits_for_the_delay_and_stays_within_the_bounds() {
        let mut s = Scaler::new(policy());
        // 40 running on 1 replica wants 5, capped at 4; only after 30 s above.
        assert_eq!(s.decide(10.0, 40.0, 1).0, Decision::Hold);
        assert_eq!(s.decide(20.0, 40.0, 1).0, Decision::Hold);
        assert_eq!(s.decide(40.0, 40.0, 1), (Decision::Add(3), 4));
        // A dip resets the wait.
        assert_eq!(s.decide(50.0, 40.0, 2).0, Decision::Hold);
        assert_eq!(s.decide(60.0, 8.0, 2).0, Decision::Hold);
        assert_eq!(s.decide(70.0, 40.0, 2).0, Decision::Hold);
    }

    #[test]
    fn scale_down_waits_for_the_cooldown_one_replica_at_a_time() {
        let mut s = Scaler::new(policy());
        assert_eq!(s.decide(0.0, 4.0, 4).0, Decision::Hold);
        assert_eq!(s.decide(30.0, 4.0, 4).0, Decision::Hold);
        assert_eq!(s.decide(60.0, 4.0, 4).0, Decision::Retire);
        assert_eq!(
            s.decide(70.0, 4.0, 3).0,
            Decision::Hold,
            "the next retirement waits again"
        );
    }
}
