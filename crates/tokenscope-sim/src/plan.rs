//! `sim plan`: the engine on a virtual clock. Discrete events — arrivals and
//! step completions — so an hour of traffic takes a second. The output is the
//! same per-request records a real run writes, plus the engine's time series.

use crate::engine::scheduler::Seq;
use crate::engine::{Engine, EngineConfig, EngineState};
use crate::front_end::{self, FrontEnd};
use crate::load::{us, IdHash};
pub use crate::load::{Images, PlanLoad, DEFAULT_NETWORK_DELAY_S};
use crate::traffic::Traffic;
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use tokenscope_core::record::{Chunk, ErrorKind, RequestRecord, TokenSource};

/// One sample of the engine's state (virtual seconds since the start).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sample {
    pub t_s: f64,
    #[serde(flatten)]
    pub state: EngineState,
    pub output_tokens_total: u64,
    pub steps_total: u64,
    /// Replicas serving (started and not retired).
    pub replicas: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct EngineSummary {
    pub kv_capacity_tokens: u64,
    pub kv_blocks: u64,
    pub block_size: u32,
    pub max_num_seqs: u32,
    pub max_num_batched_tokens: u32,
    pub steps: u64,
    /// Virtual seconds the engine was stepping.
    pub busy_s: f64,
    pub preemptions_total: u64,
    pub prefix_cache_queries_tokens: u64,
    pub prefix_cache_hits_tokens: u64,
    /// With `--replicas` over 1: each replica's own figures (the fields above
    /// are summed over them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<ReplicaSummary>,
    /// With `--autoscale`: the policy, the fleet's changes and what it cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autoscale: Option<AutoscaleSummary>,
    /// With `--spec-decode`: the fleet's drafts and acceptances, counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec_decode: Option<crate::engine::scheduler::SpecStats>,
}

/// What an autoscaled fleet did.
#[derive(Debug, Clone, Serialize)]
pub struct AutoscaleSummary {
    pub policy: String,
    pub min: u32,
    pub max: u32,
    /// A new replica's start-up (weights loaded, engine initialised), s.
    pub startup_s: f64,
    pub events: Vec<crate::autoscale::ScaleEvent>,
    /// Replicas serving at most at once.
    pub peak_replicas: u32,
    /// Σ over replicas of their time from start (start-up included: a
    /// loading GPU is paid for) to retirement or the plan's end, s.
    pub replica_seconds: f64,
}

/// One replica's share of the work.
#[derive(Debug, Clone, Serialize)]
pub struct ReplicaSummary {
    /// `prefill` or `decode` when serving is disaggregated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    pub requests: u64,
    pub steps: u64,
    pub busy_s: f64,
    pub preemptions_total: u64,
    pub prefix_cache_queries_tokens: u64,
    pub prefix_cache_hits_tokens: u64,
}

pub struct PlanOutput {
    pub records: Vec<RequestRecord>,
    pub samples: Vec<Sample>,
    pub summary: EngineSummary,
}

/// Runs the plan to its end. Errors only when the deployment does not fit.
pub fn simulate(config: &EngineConfig, load: &PlanLoad) -> Result<PlanOutput, String> {
    simulate_with_sampling(config, load, 1.0)
}

/// As [`simulate`], sampling the engine's state every `sample_every_s` virtual seconds.
pub fn simulate_with_sampling(
    config: &EngineConfig,
    load: &PlanLoad,
    sample_every_s: f64,
) -> Result<PlanOutput, String> {
    let mut records = Vec::new();
    let (samples, summary) = simulate_into(config, load, sample_every_s, &mut |r| records.push(r))?;
    records.sort_by_key(|r| r.id);
    Ok(PlanOutput {
        records,
        samples,
        summary,
    })
}

/// Runs the plan, handing each request's record to `on_record` as it
/// finishes (in finishing order; any left unfinished at the end follow, by
/// id), so only the requests in flight are held: memory does not grow with
/// the plan's length. Returns the engine's samples and summary.
pub fn simulate_into(
    config: &EngineConfig,
    load: &PlanLoad,
    sample_every_s: f64,
    on_record: &mut dyn FnMut(RequestRecord),
) -> Result<(Vec<Sample>, EngineSummary), String> {
    let mut run = Run::new(config, load)?;
    let mut sampler = Sampler {
        every_s: sample_every_s,
        next_s: 0.0,
        samples: Vec::new(),
    };
    let mut last_event = 0.0f64;
    while let Some((now, event)) = run.next_event() {
        last_event = now;
        sampler.catch_up(&run, now);
        match event {
            Event::Wire => run.receive(on_record),
            Event::Handed => run.hand_over(now),
            Event::Through => run.admit(now),
            Event::Evaluate => run.evaluate(now)?,
            Event::Step(t, i) => run.step(t, i, on_record),
        }
    }
    // A replica that never served does not extend the plan.
    let end = run
        .fleet
        .iter()
        .filter(|r| r.steps > 0)
        .map(|r| r.t)
        .fold(last_event, f64::max);
    sampler.catch_up(&run, end);
    Ok(run.finish(sampler.samples, end, on_record))
}

/// The engine's state sampled on a fixed virtual grid.
struct Sampler {
    every_s: f64,
    next_s: f64,
    samples: Vec<Sample>,
}

impl Sampler {
    /// Every sample due by `now` (the state is the one before `now`'s event).
    fn catch_up(&mut self, run: &Run, now: f64) {
        while now >= self.next_s {
            let s = sample(&run.fleet, self.next_s, run.tokens_total);
            self.samples.push(s);
            self.next_s += self.every_s;
        }
    }
}

/// The next thing to happen. At equal times they come in this order:
/// arrivals join before the step.
enum Event {
    /// A request off the wire, into the front end.
    Wire,
    /// A prefilled request's KV reaches its decode replica.
    Handed,
    /// A request through the front end, to be routed to a replica.
    Through,
    /// The autoscaler's next look at the fleet.
    Evaluate,
    /// Replica `.1`'s next step, starting at `.0`.
    Step(f64, usize),
}

/// One plan in flight: the fleet, the traffic, the front end and the
/// records of the requests not yet finished.
struct Run<'a> {
    config: &'a EngineConfig,
    load: &'a PlanLoad,
    fleet: Vec<Replica>,
    handoffs: Handoffs,
    scaler: Option<crate::autoscale::Scaler>,
    events: Vec<crate::autoscale::ScaleEvent>,
    /// Records name their replica when there is more than one.
    tag_replicas: bool,
    traffic: Traffic<'a>,
    jitter: Jitter,
    front: FrontEnd,
    /// The one-way network delay, µs.
    delay: u64,
    records: std::collections::HashMap<u64, RequestRecord, IdHash>,
    routed: u64,
    tokens_total: u64,
    /// The longest request an engine takes (`EngineConfig::max_model_len`).
    max_len: u64,
}

impl<'a> Run<'a> {
    fn new(config: &'a EngineConfig, load: &'a PlanLoad) -> Result<Run<'a>, String> {
        let n = load.fleet.replicas.max(1) as usize;
        let mut fleet: Vec<Replica> = Vec::with_capacity(n);
        for i in 0..n {
            let mut r = Replica::new(Engine::new(config.clone())?, 0.0);
            r.role = match load.fleet.disaggregate {
                Some(d) if (i as u32) < d.prefill => Role::Prefill,
                Some(_) => Role::Decode,
                None => Role::Both,
            };
            fleet.push(r);
        }
        let scaler = load.fleet.autoscale.map(crate::autoscale::Scaler::new);
        let traffic = Traffic::start(load, fleet[0].engine.scheduler.kv.block_size)?;
        Ok(Run {
            config,
            load,
            tag_replicas: n > 1 || scaler.is_some(),
            fleet,
            handoffs: Handoffs::default(),
            scaler,
            events: Vec::new(),
            traffic,
            jitter: Jitter::new(load.seed),
            front: FrontEnd::new(config.limits().static_batch),
            delay: us(load.network_delay_s),
            records: Default::default(),
            routed: 0,
            tokens_total: 0,
            max_len: config.max_model_len(),
        })
    }

    /// The earliest event and its time; `None` when the plan is over.
    fn next_event(&self) -> Option<(f64, Event)> {
        let wire = self
            .traffic
            .next_time()
            .map(|sent| (sent + self.delay) as f64 / 1e6);
        let through = self.front.next_time().map(|at| at as f64 / 1e6);
        let handed = self.handoffs.next_time();
        let step = self
            .fleet
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.engine.is_idle())
            .map(|(i, r)| (r.t, i))
            .min_by(|a, b| a.0.total_cmp(&b.0));
        // The policy is evaluated while there is work left.
        let working = wire.is_some() || through.is_some() || step.is_some() || handed.is_some();
        let eval = self
            .scaler
            .as_ref()
            .filter(|_| working)
            .map(|s| s.next_eval_s);
        let now = [wire, through, handed, step.map(|s| s.0), eval]
            .into_iter()
            .flatten()
            .min_by(f64::total_cmp)?;
        let event = if wire == Some(now) {
            Event::Wire
        } else if handed == Some(now) {
            Event::Handed
        } else if through == Some(now) {
            Event::Through
        } else {
            match step {
                Some((t, i)) if t <= now => Event::Step(t, i),
                _ => Event::Evaluate,
            }
        };
        Some((now, event))
    }

    /// A request off the wire: its record opened, into the front end — or
    /// refused there, when it is longer than an engine takes.
    fn receive(&mut self, on_record: &mut dyn FnMut(RequestRecord)) {
        let a = self.traffic.pop().expect("one is due");
        let (load, delay) = (self.load, self.delay);
        let at = a.sent_us + delay;
        // Image tokens count in the prompt, as a server's usage counts them.
        let image_tokens = load.images.as_ref().map_or(0, |m| m.of(a.id).0);
        let input = a.input + image_tokens;
        let mut rec = new_record(a.id, a.id < load.warmup, a.sent_us, input, a.max_output);
        rec.requested_input_tokens = Some(a.input); // the text asked for
        if a.reasoning > 0 {
            rec.reasoning_tokens = Some(a.reasoning as u64);
            rec.reasoning_token_source = Some(TokenSource::ServerUsage);
        }
        rec.first_byte_at_us = Some(a.sent_us + 2 * delay);
        (rec.session, rec.turn) = (a.turn.map(|t| t.0), a.turn.map(|t| t.1));
        let cost = front_end::Costs::of(self.config, input);
        if let Some(why) = EngineConfig::too_long(self.max_len, input, a.max_output as u64) {
            // The front end tokenizes the prompt before it can count it.
            let counted = at + us(cost.serial_s).max(1);
            refuse(&mut rec, why, counted + delay);
            self.traffic.failed(a.id, rec.done_at_us);
            on_record(rec);
            return;
        }
        self.records.insert(a.id, rec);
        let after = us(self.jitter.front_end(cost.overlapped_s) + cost.ranks_s);
        let servers = self.fleet.iter().filter(|r| !r.retiring).count();
        self.front
            .receive(a, at, (us(cost.serial_s), after), servers);
    }

    /// A prefilled request's KV arrived: to a decode replica.
    fn hand_over(&mut self, now: f64) {
        let seq = self.handoffs.due(now).expect("one is due");
        let (router, prompt) = (self.load.fleet.router, seq.prompt);
        let i = route(
            &self.fleet,
            now,
            Role::Decode,
            router,
            &seq.units,
            prompt,
            self.routed,
        );
        self.routed += 1;
        let id = seq.id;
        self.fleet[i].take(seq, now);
        self.tag(id, i);
    }

    /// A request through the front end: routed to a replica, which takes it.
    fn admit(&mut self, now: f64) {
        let (at, a) = self.front.due(us(now)).expect("one is due");
        let (router, input) = (self.load.fleet.router, a.input as u32);
        let i = route(
            &self.fleet,
            now,
            Role::Prefill,
            router,
            &a.units,
            input,
            self.routed,
        );
        self.routed += 1;
        // A prefill replica computes the prompt and the first token only.
        let first_only = self.fleet[i].role == Role::Prefill && a.max_output > 1;
        let asked = if first_only { 1 } else { a.max_output };
        if first_only {
            self.handoffs.wants.insert(a.id, a.max_output);
        }
        let images = self.load.images.as_ref();
        let (image_tokens, encoder_flops) = images.map_or((0, 0.0), |m| m.of(a.id));
        let prompt = (a.input + image_tokens) as u32;
        let mut seq = Seq::new(a.id, prompt, asked, at as f64 / 1e6);
        seq.units = a.units;
        if let Some(m) = images {
            seq.encoder_flops = encoder_flops;
            seq.encoder_params_b = m.encoder.params_b;
        }
        self.fleet[i].take(seq, now);
        self.tag(a.id, i);
    }

    /// Names the replica in the request's record, where there are several.
    fn tag(&mut self, id: u64, replica: usize) {
        if self.tag_replicas {
            if let Some(rec) = self.records.get_mut(&id) {
                rec.replica = Some(replica as u32);
            }
        }
    }

    /// The autoscaler looks at the fleet and may start or retire replicas.
    fn evaluate(&mut self, now: f64) -> Result<(), String> {
        let s = self
            .scaler
            .as_mut()
            .expect("only a scaler's evaluation is left");
        scale(s, &mut self.fleet, now, &mut self.events, self.config)
    }

    /// Replica `i` runs one step from `t`: its tokens reach their records
    /// (and the clients, a network delay later); the requests it finished
    /// leave, to `on_record` or, prefilled for a decode pool, over the link.
    fn step(&mut self, t: f64, i: usize, on_record: &mut dyn FnMut(RequestRecord)) {
        let delay = self.delay;
        let r = &mut self.fleet[i];
        let prefill_pool = r.role == Role::Prefill;
        let (dt, work) = r.engine.begin_step(t);
        let t_end = t + self.jitter.step(dt).max(1e-6);
        let mut result = r.engine.end_step(work);
        r.steps += 1;
        r.busy += t_end - t;
        r.t = t_end;
        let at = us(t_end) + delay; // when the client has it
        for &(id, generated, done) in &result.emitted {
            self.tokens_total += 1;
            let rec = self
                .records
                .get_mut(&id)
                .expect("emitting requests have records");
            // Tokens a multi-step block hands over together are one chunk.
            match rec.chunks.last_mut() {
                Some(Chunk(last, n)) if *last == at => *n += 1,
                _ => rec.chunks.push(Chunk(at, 1)),
            }
            if done && !(prefill_pool && self.handoffs.wants.contains_key(&id)) {
                rec.done_at_us = at;
                self.traffic.done(id, at, generated as u64);
            }
        }
        for seq in result.finished.drain(..) {
            let wants = self.handoffs.wants.remove(&seq.id).filter(|_| prefill_pool);
            if let Some(wants) = wants {
                // The KV leaves for a decode replica once the step has ended.
                let d = self
                    .load
                    .fleet
                    .disaggregate
                    .expect("a prefill pool is disaggregated");
                let bytes = seq.prompt as f64 * r.engine.cost.kv_bytes_per_token_per_gpu();
                let arrive =
                    t_end + crate::router::KV_TRANSFER_LATENCY_S + bytes / (d.transfer_gbs * 1e9);
                self.handoffs.send(handed_over(&seq, wants, arrive), arrive);
                continue;
            }
            let mut rec = self
                .records
                .remove(&seq.id)
                .expect("finished requests have records");
            settle(&mut rec, &seq, delay);
            on_record(rec);
        }
        r.engine.recycle(result);
        // A retiring replica leaves with its last request.
        if r.retiring && r.engine.is_idle() {
            r.gone_at = Some(t_end);
        }
    }

    /// The engine's summary (the autoscaler's too, where there is one); the
    /// records left unfinished go to `on_record`, by id.
    fn finish(
        self,
        samples: Vec<Sample>,
        end: f64,
        on_record: &mut dyn FnMut(RequestRecord),
    ) -> (Vec<Sample>, EngineSummary) {
        let mut summary = summarize(&self.fleet);
        if let Some(s) = self.scaler {
            let p = s.policy;
            let n = self.fleet.len() as u32;
            summary.autoscale = Some(AutoscaleSummary {
                policy: p.describe(),
                min: p.min,
                max: p.max,
                startup_s: p.startup_s,
                peak_replicas: samples.iter().map(|x| x.replicas).max().unwrap_or(n),
                replica_seconds: self
                    .fleet
                    .iter()
                    .map(|r| (r.gone_at.unwrap_or(end).max(r.started_at) - r.started_at).max(0.0))
                    .sum(),
                events: self.events,
            });
        }
        let mut left: Vec<RequestRecord> = self.records.into_values().collect();
        left.sort_by_key(|r| r.id);
        left.into_iter().for_each(on_record);
        (samples, summary)
    }
}

/// What a replica does: everything, or one side of disaggregated serving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Both,
    Prefill,
    Decode,
}

/// Requests between the pools: the KV of a computed prompt on its way to a
/// decode replica, by arrival; and the output each prefilled request asked.
#[derive(Default)]
struct Handoffs {
    heap: BinaryHeap<Reverse<(u64, u64)>>,
    moving: std::collections::HashMap<u64, Seq, IdHash>,
    wants: std::collections::HashMap<u64, u32, IdHash>,
}

impl Handoffs {
    fn send(&mut self, seq: Seq, arrive: f64) {
        self.heap.push(Reverse((us(arrive), seq.id)));
        self.moving.insert(seq.id, seq);
    }

    fn next_time(&self) -> Option<f64> {
        self.heap.peek().map(|Reverse((t, _))| *t as f64 / 1e6)
    }

    fn due(&mut self, now: f64) -> Option<Seq> {
        let Reverse((t, id)) = *self.heap.peek()?;
        if t > us(now) {
            return None;
        }
        self.heap.pop();
        self.moving.remove(&id)
    }
}

/// The decode side's copy of a prefilled request: its prompt (and first
/// token) computed, its blocks to be allocated when it is admitted; its
/// queueing and cache figures carried over from the prefill side.
fn handed_over(p: &Seq, max_output: u32, arrive: f64) -> Seq {
    let mut s = Seq::new(p.id, p.prompt, max_output, p.arrived_at);
    s.computed = p.prompt;
    s.generated = 1;
    s.cached_tokens = p.cached_tokens;
    s.queue_time = p.queue_time;
    s.queued_at = arrive;
    s.first_scheduled_at = p.first_scheduled_at;
    s.preemptions = p.preemptions;
    s
}

/// The replica of `role` (or one that does both) the router picks at `now`:
/// a new request goes to a prefill replica, a handed-over one to a decode replica.
fn route(
    fleet: &[Replica],
    now: f64,
    role: Role,
    router: crate::router::Router,
    units: &[crate::engine::kv::Unit],
    prompt: u32,
    turn: u64,
) -> usize {
    let serving: Vec<usize> = (0..fleet.len())
        .filter(|&i| {
            fleet[i].serving(now) && (fleet[i].role == role || fleet[i].role == Role::Both)
        })
        .collect();
    let engines: Vec<&Engine> = serving.iter().map(|&i| &fleet[i].engine).collect();
    serving[crate::router::pick(router, &engines, units, prompt, turn)]
}

/// One engine replica and its own clock: when its current step ends (a
/// busy replica steps back to back; an idle one waits for a request).
struct Replica {
    role: Role,
    engine: Engine,
    t: f64,
    steps: u64,
    busy: f64,
    requests: u64,
    /// When it was started (paid for from then) and when it serves.
    started_at: f64,
    ready_at: f64,
    /// Retired by the autoscaler: no new requests; it leaves when idle.
    retiring: bool,
    gone_at: Option<f64>,
}

impl Replica {
    fn new(engine: Engine, ready_at: f64) -> Replica {
        Replica {
            role: Role::Both,
            engine,
            t: ready_at,
            steps: 0,
            busy: 0.0,
            requests: 0,
            started_at: 0.0,
            ready_at,
            retiring: false,
            gone_at: None,
        }
    }

    /// Takes a request at `now` (an idle replica's clock catches up).
    fn take(&mut self, seq: Seq, now: f64) {
        if self.engine.is_idle() {
            self.t = self.t.max(now);
        }
        self.requests += 1;
        self.engine.add(seq);
    }

    /// Routed to at `now`: started, not retiring.
    fn serving(&self, now: f64) -> bool {
        self.ready_at <= now && !self.retiring && self.gone_at.is_none()
    }
}

/// One evaluation of the policy: the metric over the serving replicas;
/// replicas started (ready after their start-up) or one retired (the least
/// busy, never below the minimum).
fn scale(
    s: &mut crate::autoscale::Scaler,
    fleet: &mut Vec<Replica>,
    now: f64,
    events: &mut Vec<crate::autoscale::ScaleEvent>,
    config: &EngineConfig,
) -> Result<(), String> {
    use crate::autoscale::{Decision, Metric, ScaleEvent};
    let metric: f64 = fleet
        .iter()
        .filter(|r| r.serving(now))
        .map(|r| {
            let st = r.engine.state();
            match s.policy.metric {
                Metric::Running => st.running as f64,
                Metric::Waiting => st.waiting as f64,
                Metric::InServer => (st.running + st.waiting) as f64,
            }
        })
        .sum();
    let counted: Vec<usize> = (0..fleet.len())
        .filter(|&i| !fleet[i].retiring && fleet[i].gone_at.is_none())
        .collect();
    let size = counted.len() as u32;
    let (decision, wanted) = s.decide(now, metric, size);
    let why = |what: &str| {
        format!(
            "{what}: {} {metric:.0} over the serving replicas wants {wanted} at target {}",
            s.policy.metric.name(),
            s.policy.target
        )
    };
    match decision {
        Decision::Hold => {}
        Decision::Add(k) => {
            for _ in 0..k {
                let mut r = Replica::new(Engine::new(config.clone())?, now + s.policy.startup_s);
                r.started_at = now;
                fleet.push(r);
            }
            events.push(ScaleEvent {
                t_s: now,
                from: size,
                to: size + k,
                why: why("scale up"),
            });
        }
        Decision::Retire => {
            let quietest = counted
                .iter()
                .copied()
                .filter(|&i| fleet[i].serving(now))
                .min_by_key(|&i| crate::router::outstanding(&fleet[i].engine));
            if let Some(i) = quietest.filter(|_| size > s.policy.min) {
                fleet[i].retiring = true;
                if fleet[i].engine.is_idle() {
                    fleet[i].gone_at = Some(now);
                }
                events.push(ScaleEvent {
                    t_s: now,
                    from: size,
                    to: size - 1,
                    why: why("scale down"),
                });
            }
        }
    }
    Ok(())
}

/// The fleet's state at `t_s`: requests and preemptions summed, KV usage averaged.
fn sample(fleet: &[Replica], t_s: f64, tokens: u64) -> Sample {
    let states: Vec<EngineState> = fleet
        .iter()
        .filter(|r| r.gone_at.is_none_or(|g| g > t_s))
        .map(|r| r.engine.state())
        .collect();
    Sample {
        t_s,
        state: EngineState {
            running: states.iter().map(|s| s.running).sum(),
            waiting: states.iter().map(|s| s.waiting).sum(),
            kv_usage: states.iter().map(|s| s.kv_usage).sum::<f64>() / states.len() as f64,
            preemptions_total: states.iter().map(|s| s.preemptions_total).sum(),
        },
        output_tokens_total: tokens,
        steps_total: fleet.iter().map(|r| r.steps).sum(),
        replicas: fleet.iter().filter(|r| r.serving(t_s)).count() as u32,
    }
}

/// The engines' summary: capacities and counts summed over the replicas,
/// with each replica's own when there are several.
fn summarize(fleet: &[Replica]) -> EngineSummary {
    let first = &fleet[0].engine;
    let limits = first.config.limits();
    let per: Vec<ReplicaSummary> = fleet
        .iter()
        .map(|r| ReplicaSummary {
            role: match r.role {
                Role::Both => None,
                Role::Prefill => Some("prefill"),
                Role::Decode => Some("decode"),
            },
            requests: r.requests,
            steps: r.steps,
            busy_s: r.busy,
            preemptions_total: r.engine.scheduler.preemptions_total,
            prefix_cache_queries_tokens: r.engine.scheduler.kv.queries,
            prefix_cache_hits_tokens: r.engine.scheduler.kv.hits,
        })
        .collect();
    let kv = &first.scheduler.kv;
    let n = fleet.len() as u64;
    EngineSummary {
        kv_capacity_tokens: kv.capacity_tokens() * n,
        kv_blocks: kv.total_blocks * n,
        block_size: kv.block_size,
        max_num_seqs: limits.max_num_seqs,
        max_num_batched_tokens: limits.max_num_batched_tokens,
        steps: per.iter().map(|p| p.steps).sum(),
        busy_s: per.iter().map(|p| p.busy_s).sum(),
        preemptions_total: per.iter().map(|p| p.preemptions_total).sum(),
        prefix_cache_queries_tokens: per.iter().map(|p| p.prefix_cache_queries_tokens).sum(),
        prefix_cache_hits_tokens: per.iter().map(|p| p.prefix_cache_hits_tokens).sum(),
        replicas: if n > 1 { per } else { Vec::new() },
        autoscale: None,
        spec_decode: first.spec_stats().map(|_| {
            let mut all = crate::engine::scheduler::SpecStats::default();
            for s in fleet.iter().filter_map(|r| r.engine.spec_stats()) {
                all.add(s);
            }
            all
        }),
    }
}

/// The noise real systems have, seeded so plans are reproducible. The
/// front end's overlapping cost varies request to request (a gamma of
/// shape 4 around its mean: CV 0.5), and a step's duration by 2 % (kernel
/// timing, launches). Both are assumptions (docs/simulator.md). Neither
/// breaks the lock step of closed-loop users with fixed lengths started
/// together, which real servers keep to differing degrees (docs/simulator.md,
/// "Where it still misses").
struct Jitter {
    rng: rand::rngs::StdRng,
    front_end: rand_distr::Gamma<f64>,
    step: rand_distr::Normal<f64>,
}

/// Spread of a step's duration around the roofline's (relative).
const STEP_NOISE: f64 = 0.02;
/// Shape of the front end's cost distribution (CV = 1/√shape).
const FRONT_END_SHAPE: f64 = 4.0;

impl Jitter {
    fn new(seed: u64) -> Jitter {
        use rand::SeedableRng;
        Jitter {
            rng: rand::rngs::StdRng::seed_from_u64(seed ^ 0x6a69_7474_6572),
            front_end: rand_distr::Gamma::new(FRONT_END_SHAPE, 1.0 / FRONT_END_SHAPE)
                .expect("a positive shape"),
            step: rand_distr::Normal::new(1.0, STEP_NOISE).expect("a finite spread"),
        }
    }

    fn front_end(&mut self, mean_s: f64) -> f64 {
        use rand_distr::Distribution;
        if mean_s <= 0.0 {
            return 0.0;
        }
        mean_s * self.front_end.sample(&mut self.rng)
    }

    fn step(&mut self, dt: f64) -> f64 {
        use rand_distr::Distribution;
        dt * self.step.sample(&mut self.rng).clamp(0.9, 1.1)
    }
}

fn new_record(id: u64, warmup: bool, at_us: u64, input: u64, max_output: u32) -> RequestRecord {
    RequestRecord {
        warmup,
        input_tokens: Some(input),
        input_token_source: Some(TokenSource::ServerUsage),
        requested_input_tokens: Some(input),
        output_token_source: Some(TokenSource::ServerUsage),
        requested_output_tokens: Some(max_output as u64),
        status: Some(200),
        finish_reason: Some("length".into()),
        // One chunk per token: never regrown on the per-token path.
        chunks: Vec::with_capacity(max_output.min(4096) as usize),
        ..RequestRecord::sent(id, at_us, at_us)
    }
}

/// A request longer than the engine takes, refused by the front end as
/// vLLM's API server refuses it (`why`): a 400 the client has back at
/// `done_us`.
fn refuse(rec: &mut RequestRecord, why: String, done_us: u64) {
    rec.status = Some(400);
    rec.finish_reason = None;
    rec.input_token_source = None;
    rec.output_token_source = None;
    rec.reasoning_tokens = None;
    rec.error_kind = Some(ErrorKind::Http(400));
    rec.error = Some(why);
    (rec.first_byte_at_us, rec.done_at_us) = (Some(done_us), done_us);
}

/// The chunk that carries output token `reasoning` (0-based): the answer's first.
fn answer_chunk(chunks: &[Chunk], reasoning: u64) -> Option<&Chunk> {
    let mut seen = 0u64;
    chunks.iter().find(|c| {
        seen += c.tokens() as u64;
        seen > reasoning
    })
}

/// The engine's own view of a finished request, kept beside the client view.
fn settle(rec: &mut RequestRecord, seq: &Seq, delay_us: u64) {
    rec.first_token_at_us = rec.chunks.first().map(Chunk::at_us);
    rec.output_tokens = rec.chunks.iter().map(|c| c.tokens() as u64).sum();
    if let Some(r) = rec.reasoning_tokens {
        // The first token after the thinking: where its chunk arrived.
        rec.first_answer_at_us = answer_chunk(&rec.chunks, r).map(Chunk::at_us);
    }
    rec.cached_tokens = seq.cached_tokens.map(u64::from);
    let first_scheduled = seq.first_scheduled_at.unwrap_or(seq.arrived_at);
    rec.server_timings = Some(serde_json::json!({
        "queue_ms": seq.queue_time * 1e3,
        "prefill_ms": rec.first_token_at_us.map(|f| (f - delay_us) as f64 / 1e3 - first_scheduled * 1e3),
        "preemptions": seq.preemptions,
    }));
}
