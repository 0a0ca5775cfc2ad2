//! `sim plan`: the engine on a virtual clock. Discrete events — arrivals and
//! step completions — so an hour of traffic takes a second. The output is the
//! same per-request records a real run writes, plus the engine's time series.

use crate::engine::kv::{self, Unit};
use crate::engine::scheduler::Seq;
use crate::engine::{Engine, EngineConfig, EngineState};
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use tokenscope_core::record::{Chunk, RequestRecord, TokenSource};
use tokenscope_load::arrival::{LoadPattern, Schedule};
use tokenscope_load::workload::Workload;

/// The load to simulate (the same notions as `bench`).
#[derive(Debug, Clone)]
pub struct PlanLoad {
    pub pattern: LoadPattern,
    /// Measured requests (`None`: until `duration_s`).
    pub requests: Option<u64>,
    pub duration_s: Option<f64>,
    pub warmup: u64,
    /// Closed loop: spread the clients' first requests over this long.
    pub ramp_up_s: Option<f64>,
    pub workload: Workload,
    pub seed: u64,
    /// One-way network delay between client and server (request and every
    /// token). A closed-loop client's next request therefore reaches the
    /// engine after its next step has begun, and waits for it, as in real life.
    pub network_delay_s: f64,
    /// Replay: request `id` gets these (input, output) lengths instead of the
    /// workload's draw (from a measured run's records). Requests past its end
    /// fall back to the workload.
    pub trace: Option<Vec<(u64, u64)>>,
}

/// One-way delay `sim plan` assumes: a client in the same data centre.
pub const DEFAULT_NETWORK_DELAY_S: f64 = 0.0005;

/// One sample of the engine's state (virtual seconds since the start).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sample {
    pub t_s: f64,
    #[serde(flatten)]
    pub state: EngineState,
    pub output_tokens_total: u64,
    pub steps_total: u64,
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
}

pub struct PlanOutput {
    pub records: Vec<RequestRecord>,
    pub samples: Vec<Sample>,
    pub summary: EngineSummary,
}

/// Request ids are already well spread: hashing them is wasted work on the
/// per-token path (the map is looked up once per generated token).
type IdHash = std::hash::BuildHasherDefault<IdHasher>;

#[derive(Default)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        // Spread sequential ids over the table's buckets (Fibonacci hashing).
        self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | b as u64;
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

fn us(t: f64) -> u64 {
    (t * 1e6).round() as u64
}

/// Arrivals still to come, earliest first (ties by id).
struct Arrivals {
    heap: BinaryHeap<Reverse<(u64, u64)>>, // (time µs, id)
    open: Option<(Schedule, u64)>,         // open loop: the schedule and the next id
}

impl Arrivals {
    fn next_time(&mut self) -> Option<u64> {
        self.heap.peek().map(|Reverse((t, _))| *t)
    }
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
    let mut engine = Engine::new(config.clone())?;
    let total = load.requests.map(|n| n + load.warmup);
    let deadline_us = load.duration_s.map(us);
    let allowed =
        |id: u64, at_us: u64| total.is_none_or(|t| id < t) && deadline_us.is_none_or(|d| at_us < d);
    let block_size = engine.scheduler.kv.block_size;
    // The shared prefixes' units, one list per prefix group, made once.
    let mut shared: std::collections::HashMap<u64, std::sync::Arc<[Unit]>> = Default::default();

    let mut arrivals = Arrivals {
        heap: BinaryHeap::new(),
        open: None,
    };
    let mut next_id = 0u64;
    match load.pattern {
        LoadPattern::Closed { concurrency } => {
            for c in 0..concurrency as u64 {
                let at = load
                    .ramp_up_s
                    .map_or(0, |r| us(r * c as f64 / concurrency as f64));
                if allowed(next_id, at) {
                    arrivals.heap.push(Reverse((at, next_id)));
                    next_id += 1;
                }
            }
        }
        LoadPattern::Open {
            rate,
            process,
            max_concurrency,
        } => {
            if max_concurrency.is_some() {
                return Err(
                    "--max-concurrency is not simulated; use --concurrency or --rate alone".into(),
                );
            }
            let mut schedule = Schedule::for_load(rate, process, load.seed, &load.workload);
            if let Some(first) = schedule.next() {
                if allowed(0, us(first.as_secs_f64())) {
                    arrivals.heap.push(Reverse((us(first.as_secs_f64()), 0)));
                    next_id = 1;
                }
            }
            arrivals.open = Some((schedule, next_id));
        }
    }

    let delay = us(load.network_delay_s);
    let mut records: std::collections::HashMap<u64, RequestRecord, IdHash> = Default::default();
    let mut samples = Vec::new();
    let mut next_sample = 0.0;
    let (mut steps, mut busy, mut tokens_total) = (0u64, 0.0f64, 0u64);
    let mut t = 0.0f64;

    loop {
        if engine.is_idle() {
            // Nothing to do: jump to the next arrival, or stop.
            match arrivals.next_time() {
                None => break,
                Some(sent) => t = t.max((sent + delay) as f64 / 1e6),
            }
        }
        // Everything that arrived by `t` joins the queue before the next step.
        while arrivals
            .next_time()
            .is_some_and(|sent| sent + delay <= us(t))
        {
            let Reverse((sent, id)) = arrivals.heap.pop().expect("peeked");
            let at = sent + delay;
            let (input, output) = match load.trace.as_ref().and_then(|t| t.get(id as usize)) {
                Some(&(i, o)) => (i, Some(o)),
                None => load.workload.lengths(id),
            };
            let max_output = output.unwrap_or(256) as u32;
            let mut seq = Seq::new(id, input as u32, max_output, at as f64 / 1e6);
            seq.units = match trace_blocks(&load.workload, id) {
                Some(hash_ids) => mooncake_units(hash_ids, input, block_size).into(),
                None => {
                    let key = load.workload.prefix_key(id);
                    let prefix = load.workload.shared_prefix;
                    let units = shared
                        .entry(key)
                        .or_insert_with(|| kv::shared_prefix_units(key, prefix, block_size).into());
                    units.clone()
                }
            };
            engine.add(seq);
            let mut rec = new_record(id, id < load.warmup, sent, input, max_output);
            rec.first_byte_at_us = Some(sent + 2 * delay);
            records.insert(id, rec);
            if let Some((schedule, open_next)) = arrivals.open.as_mut() {
                if let Some(when) = schedule.next() {
                    let when = us(when.as_secs_f64());
                    if allowed(*open_next, when) {
                        arrivals.heap.push(Reverse((when, *open_next)));
                        *open_next += 1;
                    }
                }
            }
        }
        let (dt, work) = engine.begin_step(t);
        let t_end = t + dt.max(1e-6);
        let result = engine.end_step(work);
        steps += 1;
        busy += t_end - t;
        let at = us(t_end) + delay; // when the client has it
        for &(id, _generated, done) in &result.emitted {
            tokens_total += 1;
            let rec = records
                .get_mut(&id)
                .expect("emitting requests have records");
            rec.chunks.push(Chunk(at, 1));
            if done {
                rec.done_at_us = at;
                if let LoadPattern::Closed { .. } = load.pattern {
                    if allowed(next_id, at) {
                        arrivals.heap.push(Reverse((at, next_id)));
                        next_id += 1;
                    }
                }
            }
        }
        for seq in result.finished {
            let mut rec = records
                .remove(&seq.id)
                .expect("finished requests have records");
            settle(&mut rec, &seq, delay);
            on_record(rec);
        }
        while t_end >= next_sample {
            samples.push(Sample {
                t_s: next_sample,
                state: engine.state(),
                output_tokens_total: tokens_total,
                steps_total: steps,
            });
            next_sample += sample_every_s;
        }
        t = t_end;
    }

    let kv = &engine.scheduler.kv;
    let limits = engine.config.limits();
    let summary = EngineSummary {
        kv_capacity_tokens: kv.capacity_tokens(),
        kv_blocks: kv.total_blocks,
        block_size: kv.block_size,
        max_num_seqs: limits.max_num_seqs,
        max_num_batched_tokens: limits.max_num_batched_tokens,
        steps,
        busy_s: busy,
        preemptions_total: engine.scheduler.preemptions_total,
        prefix_cache_queries_tokens: kv.queries,
        prefix_cache_hits_tokens: kv.hits,
    };
    let mut left: Vec<RequestRecord> = records.into_values().collect();
    left.sort_by_key(|r| r.id);
    left.into_iter().for_each(on_record);
    Ok((samples, summary))
}

/// The Mooncake `hash_ids` of request `id`, when the workload is such a trace.
fn trace_blocks(workload: &Workload, id: u64) -> Option<&[u64]> {
    use tokenscope_load::dataset::Prompt;
    match &workload.dataset.as_ref()?.entry(id).prompt {
        Prompt::Blocks { hash_ids, .. } => Some(hash_ids),
        _ => None,
    }
}

/// A Mooncake prompt as the prefix cache knows it: one unit per whole
/// 512-token block, keyed by the chain of hash ids up to it (equal chains,
/// equal prompts: `bench` builds block `h` from `h` alone), then the whole
/// engine blocks of a last, partial one. Reuse is thus found per 512-token
/// block where the engine finds it per 16-token block; the two differ only
/// for a partial block met again whole (counted a miss here).
pub fn mooncake_units(hash_ids: &[u64], input: u64, block_size: u32) -> Vec<Unit> {
    use tokenscope_load::dataset::MOONCAKE_BLOCK;
    let mut units = Vec::with_capacity(hash_ids.len());
    let (mut key, mut left) = (0u64, input);
    for &h in hash_ids {
        key = kv::chain(key, h);
        let tokens = left.min(MOONCAKE_BLOCK);
        let whole = (tokens as u32 / block_size) * block_size;
        if whole == 0 {
            break;
        }
        if tokens < MOONCAKE_BLOCK {
            units.push(Unit {
                key: kv::chain(key, 0x7061_7274 ^ whole as u64),
                tokens: whole,
            });
            break;
        }
        units.push(Unit { key, tokens: whole });
        left -= tokens;
    }
    units
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

/// The engine's own view of a finished request, kept beside the client view.
fn settle(rec: &mut RequestRecord, seq: &Seq, delay_us: u64) {
    rec.first_token_at_us = rec.chunks.first().map(Chunk::at_us);
    rec.output_tokens = rec.chunks.len() as u64;
    rec.cached_tokens = seq.cached_tokens.map(u64::from);
    let first_scheduled = seq.first_scheduled_at.unwrap_or(seq.arrived_at);
    rec.server_timings = Some(serde_json::json!({
        "queue_ms": seq.queue_time * 1e3,
        "prefill_ms": rec.first_token_at_us.map(|f| (f - delay_us) as f64 / 1e3 - first_scheduled * 1e3),
        "preemptions": seq.preemptions,
    }));
}
