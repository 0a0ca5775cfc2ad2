//! One workflow's state while it runs: its instances (each step's runs in
//! each pass), which may start now, what each carries forward, and the
//! loops' passes.

use super::conv::{self, Thread};
use crate::runner::RunPlan;
use std::collections::BTreeSet;
use tokenscope_workload::session::Exchange;
use tokenscope_workload::workflow::{Join, StepKind, Workflow};
use tokenscope_workload::workload::PromptSpec;

/// One step's run in one pass: a call or a tool's wait.
pub(super) struct Inst {
    pub step: usize,
    pub pass: u32,
    /// When what it waited for was done (µs on the run's clock), when it
    /// was sent (a tool: when its wait began) and when it ended.
    pub ready_us: u64,
    pub sent_us: u64,
    pub done_us: u64,
    /// What it waited for, and of those the one that made it ready (the
    /// latest end plus its edge's gap).
    pub awaited: Vec<usize>,
    pub gate: Option<usize>,
    /// The start of its branch: the fan-out it is a branch of.
    pub fork_us: u64,
    pub ok: bool,
    pub tool: bool,
    /// The conversation it leaves for the steps after it.
    pub thread: Thread,
}

/// A step's progress in its current pass.
#[derive(Default, Clone)]
pub(super) struct StepState {
    pub pass: u32,
    /// How many instances it has in this pass, once launched.
    pub expected: Option<usize>,
    /// Its instances done in this pass, in the order they ended.
    pub done: Vec<usize>,
    /// An `each` step: its parent's instances already gone on from.
    taken: usize,
    /// In a loop's later pass, the `to` step waits for the looping step's
    /// previous pass instead of its own `after`.
    looped_from: Option<Vec<usize>>,
}

/// The workflow's state while it runs.
pub(super) struct Run<'w> {
    pub graph: &'w Workflow,
    pub id: u64,
    pub start_us: u64,
    pub arena: Vec<Inst>,
    pub steps: Vec<StepState>,
    /// Each step's successors (the steps that come after it).
    succ: Vec<Vec<usize>>,
    /// Steps whose readiness may have changed since last looked at.
    dirty: BTreeSet<usize>,
    /// Each loop's extra passes left (by looping step), and each step's fan-out.
    passes_left: Vec<u64>,
    fan_outs: Vec<u64>,
    /// A call failed: nothing more is started, and it is not complete.
    pub failed: bool,
    /// The run's budget, deadline or cancellation stopped it.
    pub stopped: bool,
}

impl<'w> Run<'w> {
    pub fn new(graph: &'w Workflow, id: u64, start_us: u64, seed: u64) -> Self {
        use rand::SeedableRng;
        let key =
            tokenscope_workload::seed::mix(seed ^ tokenscope_workload::seed::mix(id) ^ 0x666c_6f77);
        let mut rng = rand::rngs::StdRng::seed_from_u64(key);
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
        let mut succ = vec![Vec::new(); graph.steps.len()];
        for (i, s) in graph.steps.iter().enumerate() {
            for d in &s.after {
                succ[d.step].push(i);
            }
        }
        Run {
            graph,
            id,
            start_us,
            arena: Vec::new(),
            steps: vec![StepState::default(); graph.steps.len()],
            succ,
            dirty: (0..graph.steps.len()).collect(),
            passes_left,
            fan_outs,
            failed: false,
            stopped: false,
        }
    }

    /// The instances that may start now (put in the arena, their ready
    /// time, what they waited for and their gate set), in file order.
    pub fn ready(&mut self) -> Vec<usize> {
        let mut out = Vec::new();
        for s in std::mem::take(&mut self.dirty) {
            match self.graph.steps[s].each {
                true => out.extend(self.ready_branches(s)),
                false => out.extend(self.ready_step(s)),
            }
        }
        out
    }

    fn ready_step(&mut self, s: usize) -> Vec<usize> {
        if self.steps[s].expected.is_some() {
            return Vec::new();
        }
        let Some(awaited) = self.awaited(s) else {
            return Vec::new();
        };
        let n = self.fan_outs[s] as usize;
        self.steps[s].expected = Some(n);
        let at = self.ready_at(s, &awaited);
        (0..n).map(|_| self.push(s, at, awaited.clone())).collect()
    }

    /// An `each` step's instances whose own branch is done.
    fn ready_branches(&mut self, s: usize) -> Vec<usize> {
        let parent = self.graph.steps[s].after[0].step;
        if let Some(n) = self.steps[parent].expected {
            self.steps[s].expected = Some(n);
        }
        let parents = self.steps[parent].done.clone();
        let mut out = Vec::new();
        for &p in &parents[self.steps[s].taken.min(parents.len())..] {
            self.steps[s].taken += 1;
            if !self.arena[p].ok {
                continue;
            }
            let at = self.ready_at(s, &[p]);
            let fork = self.arena[p].fork_us;
            let i = self.push(s, at, vec![p]);
            self.arena[i].fork_us = fork;
            out.push(i);
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
        let need = match (step.join, total) {
            (Join::All, Some(t)) => t,
            (Join::All, None) => return None,
            (Join::First(k), Some(t)) => (k as usize).min(t),
            (Join::First(k), None) => k as usize,
        };
        let ok: Vec<usize> = done.into_iter().filter(|&i| self.arena[i].ok).collect();
        (ok.len() >= need).then(|| ok[..need].to_vec())
    }

    /// The gap on the edge from instance `i` to step `s`.
    fn gap_us(&self, s: usize, i: usize) -> u64 {
        let from = self.arena[i].step;
        let after = &self.graph.steps[s].after;
        after
            .iter()
            .find(|d| d.step == from)
            .map_or(0, |d| d.gap.as_micros() as u64)
    }

    /// When step `s` is ready after `awaited`: the latest of their ends
    /// plus the edge's gap (a first step: the start plus its offset).
    fn ready_at(&self, s: usize, awaited: &[usize]) -> u64 {
        let first = self.start_us + self.graph.steps[s].start_after.as_micros() as u64;
        awaited
            .iter()
            .map(|&i| self.arena[i].done_us + self.gap_us(s, i))
            .max()
            .unwrap_or(first)
    }

    /// A new instance of step `s`, ready at `ready_us` after `awaited`.
    fn push(&mut self, s: usize, ready_us: u64, awaited: Vec<usize>) -> usize {
        let gate = awaited
            .iter()
            .copied()
            .max_by_key(|&i| self.arena[i].done_us + self.gap_us(s, i));
        let i = self.arena.len();
        self.arena.push(Inst {
            step: s,
            pass: self.steps[s].pass,
            ready_us,
            sent_us: ready_us,
            done_us: ready_us,
            awaited,
            gate,
            fork_us: ready_us,
            ok: false,
            tool: matches!(self.graph.steps[s].kind, StepKind::Tool { .. }),
            thread: None,
        });
        i
    }

    /// The request of call `inst`: its history (the conversation what it
    /// waited for shares, when the step shares its prefix) and its message
    /// (its own words, then the answers it was not yet shown).
    pub fn prompt(&self, plan: &RunPlan, inst: usize, key: u64) -> (PromptSpec, Vec<Exchange>) {
        let step = &self.graph.steps[self.arena[inst].step];
        let awaited = &self.arena[inst].awaited;
        let threads: Vec<&Thread> = awaited.iter().map(|&a| &self.arena[a].thread).collect();
        let (history, answers): (Thread, Vec<String>) = match step.share_prefix {
            true => {
                let shared = threads.iter().skip(1).fold(
                    threads.first().map(|t| (*t).clone()).unwrap_or(None),
                    |c, t| conv::common(&c, t),
                );
                let n = conv::len(&shared);
                (
                    shared,
                    threads
                        .iter()
                        .flat_map(|t| conv::answers_past(t, n))
                        .collect(),
                )
            }
            false => (
                None,
                threads
                    .iter()
                    .flat_map(|t| conv::answers_past(t, conv::len(t).saturating_sub(1)))
                    .collect(),
            ),
        };
        let history = conv::exchanges(&history);
        let words = |t: &str| t.split_whitespace().count() as u64;
        let context: u64 = history
            .iter()
            .map(|e| words(&e.assistant) + e.user.as_deref().map_or(0, words))
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
        let max_tokens = output.or(w.output).map(|o| o.sample(&mut rng));
        if step.from_dataset {
            // A dataset entry's message and lengths (the step's output wins).
            let entry = w.request(key);
            let own = entry.input_tokens;
            let mut spec = PromptSpec {
                input_tokens: own + context,
                max_tokens: output.map(|o| o.sample(&mut rng)).or(entry.max_tokens),
                ..entry
            };
            for a in &answers {
                spec.prompt.push_str("\n\n");
                spec.prompt.push_str(a);
            }
            return (spec, history);
        }
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
        (spec, history)
    }

    /// Instance `i` ended, sent or not; `exchange`: its call's, when it
    /// was answered. A previous pass's straggler is kept out of this
    /// pass; a failure nothing waits for any more does not fail the
    /// workflow.
    pub fn ended(
        &mut self,
        i: usize,
        (sent_us, done_us, ok, sent): (u64, u64, bool, bool),
        exchange: Option<Exchange>,
    ) {
        let s = self.arena[i].step;
        let thread = match (self.arena[i].tool, self.arena[i].gate) {
            // A tool passes on the conversation of what it waited for.
            (true, Some(g)) => self.arena[g].thread.clone(),
            (true, None) => None,
            (false, _) => {
                let base = self.prompt_thread(i);
                exchange.map_or(base.clone(), |x| conv::push(&base, x))
            }
        };
        let inst = &mut self.arena[i];
        (inst.sent_us, inst.done_us, inst.ok, inst.thread) =
            (sent_us, done_us.max(sent_us), ok, thread);
        if !sent {
            self.stopped = true;
        }
        if inst.pass != self.steps[s].pass {
            return;
        }
        if !ok && sent && !self.gone_on_without(s) {
            self.failed = true;
        }
        self.steps[s].done.push(i);
        self.dirty.extend(self.succ[s].iter().copied());
        self.maybe_loop(s);
    }

    /// The conversation call `i` was sent with (its history).
    fn prompt_thread(&self, i: usize) -> Thread {
        let x = &self.arena[i];
        if !self.graph.steps[x.step].share_prefix {
            return None;
        }
        let threads: Vec<&Thread> = x.awaited.iter().map(|&a| &self.arena[a].thread).collect();
        let first = threads.first().map(|t| (*t).clone()).unwrap_or(None);
        match threads.len() {
            // One it goes on from: that conversation whole (its answer in it).
            1 => first,
            _ => threads
                .iter()
                .skip(1)
                .fold(first, |c, t| conv::common(&c, t)),
        }
    }

    /// Every step after `s` has already gone on (a `first:K` join's
    /// straggler ended after it was no longer waited for).
    fn gone_on_without(&self, s: usize) -> bool {
        let succ = &self.succ[s];
        !succ.is_empty()
            && succ
                .iter()
                .all(|&c| !self.graph.steps[c].each && self.steps[c].expected.is_some())
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
            self.dirty.insert(b);
        }
        self.steps[l.to].looped_from = Some(prev);
    }

    /// Every step ran all its instances, and none failed or was stopped.
    pub fn complete(&self) -> bool {
        !self.failed
            && !self.stopped
            && self
                .steps
                .iter()
                .all(|st| st.expected.is_some_and(|n| st.done.len() >= n))
    }
}
