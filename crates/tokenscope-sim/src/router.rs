//! Several engine replicas behind one endpoint (`--replicas N --router R`):
//! which replica a request goes to, as the load balancers in front of
//! vLLM fleets decide it (llm-d, NVIDIA Dynamo, the Kubernetes gateway
//! inference extension).

use crate::engine::kv::Unit;
use crate::engine::Engine;

/// How a request picks its replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Router {
    /// In turn, whatever their state.
    #[default]
    RoundRobin,
    /// The replica with the fewest requests running or waiting.
    LeastOutstanding,
    /// By the prompt's first cache block (a hash of its start): requests
    /// that start alike — a shared system prompt, a session's turns — meet
    /// on one replica and find their prefix cached there.
    PrefixAffinity,
    /// The replica whose prefix cache holds the longest start of the
    /// prompt; the least loaded among equals.
    KvAware,
}

impl Router {
    pub fn name(self) -> &'static str {
        match self {
            Router::RoundRobin => "round-robin",
            Router::LeastOutstanding => "least-outstanding",
            Router::PrefixAffinity => "prefix-affinity",
            Router::KvAware => "kv-aware",
        }
    }
}

impl std::str::FromStr for Router {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "round-robin" => Router::RoundRobin,
            "least-outstanding" => Router::LeastOutstanding,
            "prefix-affinity" => Router::PrefixAffinity,
            "kv-aware" => Router::KvAware,
            other => {
                return Err(format!(
                    "unknown router `{other}` (round-robin, least-outstanding, prefix-affinity, kv-aware)"
                ))
            }
        })
    }
}

/// The replicas and the routing state (the round-robin turn).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fleet {
    /// Replicas at the start (with `autoscale`, its minimum).
    pub replicas: u32,
    pub router: Router,
    /// Replicas added and removed by a policy.
    pub autoscale: Option<crate::autoscale::Policy>,
    /// Prefill and decode on separate pools (`replicas` = prefill + decode).
    pub disaggregate: Option<Disaggregation>,
}

/// Disaggregated serving (NVIDIA Dynamo, llm-d, DistServe, Splitwise): a
/// request's prompt is computed on a prefill replica, which sends the
/// first token; its KV cache then crosses to a decode replica, which
/// generates the rest. Decode steps never carry a prefill.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Disaggregation {
    pub prefill: u32,
    pub decode: u32,
    /// Each GPU's link for the KV transfer, GB/s (every GPU of a
    /// tensor-parallel group sends its share at once).
    pub transfer_gbs: f64,
}

/// Fixed cost of one KV handover (connection, registration, the decode
/// side's allocation): an assumption, docs/simulator.md.
pub const KV_TRANSFER_LATENCY_S: f64 = 0.001;

impl Default for Fleet {
    fn default() -> Self {
        Fleet {
            replicas: 1,
            router: Router::RoundRobin,
            autoscale: None,
            disaggregate: None,
        }
    }
}

/// Requests running or waiting on an engine.
pub(crate) fn outstanding(e: &Engine) -> usize {
    e.scheduler.running.len() + e.scheduler.waiting.len()
}

/// The replica a request of `prompt` tokens made of `units` goes to;
/// `turn` counts the requests routed so far (round-robin's turn).
pub fn pick(router: Router, engines: &[&Engine], units: &[Unit], prompt: u32, turn: u64) -> usize {
    let n = engines.len();
    let least = || (0..n).min_by_key(|&i| outstanding(engines[i])).unwrap_or(0);
    match router {
        _ if n <= 1 => 0,
        Router::RoundRobin => (turn % n as u64) as usize,
        Router::LeastOutstanding => least(),
        Router::PrefixAffinity => match units.first() {
            Some(u) => (u.key % n as u64) as usize,
            None => least(),
        },
        Router::KvAware => (0..n)
            .max_by_key(|&i| {
                let cached = engines[i].scheduler.kv.cached_prefix(units, prompt);
                (
                    cached,
                    std::cmp::Reverse(outstanding(engines[i])),
                    std::cmp::Reverse(i),
                )
            })
            .unwrap_or(0),
    }
}
