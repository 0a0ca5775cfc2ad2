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

use crate::request::Ticket;
use crate::runner::{RunPlan, Runner};
use futures_util::stream::{FuturesUnordered, StreamExt};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokenscope_core::record::{JoinWait, RequestRecord, SiblingTtfts, WorkflowCall, WorkflowEnd};
use tokenscope_workload::seed::mix;
use tokenscope_workload::session::Exchange;
use tokenscope_workload::workflow::{Join, Step, StepKind, Workflow};
use tokenscope_workload::workload::PromptSpec;

/// One step's run in one pass: a call or a tool's wait.
struct Inst {
    step: usize,
    pass: u32,
    branch: u32,
    /// When what it waited for was done (µs on the run's clock), when it
    /// was sent (a tool: when its wait began) and when it ended.
    ready_us: u64,
    sent_us: u64,
    done_us: u64,
    /// The instance whose end made it ready (none for a first step).
    gate: Option<usize>,
    /// The start of its branch: the fan-out it is a branch of.
    fork_us: u64,
    ok: bool,
    tool: bool,
    /// The conversation it leaves for the steps after it, each exchange
    /// with the instance that made it (what tells a shared prefix).
    conv: Vec<(usize, Arc<Exchange>)>,
}

/// A step's progress in its current pass.
#[derive(Default, Clone)]
struct StepState {
    pass: u32,
    /// Its instances in this pass (arena indices), and how many it will
    /// have once launched (`None`: not yet).
    launched: Vec<usize>,
    expected: Option<usize>,
    /// Its instances done in this pass, in the order they ended.
    done: Vec<usize>,
    /// In a loop's later pass, the `to` step waits for the looping step's
    /// previous pass instead of its own `after`.
    looped_from: Option<Vec<usize>>,
}

/// A running instance's future: its arena index and what it ended with.
type Running<'a> = Pin<Box<dyn Future<Output = (usize, Ended)> + Send + 'a>>;

/// How an instance ended.
struct Ended {
    sent_us: u64,
    done_us: u64,
    ok: bool,
    exchange: Option<Exchange>,
    record: Option<RequestRecord>,
}

/// The workflow's state while it runs.
struct Run<'w> {
    graph: &'w Workflow,
    id: u64,
    start_us: u64,
    arena: Vec<Inst>,
    steps: Vec<StepState>,
    /// Each loop's extra passes, drawn for this workflow (by looping step).
    passes_left: Vec<u64>,
    fan_outs: Vec<u64>,
    failed: bool,
    in_flight: u32,
    peak: u32,
    calls: u32,
    held: Option<RequestRecord>,
    /// Per step and pass, the calls sent so far: a call's place among its
    /// siblings is the order it left in (what tells a queue in the server).
    sent: std::collections::HashMap<(usize, u32), Arc<std::sync::atomic::AtomicU32>>,
    /// Per step and pass, its calls' TTFTs (µs), as they end.
    ttfts: std::collections::BTreeMap<(usize, u32), Vec<u64>>,
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
        let graph = flows.graph(w);
        let mut run = Run::new(graph, w, start_us, plan.seed);
        let mut running: FuturesUnordered<Running<'_>> = FuturesUnordered::new();
        let mut stopped = false;
        loop {
            if !stopped && !self.may_go_on(plan, next_id, deadline) {
                stopped = true;
            }
            if !stopped && !run.failed {
                for (inst, deps) in run.ready() {
                    running.push(self.launch(plan, &mut run, inst, deps, next_id));
                }
            }
            let Some((i, ended)) = running.next().await else {
                break;
            };
            run.ended(i, ended, &self.sink);
        }
        run.finish(&self.sink)
    }

    /// Whether the workflow may start another step.
    fn may_go_on(&self, plan: &RunPlan, next_id: &AtomicU64, deadline: Option<Instant>) -> bool {
        let budget = plan
            .requests
            .map(|n| n + plan.warmup)
            .is_none_or(|t| next_id.load(Ordering::Relaxed) < t);
        budget && !self.cancel.is_cancelled() && deadline.is_none_or(|d| Instant::now() < d)
    }

    /// Starts instance `inst` (in the arena, not yet sent): a tool waits,
    /// a call takes a request id and is sent once it is due.
    fn launch<'a>(
        &'a self,
        plan: &'a RunPlan,
        run: &mut Run<'_>,
        inst: usize,
        deps: Vec<usize>,
        next_id: &AtomicU64,
    ) -> Running<'a> {
        let step = &run.graph.steps[run.arena[inst].step];
        let ready_us = run.arena[inst].ready_us;
        let due = self.clock.at(Duration::from_micros(ready_us));
        let seed = plan.seed ^ mix(run.id) ^ mix(((inst as u64) << 20) | 0x77);
        match &step.kind {
            StepKind::Tool { latency } => {
                use rand::SeedableRng;
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
                let wait = latency.sample(&mut rng);
                let cancel = self.cancel.clone();
                Box::pin(async move {
                    let until = due + wait;
                    tokio::select! {
                        _ = cancel.cancelled() => {}
                        _ = tokio::time::sleep_until(until.into()) => {}
                    }
                    let done = ready_us + wait.as_micros() as u64;
                    let ok = !cancel.is_cancelled();
                    (
                        inst,
                        Ended {
                            sent_us: ready_us,
                            done_us: done,
                            ok,
                            exchange: None,
                            record: None,
                        },
                    )
                })
            }
            StepKind::Llm { .. } => {
                let id = next_id.fetch_add(1, Ordering::Relaxed);
                run.in_flight += 1;
                run.calls += 1;
                run.peak = run.peak.max(run.in_flight);
                let (spec, history) = run.prompt(plan, inst, &deps, seed);
                let pass = run.arena[inst].pass;
                let mut call = WorkflowCall {
                    id: run.id,
                    step: step.name.clone(),
                    branch: 0,
                    pass,
                };
                let order = run
                    .sent
                    .entry((run.arena[inst].step, pass))
                    .or_default()
                    .clone();
                let ticket = Ticket {
                    id,
                    scheduled_at_us: ready_us,
                    warmup: id < plan.warmup,
                    waited_for_slot: false,
                    turn: None,
                };
                Box::pin(async move {
                    if due > Instant::now() {
                        tokio::time::sleep_until(due.into()).await;
                    }
                    call.branch = order.fetch_add(1, Ordering::Relaxed);
                    let user = spec.prompt.clone();
                    let (mut rec, out) = self.attempt(plan, ticket, Some((spec, &history))).await;
                    rec.workflow = Some(call);
                    let ok = rec.succeeded();
                    let exchange = out.answer.map(|assistant| Exchange {
                        user: Some(user),
                        assistant,
                        calls: Vec::new(),
                    });
                    let ended = Ended {
                        sent_us: rec.sent_at_us,
                        done_us: rec.done_at_us,
                        ok,
                        exchange,
                        record: Some(rec),
                    };
                    (inst, ended)
                })
            }
        }
    }
}

impl<'w> Run<'w> {
    fn new(graph: &'w Workflow, id: u64, start_us: u64, seed: u64) -> Self {
        use rand::SeedableRng;
        let mut rng = rand::rngs::StdRng::seed_from_u64(mix(seed ^ mix(id) ^ 0x666c_6f77));
        let passes_left = graph
            .steps
            .iter()
            .map(|s| s.repeat.as_ref().map_or(0, |l| l.times.sample(&mut rng)))
            .collect();
        let fan_outs = graph
            .steps
            .iter()
            .map(|s| s.fan_out.sample(&mut rng))
            .collect();
        Run {
            graph,
            id,
            start_us,
            arena: Vec::new(),
            steps: vec![StepState::default(); graph.steps.len()],
            passes_left,
            fan_outs,
            failed: false,
            in_flight: 0,
            peak: 0,
            calls: 0,
            held: None,
            sent: Default::default(),
            ttfts: Default::default(),
        }
    }

    /// The instances that may start now, each with the instances it
    /// waited for (put in the arena, ready time and gate set).
    fn ready(&mut self) -> Vec<(usize, Vec<usize>)> {
        let (graph, mut out) = (self.graph, Vec::new());
        for s in 0..graph.steps.len() {
            let step = &graph.steps[s];
            if step.each {
                out.extend(self.ready_branches(s));
                continue;
            }
            if self.steps[s].expected.is_some() {
                continue;
            }
            let Some(awaited) = self.awaited(s) else {
                continue;
            };
            let n = self.fan_outs[s] as usize;
            self.steps[s].expected = Some(n);
            let fork = self.ready_at(s, &awaited);
            for b in 0..n {
                let i = self.push(s, b as u32, fork, &awaited);
                out.push((i, awaited.clone()));
            }
        }
        out
    }

    /// An `each` step's instances whose own branch is done.
    fn ready_branches(&mut self, s: usize) -> Vec<(usize, Vec<usize>)> {
        let parent = self.graph.steps[s].after[0].step;
        let (parents, launched) = (
            self.steps[parent].done.clone(),
            self.steps[s].launched.len(),
        );
        if let Some(n) = self.steps[parent].expected {
            self.steps[s].expected = Some(n);
        }
        let mut out = Vec::new();
        for &p in &parents[launched.min(parents.len())..] {
            if !self.arena[p].ok {
                continue;
            }
            let at = self.ready_at(s, &[p]);
            let (branch, fork) = (self.arena[p].branch, self.arena[p].fork_us);
            let i = self.push(s, branch, at, &[p]);
            self.arena[i].fork_us = fork;
            out.push((i, vec![p]));
        }
        out
    }

    /// What step `s` (not an `each`) waits for, once it is there: all the
    /// instances of the steps it comes after, or the first k to end.
    fn awaited(&self, s: usize) -> Option<Vec<usize>> {
        let step = &self.graph.steps[s];
        let (done, total): (Vec<usize>, Option<usize>) = match &self.steps[s].looped_from {
            Some(prev) => (prev.clone(), Some(prev.len())),
            None => {
                let mut done: Vec<usize> = step
                    .after
                    .iter()
                    .flat_map(|d| self.steps[d.step].done.iter().copied())
                    .collect();
                done.sort_by_key(|&i| self.arena[i].done_us);
                let total = step.after.iter().map(|d| self.steps[d.step].expected).sum();
                (done, total)
            }
        };
        if done.iter().any(|&i| !self.arena[i].ok) {
            return None;
        }
        let need = match (step.join, total) {
            (Join::All, Some(t)) => t,
            (Join::All, None) => return None,
            (Join::First(k), Some(t)) => (k as usize).min(t),
            (Join::First(k), None) => k as usize,
        };
        (done.len() >= need).then(|| done[..need].to_vec())
    }

    /// When step `s` is ready after `awaited`: the latest of their ends
    /// plus the edge's gap (a first step: the start plus its offset).
    fn ready_at(&self, s: usize, awaited: &[usize]) -> u64 {
        let step = &self.graph.steps[s];
        let gap = |i: usize| {
            let from = self.arena[i].step;
            step.after
                .iter()
                .find(|d| d.step == from)
                .map_or(0, |d| d.gap.as_micros() as u64)
        };
        awaited
            .iter()
            .map(|&i| self.arena[i].done_us + gap(i))
            .max()
            .unwrap_or(self.start_us + step.start_after.as_micros() as u64)
    }

    /// A new instance of step `s`, ready at `ready_us` after `awaited`.
    fn push(&mut self, s: usize, branch: u32, ready_us: u64, awaited: &[usize]) -> usize {
        let gate = awaited
            .iter()
            .copied()
            .max_by_key(|&i| self.arena[i].done_us);
        let i = self.arena.len();
        self.arena.push(Inst {
            step: s,
            pass: self.steps[s].pass,
            branch,
            ready_us,
            sent_us: ready_us,
            done_us: ready_us,
            gate,
            fork_us: ready_us,
            ok: false,
            tool: matches!(self.graph.steps[s].kind, StepKind::Tool { .. }),
            conv: Vec::new(),
        });
        self.steps[s].launched.push(i);
        i
    }

    /// The request of call `inst` after `awaited`: its history (the
    /// conversation they share, when the step shares its prefix) and its
    /// message (its own words, then the answers it was not yet shown).
    fn prompt(
        &mut self,
        plan: &RunPlan,
        inst: usize,
        awaited: &[usize],
        key: u64,
    ) -> (PromptSpec, Vec<Exchange>) {
        let graph = self.graph;
        let step: &Step = &graph.steps[self.arena[inst].step];
        let common = self.common_prefix(awaited);
        let shared: Vec<(usize, Arc<Exchange>)> = match step.share_prefix {
            true => awaited
                .first()
                .map_or(Vec::new(), |&a| self.arena[a].conv[..common].to_vec()),
            false => Vec::new(),
        };
        // The answers past the shared part: each awaited branch's own.
        let mut answers: Vec<&str> = Vec::new();
        for &a in awaited {
            let from = if step.share_prefix {
                common
            } else {
                self.arena[a].conv.len().saturating_sub(1)
            };
            answers.extend(
                self.arena[a].conv[from.min(self.arena[a].conv.len())..]
                    .iter()
                    .map(|(_, e)| e.assistant.as_str()),
            );
        }
        let context: u64 = shared
            .iter()
            .map(|(_, e)| words(&e.assistant) + e.user.as_deref().map_or(0, words))
            .sum::<u64>()
            + answers.iter().map(|a| words(a)).sum::<u64>();
        let StepKind::Llm {
            input,
            output,
            input_total,
        } = &step.kind
        else {
            unreachable!("a tool sends no request")
        };
        use rand::SeedableRng;
        let mut rng = rand::rngs::StdRng::seed_from_u64(key);
        let w = &plan.workload;
        let asked = input.unwrap_or(w.input).sample(&mut rng);
        let own = match input_total {
            true => asked.saturating_sub(context).max(1),
            false => asked,
        };
        let max_tokens = output
            .map(|o| o.sample(&mut rng))
            .or_else(|| w.output.map(|o| o.sample(&mut rng)));
        let mut prompt = w.step_words(key, own);
        for a in &answers {
            prompt.push_str("\n\n");
            prompt.push_str(a);
        }
        let spec = PromptSpec {
            prompt,
            input_tokens: own + context,
            max_tokens,
            documents: Vec::new(),
            media: Vec::new(),
            tools: None,
            expected: None,
        };
        self.arena[inst].conv = shared.clone();
        (spec, shared.iter().map(|(_, e)| (**e).clone()).collect())
    }

    /// How many leading exchanges the conversations of `awaited` share.
    fn common_prefix(&self, awaited: &[usize]) -> usize {
        let Some((&first, rest)) = awaited.split_first() else {
            return 0;
        };
        let base = &self.arena[first].conv;
        rest.iter().fold(base.len(), |n, &a| {
            let other = &self.arena[a].conv;
            base.iter()
                .zip(other)
                .take(n)
                .take_while(|(x, y)| x.0 == y.0)
                .count()
        })
    }

    /// Instance `i` ended: its times, its record held (the last carries
    /// the workflow's figures), its step's pass perhaps looped back.
    fn ended(&mut self, i: usize, e: Ended, sink: &crate::recorder::RecordSink) {
        if let Some(r) = e.record {
            self.in_flight -= 1;
            if let Some(ttft) = r.ttft_us().filter(|_| r.succeeded()) {
                let key = (self.arena[i].step, self.arena[i].pass);
                self.ttfts.entry(key).or_default().push(ttft);
            }
            if let Some(prev) = self.held.replace(r) {
                sink.record(prev);
            }
        }
        let gate = self.arena[i].gate;
        // A tool passes on the conversation of what it waited for.
        let passed = match self.arena[i].tool {
            true => gate.map(|g| self.arena[g].conv.clone()),
            false => None,
        };
        let inst = &mut self.arena[i];
        (inst.sent_us, inst.done_us, inst.ok) = (e.sent_us, e.done_us.max(e.sent_us), e.ok);
        if let Some(x) = e.exchange {
            inst.conv.push((i, Arc::new(x)));
        }
        if let Some(conv) = passed {
            inst.conv = conv;
        }
        let (s, ok) = (inst.step, inst.ok);
        self.failed |= !ok;
        self.steps[s].done.push(i);
        self.maybe_loop(s);
    }

    /// The looping step `s` ended its pass: go back for another, if any is left.
    fn maybe_loop(&mut self, s: usize) {
        let Some(l) = &self.graph.steps[s].repeat else {
            return;
        };
        let st = &self.steps[s];
        if self.failed || st.expected != Some(st.done.len()) || self.passes_left[s] == 0 {
            return;
        }
        self.passes_left[s] -= 1;
        let prev = st.done.clone();
        let pass = st.pass + 1;
        for &b in &l.body {
            self.steps[b] = StepState {
                pass,
                ..Default::default()
            };
        }
        self.steps[l.to].looped_from = Some(prev);
    }

    /// The workflow is over: its figures onto its last record, recorded.
    /// Returns when its last step ended.
    fn finish(mut self, sink: &crate::recorder::RecordSink) -> u64 {
        let end = self.end_instance();
        let end_us = end.map_or(self.start_us, |e| self.arena[e].done_us);
        let complete = !self.failed
            && self
                .steps
                .iter()
                .all(|st| st.expected.is_some_and(|n| st.done.len() >= n));
        let mut figures = WorkflowEnd {
            calls: self.calls,
            complete: complete && end.is_some(),
            makespan_us: end_us.saturating_sub(self.start_us),
            peak_in_flight: self.peak,
            ..Default::default()
        };
        if let Some(e) = end {
            self.critical_path(e, &mut figures);
        }
        figures.joins = self.joins();
        figures.siblings = self.siblings();
        if let Some(mut r) = self.held.take() {
            r.workflow_end = Some(Box::new(figures));
            sink.record(r);
        }
        end_us
    }

    /// The instance the workflow ends with: the latest to end of the
    /// steps nothing comes after (in their last pass).
    fn end_instance(&self) -> Option<usize> {
        let n = self.graph.steps.len();
        let mut followed = vec![false; n];
        for s in &self.graph.steps {
            for d in &s.after {
                followed[d.step] = true;
            }
        }
        (0..n)
            .filter(|&s| !followed[s])
            .flat_map(|s| self.steps[s].done.iter().copied())
            .max_by_key(|&i| self.arena[i].done_us)
    }

    /// The path back from `end` through the instances that gated each
    /// step, its time in three parts that add up to the makespan.
    fn critical_path(&self, end: usize, f: &mut WorkflowEnd) {
        let mut at = Some(end);
        let mut names = Vec::new();
        while let Some(i) = at {
            let x = &self.arena[i];
            let took = x.done_us.saturating_sub(x.sent_us);
            match x.tool {
                true => f.path_tool_us += took,
                false => f.path_llm_us += took,
            }
            names.push(self.graph.steps[x.step].name.clone());
            at = x.gate;
        }
        names.reverse();
        names.dedup();
        f.path = names;
        // The rest: what the path's calls and tools did not take (a step
        // ready and not yet sent, a trace's gap after its gate).
        f.path_other_us = f.makespan_us.saturating_sub(f.path_llm_us + f.path_tool_us);
    }

    /// Each join of more than one branch: its slowest branch, the median
    /// one, and how long it was held after the median one ended.
    fn joins(&self) -> Vec<JoinWait> {
        let mut by_step: Vec<Vec<usize>> = vec![Vec::new(); self.graph.steps.len()];
        for (i, x) in self.arena.iter().enumerate() {
            by_step[x.step].push(i);
        }
        let mut out = Vec::new();
        for x in &self.arena {
            let step = &self.graph.steps[x.step];
            if step.each || step.after.is_empty() || x.branch != 0 {
                continue;
            }
            let mut branches: Vec<&Inst> = step
                .after
                .iter()
                .flat_map(|d| &by_step[d.step])
                .map(|&i| &self.arena[i])
                .filter(|y| y.pass == x.pass && y.ok && y.done_us <= x.ready_us)
                .collect();
            if branches.len() < 2 {
                continue;
            }
            branches.sort_by_key(|y| y.done_us);
            let took = |y: &Inst| y.done_us.saturating_sub(y.fork_us);
            let median = branches[(branches.len() - 1) / 2];
            let last = branches[branches.len() - 1];
            out.push(JoinWait {
                step: step.name.clone(),
                branches: branches.len() as u32,
                slowest_us: branches.iter().map(|y| took(y)).max().unwrap_or(0),
                median_us: took(median),
                held_us: last.done_us.saturating_sub(median.done_us),
            });
        }
        out
    }
}

impl Run<'_> {
    /// Each step's parallel calls in one pass: their TTFTs, shortest first.
    fn siblings(&mut self) -> Vec<SiblingTtfts> {
        std::mem::take(&mut self.ttfts)
            .into_iter()
            .filter(|(_, t)| t.len() >= 2)
            .map(|((s, _), mut t)| {
                t.sort_unstable();
                t.truncate(32);
                SiblingTtfts {
                    step: self.graph.steps[s].name.clone(),
                    ttft_us: t,
                }
            })
            .collect()
    }
}

/// Words of a text (one token each for tokenscope's own words).
fn words(text: &str) -> u64 {
    text.split_whitespace().count() as u64
}
