//! The server's front end: what a request goes through between the wire
//! and the scheduler. Part of it runs one request at a time — an engine's
//! API server is one process whose event loop parses each request, renders
//! its chat template and tokenises its prompt (vLLM's API server, SGLang's
//! TokenizerManager, NIM's OpenAI front end) — and part of it runs for all
//! requests at once (the hop to the engine, the engine's intake).
//!
//! The serial part matters when many requests arrive together: a closed
//! loop's users that finished in one engine step send their next prompts
//! together, and the front end hands them to the scheduler one after
//! another, spread by their tokenisation, instead of all in one step.

use crate::engine::EngineConfig;
use crate::load::IdHash;
use crate::traffic::Arrival;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The serial front end's cost per request before tokenisation: request
/// parsing, validation and the chat template in the API server's event
/// loop (seconds). An assumption of the order of a Python handler's work;
/// it is a share of the request overhead (`Efficiency::request_overhead_s`),
/// not added to it.
pub const SERIAL_PER_REQUEST_S: f64 = 1e-3;

/// Tokenising one prompt token (seconds). This repository's tokeniser
/// (tiktoken-rs, cl100k) takes 0.5 µs a token on one core
/// (`cargo run --release -p tokenscope-workload --example tokenize_cost`);
/// engines use Hugging Face's tokenizers, which tiktoken's authors measure
/// at 3–6× slower: the low end of that, 1.5 µs.
pub const TOKENIZE_PER_TOKEN_S: f64 = 1.5e-6;

/// What a request costs the front end before a scheduler sees it
/// (seconds). `sim plan` and `sim serve` both charge it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Costs {
    /// The serial stage's share: parsing and templating, and tokenising.
    pub serial_s: f64,
    /// The rest of the request overhead, which overlaps other requests.
    pub overlapped_s: f64,
    /// The hand-over to every tensor-parallel rank
    /// (`Preset::tp_request_overhead_s`).
    pub ranks_s: f64,
}

impl Costs {
    /// A request of `tokens` prompt tokens on `config`'s server: the serial
    /// share comes out of the request overhead, tokenising on top.
    pub fn of(config: &EngineConfig, tokens: u64) -> Costs {
        let overhead_s = config.efficiency.request_overhead_s.max(0.0);
        let base = SERIAL_PER_REQUEST_S.min(overhead_s);
        Costs {
            serial_s: base + TOKENIZE_PER_TOKEN_S * tokens as f64,
            overlapped_s: overhead_s - base,
            ranks_s: config.engine.tp_request_overhead_s(config.tp),
        }
    }
}

/// The front end's one-at-a-time stage: a request that reaches it waits
/// for the ones before, then takes its own cost. `sim plan` and `sim serve`
/// both pass their requests through one.
#[derive(Debug, Default)]
pub struct SerialStage {
    /// When the stage is next free (µs on the caller's clock).
    free_at_us: u64,
}

impl SerialStage {
    /// A request that reaches the stage at `at_us` and needs `cost_us` of
    /// it: when it leaves.
    pub fn pass(&mut self, at_us: u64, cost_us: u64) -> u64 {
        self.free_at_us = self.free_at_us.max(at_us) + cost_us;
        self.free_at_us
    }

    /// Whether a request reaching the stage at `at_us` finds it working.
    pub fn busy_at(&self, at_us: u64) -> bool {
        at_us < self.free_at_us
    }
}

/// A fleet's serial stages: each replica has its own API server, so a
/// fleet has as many as it has replicas, and a request takes the one free
/// first (the load balancer's choice, made before the router picks an
/// engine).
#[derive(Debug, Default)]
pub struct SerialStages(Vec<SerialStage>);

impl SerialStages {
    /// A request that reaches the front ends of `servers` replicas at
    /// `at_us` and needs `cost_us` of one: whether it found that stage
    /// working, and when it leaves it.
    pub fn pass(&mut self, at_us: u64, cost_us: u64, servers: usize) -> (bool, u64) {
        let servers = servers.max(1);
        if self.0.len() < servers {
            self.0.resize_with(servers, SerialStage::default);
        }
        let stage = self.0[..servers]
            .iter_mut()
            .min_by_key(|s| s.free_at_us)
            .expect("at least one server");
        (stage.busy_at(at_us), stage.pass(at_us, cost_us))
    }

    /// When every stage is free (µs): a static batcher hands over what
    /// reached the front ends while they were busy once they are idle.
    pub fn idle_at_us(&self) -> u64 {
        self.0.iter().map(|s| s.free_at_us).max().unwrap_or(0)
    }
}

/// Requests in the servers' front ends, by when they reach a scheduler.
#[derive(Default)]
pub struct FrontEnd {
    serial: SerialStages,
    heap: BinaryHeap<Reverse<(u64, u64)>>,
    inside: std::collections::HashMap<u64, Arrival, IdHash>,
    /// A static-batching server's batcher: requests that arrive while the
    /// front end is still busy with others are one batch, handed over
    /// together when the last of them is through.
    batches: bool,
    batch: Vec<u64>,
    batch_through_us: u64,
}

impl FrontEnd {
    /// A front end that hands requests over as they are through, or
    /// (`batches`) a static batch at a time.
    pub fn new(batches: bool) -> FrontEnd {
        FrontEnd {
            batches,
            ..FrontEnd::default()
        }
    }

    /// Takes a request that reaches the front ends of `servers` replicas
    /// at `at_us` and needs `serial_us` of a serial stage, then `after_us`
    /// more that overlaps other requests. Returns when it is through (a
    /// batch may hold it longer).
    pub fn receive(
        &mut self,
        a: Arrival,
        at_us: u64,
        (serial_us, after_us): (u64, u64),
        servers: usize,
    ) -> u64 {
        let (busy, out) = self.serial.pass(at_us, serial_us, servers);
        let through = out + after_us;
        if self.batches {
            if !busy {
                self.close_batch();
            }
            self.batch.push(a.id);
            self.batch_through_us = self.batch_through_us.max(through);
        } else {
            self.heap.push(Reverse((through, a.id)));
        }
        self.inside.insert(a.id, a);
        through
    }

    /// The batch being gathered goes to the scheduler when its last is through.
    fn close_batch(&mut self) {
        let at = self.batch_through_us;
        for id in self.batch.drain(..) {
            self.heap.push(Reverse((at, id)));
        }
        // The next batch waits for its own members only.
        self.batch_through_us = 0;
    }

    pub fn next_time(&self) -> Option<u64> {
        let gathering = (!self.batch.is_empty()).then_some(self.batch_through_us);
        let queued = self.heap.peek().map(|Reverse((t, _))| *t);
        queued.into_iter().chain(gathering).min()
    }

    /// The next request through by `now_us`, with when it got through.
    pub fn due(&mut self, now_us: u64) -> Option<(u64, Arrival)> {
        if !self.batch.is_empty() && self.batch_through_us <= now_us {
            self.close_batch();
        }
        let at = self
            .heap
            .peek()
            .map(|Reverse((t, _))| *t)
            .filter(|&at| at <= now_us)?;
        let Reverse((_, id)) = self.heap.pop()?;
        Some((at, self.inside.remove(&id).expect("received")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrival(id: u64) -> Arrival {
        Arrival {
            id,
            sent_us: 0,
            input: 1,
            max_output: 1,
            reasoning: 0,
            turn: None,
            units: Default::default(),
        }
    }

    #[test]
    fn the_serial_share_comes_out_of_the_overhead_and_tokenising_on_top() {
        let cat = crate::engine::catalogue::Catalogue::builtin();
        let mut cfg = EngineConfig::new(
            cat.model("llama-3.1-70b").unwrap(),
            cat.gpu("h100-sxm").unwrap(),
        );
        cfg.efficiency.request_overhead_s = 0.010;
        cfg.tp = 4;
        let c = Costs::of(&cfg, 1000);
        assert!(
            (c.serial_s - (SERIAL_PER_REQUEST_S + 1000.0 * TOKENIZE_PER_TOKEN_S)).abs() < 1e-12
        );
        assert!((c.overlapped_s - (0.010 - SERIAL_PER_REQUEST_S)).abs() < 1e-12);
        assert_eq!(c.ranks_s, cfg.engine.tp_request_overhead_s(4));
        // A calibrated overhead below the serial share is all serial.
        cfg.efficiency.request_overhead_s = 0.0004;
        let c = Costs::of(&cfg, 0);
        assert_eq!((c.serial_s, c.overlapped_s), (0.0004, 0.0));
    }

    #[test]
    fn the_serial_stage_serves_one_at_a_time_and_idles_between() {
        let mut s = SerialStage::default();
        assert_eq!(s.pass(100, 10), 110);
        assert!(s.busy_at(105) && !s.busy_at(110));
        assert_eq!(s.pass(100, 10), 120); // arrived together: waits
        assert_eq!(s.pass(500, 10), 510); // idle meanwhile: no wait
    }

    #[test]
    fn requests_that_arrive_together_leave_one_serial_cost_apart() {
        let mut f = FrontEnd::default();
        let out: Vec<u64> = (0..4)
            .map(|i| f.receive(arrival(i), 1_000, (500, 2_000), 1))
            .collect();
        assert_eq!(out, [3_500, 4_000, 4_500, 5_000]);
        // An idle front end serves a late request at once.
        assert_eq!(f.receive(arrival(9), 10_000, (500, 0), 1), 10_500);
        let order: Vec<u64> = std::iter::from_fn(|| f.due(u64::MAX).map(|(_, a)| a.id)).collect();
        assert_eq!(order, [0, 1, 2, 3, 9]);
    }

    #[test]
    fn each_replica_has_its_own_front_end() {
        let mut f = FrontEnd::default();
        let out: Vec<u64> = (0..4)
            .map(|i| f.receive(arrival(i), 1_000, (500, 0), 2))
            .collect();
        assert_eq!(out, [1_500, 1_500, 2_000, 2_000]);
    }

    #[test]
    fn a_static_batcher_hands_over_what_arrived_together_as_one_batch() {
        let mut f = FrontEnd::new(true);
        for i in 0..4 {
            f.receive(arrival(i), 1_000, (500, 2_000), 1);
        }
        // Nothing leaves before the last of the four is through.
        assert_eq!(f.next_time(), Some(5_000));
        assert!(f.due(4_999).is_none());
        // A later request, once the serial stage is idle, starts the next
        // batch, which leaves when its own members are through — here
        // before the last batch, whose members' other work runs longer.
        f.receive(arrival(8), 3_000, (500, 0), 1);
        f.receive(arrival(9), 10_000, (500, 0), 1);
        let out: Vec<(u64, u64)> =
            std::iter::from_fn(|| f.due(u64::MAX).map(|(at, a)| (at, a.id))).collect();
        assert_eq!(
            out,
            [
                (3_500, 8),
                (5_000, 0),
                (5_000, 1),
                (5_000, 2),
                (5_000, 3),
                (10_500, 9)
            ]
        );
    }
}
