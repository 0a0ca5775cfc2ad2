//! One agent workflow run as its graph says (`tokenscope_workload::workflow`):
//! its steps sent as soon as what they wait for is done — a fan-out's
//! branches at once, a join when all (or the first k) of its branches are
//! done, a loop's body again — each model call carrying its context
//! forward, and its figures (makespan, critical path, joins' waits, calls
//! in flight) kept on its last record.
//!
//! Context: a step that goes on from one call continues that call's
//! conversation (its history and answer) with its own new words; a join
//! continues the conversation its branches share and is given each
//! branch's new answers in its message. A step with `share_prefix = false`
//! is sent only its own words and the answers it waited for.

mod conv;
mod figures;
mod state;

use crate::request::Ticket;
use crate::runner::{RunPlan, Runner};
use futures_util::stream::{FuturesUnordered, StreamExt};
use state::Run;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokenscope_core::record::{RequestRecord, WorkflowCall, WorkflowEnd};
use tokenscope_workload::seed::mix;
use tokenscope_workload::session::Exchange;
use tokenscope_workload::workflow::StepKind;

/// A running instance's future: its arena index and how it ended.
type Running<'a> = Pin<Box<dyn Future<Output = (usize, Ended)> + Send + 'a>>;

/// How an instance ended: its send and end (µs), whether it succeeded,
/// whether it was sent at all (the budget, deadline or a cancellation
/// may stop it first), its exchange and record.
struct Ended {
    sent_us: u64,
    done_us: u64,
    ok: bool,
    sent: bool,
    exchange: Option<Exchange>,
    record: Option<RequestRecord>,
}

impl Ended {
    fn not_sent(at_us: u64) -> Ended {
        Ended {
            sent_us: at_us,
            done_us: at_us,
            ok: false,
            sent: false,
            exchange: None,
            record: None,
        }
    }
}

/// What the workflow's calls share while they run: how many are in flight
/// (and the most at once), how many were sent, and per step and pass the
/// order they left in.
#[derive(Default)]
struct Calls {
    in_flight: AtomicU32,
    peak: AtomicU32,
    sent: AtomicU32,
    order: std::sync::Mutex<HashMap<(usize, u32), u32>>,
}

impl Calls {
    /// A call leaves: its place among its step's calls in this pass.
    fn leave(&self, key: (usize, u32)) -> u32 {
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak.fetch_max(now, Ordering::Relaxed);
        self.sent.fetch_add(1, Ordering::Relaxed);
        let mut order = self.order.lock().unwrap_or_else(|p| p.into_inner());
        let n = order.entry(key).or_insert(0);
        *n += 1;
        *n - 1
    }
}

impl Runner {
    /// Workflow `w` from its arrival at `start_us`: runs its graph to its
    /// end, a failed call, the request budget, the deadline or
    /// cancellation (then the calls in flight finish, and it is counted
    /// incomplete). Returns when its last step ended.
    pub(crate) async fn workflow(
        &self,
        plan: &RunPlan,
        w: u64,
        next_id: &AtomicU64,
        start_us: u64,
        deadline: Option<Instant>,
    ) -> u64 {
        let Some(flows) = plan.workload.workflows.clone() else {
            return start_us;
        };
        let mut run = Run::new(flows.graph(w), w, start_us, plan.seed);
        let calls = Arc::new(Calls::default());
        let mut running: FuturesUnordered<Running<'_>> = FuturesUnordered::new();
        let (mut held, mut ttfts) = (
            None::<RequestRecord>,
            BTreeMap::<(usize, u32), Vec<u64>>::new(),
        );
        loop {
            if !run.failed && !run.stopped {
                for inst in run.ready() {
                    running.push(self.launch(plan, &run, inst, (next_id, deadline), calls.clone()));
                }
            }
            let Some((i, e)) = running.next().await else {
                break;
            };
            if let Some(r) = e.record {
                calls.in_flight.fetch_sub(1, Ordering::Relaxed);
                if let Some(ttft) = r.ttft_us().filter(|_| r.succeeded()) {
                    ttfts
                        .entry((run.arena[i].step, run.arena[i].pass))
                        .or_default()
                        .push(ttft);
                }
                if let Some(prev) = held.replace(r) {
                    self.sink.record(prev);
                }
            }
            run.ended(i, (e.sent_us, e.done_us, e.ok, e.sent), e.exchange);
        }
        let (end_us, figures) = finish(&run, &calls, ttfts);
        if let Some(mut r) = held {
            r.workflow_end = Some(Box::new(figures));
            self.sink.record(r);
        }
        end_us
    }

    /// Starts instance `inst`: a tool waits; a call waits until it is
    /// due, then takes a request id and is sent — unless the run was
    /// cancelled, its deadline passed or its budget was spent meanwhile.
    fn launch<'a>(
        &'a self,
        plan: &'a RunPlan,
        run: &Run<'_>,
        inst: usize,
        (next_id, deadline): (&'a AtomicU64, Option<Instant>),
        calls: Arc<Calls>,
    ) -> Running<'a> {
        let x = &run.arena[inst];
        let step = &run.graph.steps[x.step];
        let ready_us = x.ready_us;
        let due = self.clock.at(Duration::from_micros(ready_us));
        let key = plan.seed ^ mix(run.id) ^ mix(((inst as u64) << 20) | 0x77);
        if let StepKind::Tool { latency } = &step.kind {
            use rand::SeedableRng;
            let wait = latency.sample(&mut rand::rngs::StdRng::seed_from_u64(key));
            let end = deadline.map_or(due + wait, |d| d.min(due + wait));
            return Box::pin(async move {
                let ran = tokio::select! {
                    _ = self.cancel.cancelled() => false,
                    _ = tokio::time::sleep_until(end.into()) => !self.cancel.is_cancelled() && end == due + wait,
                };
                let done = ready_us + wait.as_micros() as u64;
                match ran {
                    true => (
                        inst,
                        Ended {
                            sent_us: ready_us,
                            done_us: done,
                            ok: true,
                            sent: true,
                            exchange: None,
                            record: None,
                        },
                    ),
                    false => (inst, Ended::not_sent(ready_us)),
                }
            });
        }
        let until = deadline.map_or(due, |d| d.min(due));
        let waited = async move {
            tokio::select! {
                _ = self.cancel.cancelled() => false,
                _ = tokio::time::sleep_until(until.into()) => !self.cancel.is_cancelled() && until == due,
            }
        };
        let (spec, history) = run.prompt(plan, inst, key);
        let (place, pass, name, wf) = ((x.step, x.pass), x.pass, step.name.clone(), run.id);
        Box::pin(async move {
            let budget = |id: u64| plan.requests.is_none_or(|n| id < n + plan.warmup);
            if !waited.await {
                return (inst, Ended::not_sent(ready_us));
            }
            let id = next_id.fetch_add(1, Ordering::Relaxed);
            if !budget(id) {
                return (inst, Ended::not_sent(ready_us));
            }
            let branch = calls.leave(place);
            let ticket = Ticket {
                id,
                scheduled_at_us: ready_us,
                warmup: id < plan.warmup,
                waited_for_slot: false,
                turn: None,
            };
            let user = spec.prompt.clone();
            let (mut rec, out) = self.attempt(plan, ticket, Some((spec, &history))).await;
            rec.workflow = Some(WorkflowCall {
                id: wf,
                step: name,
                branch,
                pass,
            });
            let exchange = out.answer.map(|assistant| Exchange {
                user: Some(user),
                assistant,
                calls: Vec::new(),
            });
            let ended = Ended {
                sent_us: rec.sent_at_us,
                done_us: rec.done_at_us,
                ok: rec.succeeded(),
                sent: true,
                exchange,
                record: Some(rec),
            };
            (inst, ended)
        })
    }
}

/// The workflow is over: when its last step ended, and its figures.
fn finish(
    run: &Run<'_>,
    calls: &Calls,
    ttfts: BTreeMap<(usize, u32), Vec<u64>>,
) -> (u64, WorkflowEnd) {
    let end = figures::end_instance(run);
    let end_us = end.map_or(run.start_us, |e| run.arena[e].done_us);
    let mut f = WorkflowEnd {
        calls: calls.sent.load(Ordering::Relaxed),
        complete: run.complete() && end.is_some(),
        makespan_us: end_us.saturating_sub(run.start_us),
        peak_in_flight: calls.peak.load(Ordering::Relaxed),
        ..Default::default()
    };
    if let Some(e) = end {
        figures::critical_path(run, e, &mut f);
    }
    f.joins = figures::joins(run);
    f.siblings = figures::siblings(run, ttfts);
    (end_us, f)
}
