//! The load loop. Closed loop: N workers, each sends its next request the
//! moment the previous one ends. Open loop: an arrival thread keeps the
//! schedule (tokio's timer has 1 ms resolution; a thread's sleep is finer) and
//! the runtime sends each request when its time comes, whatever the server does.

use crate::recorder::RecordSink;
use crate::request::{execute, Target, Ticket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokenscope_core::clock::Clock;
use tokenscope_core::record::ErrorKind;
use tokenscope_core::record::RequestRecord;
use tokenscope_workload::arrival::{LoadPattern, Schedule};
use tokenscope_workload::session::{Exchange, ToolExchange};
use tokenscope_workload::workload::{PromptSpec, Workload};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// What to send and when to stop.
#[derive(Debug, Clone)]
pub struct RunPlan {
    pub pattern: LoadPattern,
    /// Measured requests (warm-up not included). `None`: until `duration`.
    pub requests: Option<u64>,
    /// Stop starting requests after this long; those in flight finish.
    pub duration: Option<Duration>,
    /// Requests sent first and excluded from results.
    pub warmup: u64,
    /// Closed loop: start the workers evenly over this long instead of all at once.
    pub ramp_up: Option<Duration>,
    pub workload: Workload,
    /// Seeds the arrival process (the workload has its own).
    pub seed: u64,
    /// A shard's share of the whole run's schedule (`--shard I/N`, open
    /// loop): every N-th arrival of the whole schedule, from arrival I.
    pub share: Option<tokenscope_workload::arrival::ScheduleShare>,
    /// Multi-turn: start at most this many sessions (a dataset's sessions
    /// each once); `requests` and `duration` still bound the run.
    pub sessions: Option<u64>,
}

impl RunPlan {
    fn total(&self) -> Option<u64> {
        self.requests.map(|n| n + self.warmup)
    }

    fn multi_turn(&self) -> bool {
        self.workload.multi_turn.is_some()
    }

    /// Requests come in units of several (sessions, workflows): an arrival
    /// starts one, and its requests take ids as they go.
    fn in_units(&self) -> bool {
        self.multi_turn() || self.workload.workflows.is_some()
    }

    /// A single request's ticket: request `id`, due at `at_us` (warm-up
    /// while its id is within `--warmup`), `waited` for a free slot or not.
    fn ticket(&self, id: u64, at_us: u64, waited: bool) -> Ticket {
        Ticket {
            id,
            scheduled_at_us: at_us,
            warmup: id < self.warmup,
            waited_for_slot: waited,
            turn: None,
        }
    }
}

/// What a finished request tells the session it is a turn of.
pub(crate) struct Outcome {
    /// When it was done (µs on the run's clock): a closed loop's slot came free then.
    done_at_us: u64,
    /// The whole prompt's tokens and the answer's, its reasoning left out
    /// (the next turn's context).
    prompt_tokens: u64,
    output_tokens: u64,
    /// The answer's text, when the request succeeded.
    pub(crate) answer: Option<String>,
    /// The tool calls it made (with --tools).
    calls: Vec<tokenscope_core::record::ToolCallMade>,
}

/// The request of a turn that goes on from the last exchange's tool
/// results: no user message (an empty prompt), its tokens the results',
/// its length the turn's own.
fn results_turn(history: &[Exchange], max_tokens: Option<u64>) -> PromptSpec {
    let results = history.last().map_or(&[][..], |e| e.calls.as_slice());
    let words: u64 = results
        .iter()
        .map(|c| c.result.split_whitespace().count() as u64)
        .sum();
    PromptSpec {
        prompt: String::new(),
        input_tokens: words,
        max_tokens,
        documents: Vec::new(),
        media: Vec::new(),
        tools: None,
        expected: None,
    }
}

/// A session's figures as its turns finish, and its latest record, held
/// until the session knows whether it was the last (which carries them).
#[derive(Default)]
struct SessionTally {
    held: Option<RequestRecord>,
    end: tokenscope_core::record::SessionEnd,
    first_sent_us: Option<u64>,
}

impl SessionTally {
    /// Takes a turn's record (held); `after_tools`: it went on from tool results.
    fn took(&mut self, rec: RequestRecord, after_tools: bool) {
        let e = &mut self.end;
        e.requests += 1;
        e.tool_rounds += u32::from(after_tools);
        e.server_us += rec.done_at_us.saturating_sub(rec.sent_at_us);
        e.tool_us += rec.tool_wait_us.unwrap_or(0);
        let first = *self.first_sent_us.get_or_insert(rec.sent_at_us);
        e.e2e_us = rec.done_at_us.saturating_sub(first);
        self.held = Some(rec);
    }

    /// Another turn follows: the held record was not the last.
    fn sink_held(&mut self, sink: &RecordSink) {
        if let Some(r) = self.held.take() {
            sink.record(r);
        }
    }

    /// The session is over: its last record carries its figures.
    fn finish(mut self, sink: &RecordSink) {
        if let Some(mut r) = self.held.take() {
            r.session_end = Some(self.end);
            sink.record(r);
        }
    }
}

/// One request: its ticket, and for a session's turn the user message and the history.
type Turn<'a> = Option<(PromptSpec, &'a [Exchange])>;

/// Live counters for progress displays.
#[derive(Debug, Default)]
pub struct Progress {
    pub sent: AtomicU64,
    pub finished: AtomicU64,
    pub failed: AtomicU64,
    pub output_tokens: AtomicU64,
    /// Content chunks received so far, requests in flight included.
    pub streamed_chunks: AtomicU64,
    /// Requests whose first content chunk has come (counted as it comes) …
    pub first_chunks: AtomicU64,
    /// … and the µs they waited for it, in all (the live TTFT of the
    /// requests answering, before they finish).
    pub first_chunk_wait_us: AtomicU64,
    /// Finished requests that never had a first chunk (failed before one,
    /// or answered whole).
    pub ended_unstreamed: AtomicU64,
    /// Content chunks of the finished requests (whose tokens are counted).
    pub finished_chunks: AtomicU64,
    /// Latency and errors of the requests finished so far (warm-up included).
    pub live: std::sync::Mutex<LiveLatency>,
    /// The open loop's arrival thread failed (panicked): the schedule broke off.
    pub arrival_failed: std::sync::atomic::AtomicBool,
}

/// TTFT and TPOT so far (µs, HDR) and failures by kind, for the live view;
/// the results are computed from the records, not from these.
#[derive(Debug)]
pub struct LiveLatency {
    pub ttft_us: hdrhistogram::Histogram<u64>,
    pub tpot_us: hdrhistogram::Histogram<u64>,
    /// The time to the first answer token (TTFT for a request that did not
    /// reason); shown once `reasoned`.
    pub answer_start_us: hdrhistogram::Histogram<u64>,
    /// Some finished request reasoned.
    pub reasoned: bool,
    pub errors: std::collections::BTreeMap<String, u64>,
}

impl Default for LiveLatency {
    fn default() -> Self {
        // Fixed bounds (1 µs … 1 h): saturating_record on an auto-resizing
        // histogram clamps to its current (tiny) range instead of growing.
        let h = || {
            hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000, 3)
                .expect("valid bounds and precision")
        };
        LiveLatency {
            ttft_us: h(),
            tpot_us: h(),
            answer_start_us: h(),
            reasoned: false,
            errors: Default::default(),
        }
    }
}

impl Progress {
    /// Output tokens so far, for the live view: the chunks streamed so far
    /// times the tokens a chunk carried in the finished requests (1 until
    /// one finishes). Counting only finished requests instead made the live
    /// tokens/s jump in waves when answers take seconds; the results count
    /// tokens exactly, from the records.
    pub fn live_output_tokens(&self) -> u64 {
        let streamed = self.streamed_chunks.load(Ordering::Relaxed);
        let tokens = self.output_tokens.load(Ordering::Relaxed);
        match self.finished_chunks.load(Ordering::Relaxed) {
            // Nothing streamed (non-streaming answers): the finished count.
            0 => tokens.max(streamed),
            chunks => (streamed as f64 * tokens as f64 / chunks as f64).round() as u64,
        }
    }

    /// Requests sent that wait for a first token: neither answering nor
    /// ended. An open loop's growing queue shows here first
    /// (`--stop-on saturation`).
    pub fn waiting(&self) -> u64 {
        let sent = self.sent.load(Ordering::Relaxed);
        let answering = self.first_chunks.load(Ordering::Relaxed);
        let ended = self.ended_unstreamed.load(Ordering::Relaxed);
        sent.saturating_sub(answering + ended)
    }

    fn finished(&self, r: &RequestRecord) {
        self.finished.fetch_add(1, Ordering::Relaxed);
        if r.first_token_at_us.is_none() {
            self.ended_unstreamed.fetch_add(1, Ordering::Relaxed);
        }
        if r.failed() {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
        self.output_tokens
            .fetch_add(r.output_tokens, Ordering::Relaxed);
        self.finished_chunks
            .fetch_add(r.chunks.len() as u64, Ordering::Relaxed);
        if let Ok(mut live) = self.live.lock() {
            match r.error_kind {
                Some(kind) => *live.errors.entry(kind.to_string()).or_default() += 1,
                None => {
                    if let Some(t) = r.ttft_us() {
                        live.ttft_us.saturating_record(t);
                    }
                    if let Some(t) = r.tpot_us() {
                        live.tpot_us.saturating_record(t as u64);
                    }
                    live.reasoned |= r.reasoning_tokens.is_some();
                    if let Some(t) = r.answer_start_or_ttft_us() {
                        live.answer_start_us.saturating_record(t);
                    }
                }
            }
        }
    }
}

/// Shared by every request task.
pub struct Runner {
    pub target: Target,
    pub clock: Clock,
    pub sink: RecordSink,
    pub cancel: CancellationToken,
    pub progress: Arc<Progress>,
    /// Fault injection for the tests (`TOKENSCOPE_FAULT_PANIC_REQUEST=ID`):
    /// the request with this id panics in its task.
    pub panic_at: Option<u64>,
}

impl Runner {
    /// Runs the plan to its end or to cancellation. Every request that was sent
    /// is recorded (cancelled ones as `cancelled`) before this returns.
    pub async fn run(self: Arc<Self>, plan: &RunPlan) {
        let deadline = plan.duration.map(|d| self.clock.origin() + d);
        match plan.pattern {
            LoadPattern::Closed { concurrency } => self.closed(plan, concurrency, deadline).await,
            LoadPattern::Open {
                rate,
                process,
                max_concurrency,
            } => {
                let schedule = match plan.share {
                    Some(share) => Schedule::shared(process, share),
                    None => Schedule::for_load(rate, process, plan.seed, &plan.workload),
                };
                self.open(plan, schedule, max_concurrency, deadline).await
            }
        }
    }

    /// One request, recorded whatever happens: a panic in its task (a bug
    /// of ours) is caught and recorded as an `internal` error. `turn`: a
    /// session's turn (else the workload's request `ticket.id`).
    async fn one(&self, plan: &RunPlan, ticket: Ticket, turn: Turn<'_>) -> Outcome {
        let (rec, outcome) = self.attempt(plan, ticket, turn).await;
        self.sink.record(rec);
        outcome
    }

    /// One request to its record, not yet recorded (a session holds its
    /// turn's record until it knows whether it was the last).
    pub(crate) async fn attempt(
        &self,
        plan: &RunPlan,
        ticket: Ticket,
        turn: Turn<'_>,
    ) -> (RequestRecord, Outcome) {
        use futures_util::FutureExt;
        self.progress.sent.fetch_add(1, Ordering::Relaxed);
        let (id, scheduled, warmup) = (ticket.id, ticket.scheduled_at_us, ticket.warmup);
        let attempt = async {
            if self.panic_at == Some(ticket.id) {
                panic!("injected by TOKENSCOPE_FAULT_PANIC_REQUEST");
            }
            let (spec, history) = match turn {
                Some((spec, history)) => (spec, history),
                None => (
                    plan.workload.batch(ticket.id, self.target.documents),
                    &[][..],
                ),
            };
            execute(
                &self.target,
                &self.clock,
                ticket,
                (&spec, history),
                &self.cancel,
                crate::request::Streamed {
                    chunks: &self.progress.streamed_chunks,
                    answering: &self.progress.first_chunks,
                    answer_wait_us: &self.progress.first_chunk_wait_us,
                },
            )
            .await
        };
        let (mut rec, answer) = match std::panic::AssertUnwindSafe(attempt).catch_unwind().await {
            Ok(settled) => settled,
            Err(panic) => {
                let why = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic".into());
                let mut rec = RequestRecord::sent(id, scheduled, self.clock.now_us());
                rec.warmup = warmup;
                rec.error_kind = Some(ErrorKind::Internal);
                rec.error = Some(format!("internal error in tokenscope: {why}"));
                (rec, String::new())
            }
        };
        if let Some((s, t)) = ticket.turn {
            (rec.session, rec.turn) = (Some(s), Some(t));
        }
        self.progress.finished(&rec);
        let outcome = Outcome {
            done_at_us: rec.done_at_us,
            prompt_tokens: rec.input_tokens.unwrap_or(0),
            // What the next turn carries back: the answer, not its reasoning.
            output_tokens: rec
                .output_tokens
                .saturating_sub(rec.reasoning_tokens.unwrap_or(0)),
            answer: rec.succeeded().then_some(answer),
            calls: rec.tool_calls.clone(),
        };
        (rec, outcome)
    }

    /// Session `s`, turn by turn from `intended` (µs): each turn carries the
    /// answers so far and leaves a think time after the last answer. An
    /// answer that calls tools (`--tools`) is followed, after the tools' run
    /// time, by a turn carrying their results, up to `--max-tool-rounds`.
    /// Ends after its last turn, a failed turn (the conversation cannot go
    /// on), the request budget, the deadline or cancellation; its last
    /// record carries the session's figures. Returns when its last turn was
    /// done.
    async fn session(
        &self,
        plan: &RunPlan,
        s: u64,
        next_id: &AtomicU64,
        mut intended: u64,
        deadline: Option<Instant>,
    ) -> u64 {
        use rand::SeedableRng;
        let w = &plan.workload;
        let (think, tools) = w
            .multi_turn
            .as_ref()
            .map(|m| (m.think_time, m.tools.clone()))
            .unwrap_or_default();
        let mut rng = rand::rngs::StdRng::seed_from_u64(plan.seed ^ s.rotate_left(32));
        let mut history: Vec<Exchange> = Vec::new();
        let mut context = 0u64; // tokens of the history as the server counted them
        let mut tally = SessionTally::default();
        let (mut k, turns, mut round) = (0u32, w.session_turns(s), 0u32);
        let mut tool_wait = None;
        while k < turns {
            let first = history.is_empty();
            if !self.wait_for_turn(first, intended, deadline).await {
                break;
            }
            let id = next_id.fetch_add(1, Ordering::Relaxed);
            if plan.total().is_some_and(|t| id >= t) {
                break;
            }
            // A turn after tool results carries them and no user message.
            let (mut spec, user) = match round {
                0 => {
                    let spec = w.turn(s, k);
                    let user = Some(spec.prompt.clone());
                    (spec, user)
                }
                _ => (results_turn(&history, w.turn_lengths(s, k).1), None),
            };
            spec.input_tokens += context;
            let ticket = Ticket {
                id,
                scheduled_at_us: intended,
                warmup: id < plan.warmup,
                waited_for_slot: false,
                turn: Some((s, k)),
            };
            tally.sink_held(&self.sink);
            let (mut rec, out) = self.attempt(plan, ticket, Some((spec, &history))).await;
            rec.tool_wait_us = tool_wait.take();
            tally.took(rec, round > 0);
            intended = out.done_at_us;
            let Some(assistant) = out.answer else { break };
            context = out.prompt_tokens + out.output_tokens;
            let calls = match round < tools.max_rounds {
                true => self.tool_results(w, s, (k, round), &out.calls),
                false => Vec::new(),
            };
            let called = !calls.is_empty();
            history.push(Exchange {
                user,
                assistant,
                calls,
            });
            if called {
                // The tools run, then the model reads their results.
                let wait = tools.latency.sample(&mut rng).as_micros() as u64;
                (intended, tool_wait, round) = (intended + wait, Some(wait), round + 1);
                continue;
            }
            (k, round) = (k + 1, 0);
            intended += think.sample(&mut rng).as_micros() as u64;
        }
        tally.finish(&self.sink);
        intended
    }

    /// Waits until a turn is due at `intended` (µs; the first turn is sent
    /// at once, its arrival already kept); false when the run was cancelled
    /// or its deadline passed, and the session ends.
    async fn wait_for_turn(&self, first: bool, intended: u64, deadline: Option<Instant>) -> bool {
        if !first {
            let at = self.clock.at(Duration::from_micros(intended));
            tokio::select! {
                _ = self.cancel.cancelled() => return false,
                _ = tokio::time::sleep_until(at.into()) => {}
            }
        }
        !self.cancel.is_cancelled() && deadline.is_none_or(|d| Instant::now() < d)
    }

    /// The results of an answer's tool calls (`--tool-result-tokens` of
    /// words each), for the turn that goes on from them.
    fn tool_results(
        &self,
        w: &tokenscope_workload::workload::Workload,
        s: u64,
        (k, round): (u32, u32),
        calls: &[tokenscope_core::record::ToolCallMade],
    ) -> Vec<ToolExchange> {
        calls
            .iter()
            .enumerate()
            .map(|(i, c)| ToolExchange {
                id: c
                    .id
                    .clone()
                    .unwrap_or_else(|| format!("call_{s}_{k}_{round}_{i}")),
                name: c.name.clone(),
                arguments: c.arguments.clone(),
                result: w.tool_result(s, (k, round, i as u32)).0,
            })
            .collect()
    }

    async fn closed(
        self: Arc<Self>,
        plan: &RunPlan,
        concurrency: usize,
        deadline: Option<Instant>,
    ) {
        let next = Arc::new(AtomicU64::new(0));
        let next_session = Arc::new(AtomicU64::new(0));
        // Every request (or session) handed out: a worker still waiting for
        // its ramp-up slot has nothing left to send.
        let spent = CancellationToken::new();
        let mut workers = JoinSet::new();
        for worker in 0..concurrency {
            let (me, next, plan) = (self.clone(), next.clone(), plan.clone());
            let (next_session, spent) = (next_session.clone(), spent.clone());
            let ramp = plan
                .ramp_up
                .map(|r| r.mul_f64(worker as f64 / concurrency as f64));
            workers.spawn(async move {
                if let Some(offset) = ramp {
                    // The slot, or the deadline if that comes first.
                    let start = me.clock.at(offset);
                    let until = deadline.map_or(start, |d| d.min(start));
                    tokio::select! {
                        _ = me.cancel.cancelled() => return,
                        _ = spent.cancelled() => return,
                        _ = tokio::time::sleep_until(until.into()) => {}
                    }
                }
                // The intended start of a request: when its slot came free —
                // the run's start (or the ramp's slot) for the first, the end
                // of the previous request after that. How late the client
                // actually sent it is its lag, in closed loops too.
                let mut intended = ramp.map_or(0, |d| d.as_micros() as u64);
                loop {
                    if me.cancel.is_cancelled() || deadline.is_some_and(|d| Instant::now() >= d) {
                        break;
                    }
                    if plan.in_units() {
                        // A worker is a user: one session (or workflow) after another.
                        let s = next_session.fetch_add(1, Ordering::Relaxed);
                        let budget_left = plan
                            .total()
                            .is_none_or(|t| next.load(Ordering::Relaxed) < t);
                        if plan.sessions.is_some_and(|n| s >= n) || !budget_left {
                            spent.cancel();
                            break;
                        }
                        intended = match plan.multi_turn() {
                            true => me.session(&plan, s, &next, intended, deadline).await,
                            false => me.workflow(&plan, s, &next, intended, deadline).await,
                        };
                        continue;
                    }
                    let id = next.fetch_add(1, Ordering::Relaxed);
                    if plan.total().is_some_and(|t| id >= t) {
                        spent.cancel();
                        break;
                    }
                    let ticket = plan.ticket(id, intended, false);
                    intended = me.one(&plan, ticket, None).await.done_at_us;
                }
            });
        }
        while workers.join_next().await.is_some() {}
    }

    async fn open(
        self: Arc<Self>,
        plan: &RunPlan,
        schedule: Schedule,
        max_concurrency: Option<usize>,
        deadline: Option<Instant>,
    ) {
        // Multi-turn: an arrival starts a session, and the sessions' turns
        // take request ids as they go.
        let arrivals_cap = match plan.in_units() {
            true => plan.sessions,
            false => plan.total(),
        };
        let (arrivals, mut rx) = self.keep_schedule(schedule, arrivals_cap, deadline);
        let next_id = Arc::new(AtomicU64::new(0));
        let slots = max_concurrency.map(|n| Arc::new(Semaphore::new(n)));
        let mut tasks = JoinSet::new();
        loop {
            let next = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => break,
                n = rx.recv() => n,
            };
            let Some((id, offset)) = next else { break };
            if plan.in_units()
                && plan
                    .total()
                    .is_some_and(|t| next_id.load(Ordering::Relaxed) >= t)
            {
                break; // the sessions so far used up the request budget
            }
            let Some((permit, waited)) = self.take_slot(slots.as_ref()).await else {
                break; // cancelled while waiting for a slot
            };
            let (me, plan, next_id) = (self.clone(), plan.clone(), next_id.clone());
            let at_us = offset.as_micros() as u64;
            if plan.multi_turn() {
                tasks.spawn(async move {
                    let _slot = permit;
                    me.session(&plan, id, &next_id, at_us, deadline).await;
                });
            } else if plan.in_units() {
                tasks.spawn(async move {
                    let _slot = permit;
                    me.workflow(&plan, id, &next_id, at_us, deadline).await;
                });
            } else {
                let ticket = plan.ticket(id, at_us, waited);
                tasks.spawn(async move {
                    let _slot = permit;
                    me.one(&plan, ticket, None).await;
                });
            }
            // Reap finished tasks so a long run does not hold them all.
            while tasks.try_join_next().is_some() {}
        }
        drop(rx);
        while tasks.join_next().await.is_some() {}
        let joined = tokio::task::spawn_blocking(move || arrivals.join()).await;
        if !matches!(joined, Ok(Ok(()))) {
            // The schedule broke off: the caller says so (never a quietly short run).
            self.progress.arrival_failed.store(true, Ordering::SeqCst);
        }
    }

    /// The arrival thread: hands each of the schedule's arrivals (its id and
    /// offset) to the runtime at its time, until `cap` arrivals, the
    /// deadline or a cancellation. A thread, because its sleep is finer than
    /// tokio's 1 ms timer.
    fn keep_schedule(
        &self,
        schedule: Schedule,
        cap: Option<u64>,
        deadline: Option<Instant>,
    ) -> (std::thread::JoinHandle<()>, Arrivals) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<(u64, Duration)>();
        let (origin, cancel) = (self.clock.origin(), self.cancel.clone());
        let thread = std::thread::Builder::new()
            .name("ts-arrival".into())
            .spawn(move || {
                for (id, offset) in schedule.enumerate() {
                    let id = id as u64;
                    let at = origin + offset;
                    if cap.is_some_and(|t| id >= t) || deadline.is_some_and(|d| at >= d) {
                        break;
                    }
                    if !sleep_until(at, &cancel) || tx.send((id, offset)).is_err() {
                        return;
                    }
                }
            })
            .expect("spawning the arrival thread");
        (thread, rx)
    }

    /// A slot under `--max-concurrency` (none without it), and whether the
    /// arrival had to wait for it; `None` when the run was cancelled while
    /// it waited.
    async fn take_slot(
        &self,
        slots: Option<&Arc<Semaphore>>,
    ) -> Option<(Option<tokio::sync::OwnedSemaphorePermit>, bool)> {
        let Some(sem) = slots else {
            return Some((None, false));
        };
        if let Ok(p) = sem.clone().try_acquire_owned() {
            return Some((Some(p), false));
        }
        tokio::select! {
            biased;
            _ = self.cancel.cancelled() => None,
            p = sem.clone().acquire_owned() => Some((Some(p.expect("semaphore is never closed")), true)),
        }
    }
}

/// The arrivals the schedule's thread hands over: (id, offset from the origin).
type Arrivals = tokio::sync::mpsc::UnboundedReceiver<(u64, Duration)>;

/// Sleeps until `at`, in slices so a cancellation is noticed within 50 ms;
/// false when it was.
fn sleep_until(at: Instant, cancel: &CancellationToken) -> bool {
    loop {
        if cancel.is_cancelled() {
            return false;
        }
        let now = Instant::now();
        if now >= at {
            return true;
        }
        std::thread::sleep((at - now).min(Duration::from_millis(50)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_tokens_count_streamed_chunks_at_the_finished_tokens_per_chunk() {
        let p = Progress::default();
        // Nothing finished yet: a chunk counts as a token.
        p.streamed_chunks.store(30, Ordering::Relaxed);
        assert_eq!(p.live_output_tokens(), 30);
        // Finished requests carried 2 tokens a chunk: 100 chunks ≈ 200 tokens.
        p.output_tokens.store(40, Ordering::Relaxed);
        p.finished_chunks.store(20, Ordering::Relaxed);
        p.streamed_chunks.store(100, Ordering::Relaxed);
        assert_eq!(p.live_output_tokens(), 200);
        // Non-streaming answers: no chunks, the finished tokens.
        let q = Progress::default();
        q.output_tokens.store(64, Ordering::Relaxed);
        assert_eq!(q.live_output_tokens(), 64);
    }
}
