//! What reaches the simulated engine and when, on `sim plan`'s virtual
//! clock — the same notions as `bench`'s load loop. A closed loop's user
//! sends again when the last answer is back; an open loop follows its
//! arrival schedule; with `--multi-turn` a session's next turn follows its
//! last answer after the think time and carries the whole conversation, so
//! its prompt is the last prompt, the answer and a new message.

use crate::engine::kv::{self, Unit};
use crate::load::{us, IdHash, PlanLoad};
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use tokenscope_workload::arrival::{LoadPattern, Schedule};
use tokenscope_workload::workload::Workload;

/// One request as it leaves the client.
pub struct Arrival {
    pub id: u64,
    pub sent_us: u64,
    pub input: u64,
    /// Output tokens, the reasoning among them.
    pub max_output: u32,
    /// The first this many output tokens are reasoning.
    pub reasoning: u32,
    /// Multi-turn: (session, turn).
    pub turn: Option<(u64, u32)>,
    /// Its prompt and answer as the prefix cache knows them.
    pub units: Arc<[Unit]>,
}

/// A session's turn waiting to be sent: its conversation so far.
#[derive(Clone, Copy)]
struct Turn {
    session: u64,
    turn: u32,
    /// Tokens of the earlier turns' prompts and answers.
    context: u64,
}

/// A running session's own state.
struct Session {
    turns: u32,
    think: StdRng,
}

pub struct Traffic<'a> {
    load: &'a PlanLoad,
    heap: BinaryHeap<Reverse<(u64, u64)>>,
    /// Open loop: the schedule of (session) starts.
    schedule: Option<Schedule>,
    next_id: u64,
    next_session: u64,
    /// Requests that are session turns, by request id, until they are sent.
    turns: HashMap<u64, Turn, IdHash>,
    sessions: HashMap<u64, Session, IdHash>,
    /// Sent turns by request id, until they are done.
    in_flight: HashMap<u64, (Turn, u64), IdHash>,
    block_size: u32,
    /// The shared prefixes' units, one list per prefix group, made once.
    shared: HashMap<u64, Arc<[Unit]>>,
}

/// Output length when neither the workload nor a trace says (the engine server's default).
const DEFAULT_OUTPUT: u64 = 256;

impl<'a> Traffic<'a> {
    /// The first arrivals: every closed-loop user's (spread over the ramp),
    /// or the schedule's first.
    pub fn start(load: &'a PlanLoad, block_size: u32) -> Result<Traffic<'a>, String> {
        let mut t = Traffic {
            load,
            heap: BinaryHeap::new(),
            schedule: None,
            next_id: 0,
            next_session: 0,
            turns: HashMap::default(),
            sessions: HashMap::default(),
            in_flight: HashMap::default(),
            block_size,
            shared: HashMap::new(),
        };
        match load.pattern {
            LoadPattern::Closed { concurrency } => {
                for c in 0..concurrency as u64 {
                    let at = load
                        .ramp_up_s
                        .map_or(0, |r| us(r * c as f64 / concurrency as f64));
                    t.begin(at);
                }
            }
            LoadPattern::Open {
                rate,
                process,
                max_concurrency,
            } => {
                if max_concurrency.is_some() {
                    return Err(
                        "--max-concurrency is not simulated; use --concurrency or --rate alone"
                            .into(),
                    );
                }
                t.schedule = Some(Schedule::for_load(rate, process, load.seed, &load.workload));
                t.next_scheduled();
            }
        }
        Ok(t)
    }

    fn multi_turn(&self) -> bool {
        self.load.workload.multi_turn.is_some()
    }

    fn allowed(&self, id: u64, at_us: u64) -> bool {
        let total = self.load.requests.map(|n| n + self.load.warmup);
        total.is_none_or(|t| id < t) && self.load.duration_s.is_none_or(|d| at_us < us(d))
    }

    /// A user starts at `at_us`: a request, or a session's first turn.
    fn begin(&mut self, at_us: u64) {
        if !self.multi_turn() {
            self.push(at_us, None);
            return;
        }
        let s = self.next_session;
        if self.load.sessions.is_some_and(|n| s >= n) {
            return;
        }
        self.next_session += 1;
        let w = &self.load.workload;
        let think = StdRng::seed_from_u64(self.load.seed ^ s.rotate_left(32));
        let session = Session {
            turns: w.session_turns(s),
            think,
        };
        if session.turns == 0 {
            return;
        }
        self.sessions.insert(s, session);
        let first = Turn {
            session: s,
            turn: 0,
            context: 0,
        };
        self.push(at_us, Some(first));
    }

    fn push(&mut self, at_us: u64, turn: Option<Turn>) {
        let id = self.next_id;
        if !self.allowed(id, at_us) {
            if let Some(t) = turn {
                self.sessions.remove(&t.session);
            }
            return;
        }
        self.next_id += 1;
        self.heap.push(Reverse((at_us, id)));
        if let Some(t) = turn {
            self.turns.insert(id, t);
        }
    }

    /// The open loop's next start, from its schedule.
    fn next_scheduled(&mut self) {
        if let Some(when) = self.schedule.as_mut().and_then(Iterator::next) {
            self.begin(us(when.as_secs_f64()));
        }
    }

    /// When the next request leaves, if any is to come.
    pub fn next_time(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse((t, _))| *t)
    }

    /// The next request to leave (call after [`Traffic::next_time`]).
    pub fn pop(&mut self) -> Option<Arrival> {
        let Reverse((sent_us, id)) = self.heap.pop()?;
        // The schedule starts requests (or sessions): its next start is
        // taken when one leaves, not when a session's later turn does.
        let a_start = self.turns.get(&id).is_none_or(|t| t.turn == 0);
        if self.schedule.is_some() && a_start {
            self.next_scheduled();
        }
        let arrival = match self.turns.remove(&id) {
            Some(turn) => self.turn_arrival(id, sent_us, turn),
            None => self.single_arrival(id, sent_us),
        };
        Some(arrival)
    }

    fn single_arrival(&mut self, id: u64, sent_us: u64) -> Arrival {
        let (load, bs) = (self.load, self.block_size);
        let (input, output) = match load.trace.as_ref().and_then(|t| t.get(id as usize)) {
            Some(&(i, o)) => (i, Some(o)),
            None => load.workload.lengths(id),
        };
        let units = match trace_blocks(&load.workload, id) {
            Some(hash_ids) => mooncake_units(hash_ids, input, bs).into(),
            None => {
                let key = load.workload.prefix_key(id);
                let prefix = load.workload.shared_prefix;
                let units = self
                    .shared
                    .entry(key)
                    .or_insert_with(|| kv::shared_prefix_units(key, prefix, bs).into());
                units.clone()
            }
        };
        let reasoning = self.reasoning(id);
        let answer = output.unwrap_or(DEFAULT_OUTPUT).min(u32::MAX as u64) as u32;
        Arrival {
            id,
            sent_us,
            input,
            max_output: answer.saturating_add(reasoning),
            reasoning,
            turn: None,
            units,
        }
    }

    /// Request `id`'s reasoning tokens (0 without `--reasoning-tokens`).
    fn reasoning(&self, id: u64) -> u32 {
        let Some(spec) = self.load.reasoning else {
            return 0;
        };
        let mut rng = StdRng::seed_from_u64(
            self.load.seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x7265_6173,
        );
        spec.sample(&mut rng).min(u32::MAX as u64 / 2) as u32
    }

    fn turn_arrival(&mut self, id: u64, sent_us: u64, turn: Turn) -> Arrival {
        let w = &self.load.workload;
        let (user, output) = w.turn_lengths(turn.session, turn.turn);
        let input = turn.context + user;
        let reasoning = self.reasoning(id);
        let max_output = output.unwrap_or(DEFAULT_OUTPUT).min(u32::MAX as u64) as u32 + reasoning;
        self.in_flight.insert(id, (turn, input));
        Arrival {
            id,
            sent_us,
            input,
            max_output,
            reasoning,
            turn: Some((turn.session, turn.turn)),
            units: session_units(w, turn.session, input + max_output as u64, self.block_size)
                .into(),
        }
    }

    /// Request `id` failed (as the client has it at `at_us`): a session
    /// cannot go on without its answer and ends; a closed-loop user sends
    /// again.
    pub fn failed(&mut self, id: u64, at_us: u64) {
        if let Some((turn, _)) = self.in_flight.remove(&id) {
            self.sessions.remove(&turn.session);
        }
        if matches!(self.load.pattern, LoadPattern::Closed { .. }) {
            self.begin(at_us);
        }
    }

    /// Request `id`'s answer ended (as the client has it) at `at_us` after
    /// `output` tokens: a closed-loop user sends again, a session's next
    /// turn is due after the think time.
    pub fn done(&mut self, id: u64, at_us: u64, output: u64) {
        let closed = matches!(self.load.pattern, LoadPattern::Closed { .. });
        let Some((turn, input)) = self.in_flight.remove(&id) else {
            if closed {
                self.begin(at_us);
            }
            return;
        };
        let next = match self.sessions.get_mut(&turn.session) {
            Some(s) if turn.turn + 1 < s.turns => {
                let think = self.load.workload.multi_turn.as_ref().map(|m| m.think_time);
                let pause = think.unwrap_or_default().sample(&mut s.think);
                Some(at_us + pause.as_micros() as u64)
            }
            _ => None,
        };
        match next {
            Some(at) => {
                let following = Turn {
                    session: turn.session,
                    turn: turn.turn + 1,
                    context: input + output,
                };
                self.push(at, Some(following));
            }
            None => {
                self.sessions.remove(&turn.session);
                if closed {
                    self.begin(at_us);
                }
            }
        }
    }
}

/// A session's tokens as the prefix cache knows them: the conversation is
/// one stream (message, answer, message, …) that every turn extends, so its
/// `j`-th block is the same in every turn that holds it. The first turn's
/// shared prefix (its group's) is named apart, so sessions share it.
fn session_units(w: &Workload, session: u64, tokens: u64, block_size: u32) -> Vec<Unit> {
    let bs = block_size as u64;
    let prefix_blocks = w.shared_prefix / bs;
    let group = w.prefix_key(session);
    let own = kv::chain(w.seed, session ^ 0x7365_7373);
    (0..tokens / bs)
        .map(|j| Unit {
            key: match j < prefix_blocks {
                true => kv::chain(group, j),
                false => kv::chain(own, j),
            },
            tokens: block_size,
        })
        .collect()
}

/// The Mooncake `hash_ids` of request `id`, when the workload is such a trace.
fn trace_blocks(workload: &Workload, id: u64) -> Option<&[u64]> {
    use tokenscope_workload::dataset::Prompt;
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
    use tokenscope_workload::dataset::MOONCAKE_BLOCK;
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
