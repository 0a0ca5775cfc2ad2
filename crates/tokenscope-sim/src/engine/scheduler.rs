//! One engine step as vLLM's V1 scheduler takes it (docs/engines.md
//! §1, "One step"): running requests first, each given what it still needs up to the
//! step's token budget (a decode needs 1, a prompt a chunk of it); KV blocks
//! allocated as needed; when they run out the most recently admitted running
//! request is preempted (blocks freed, recomputed later, back to the front of
//! the queue); waiting requests are admitted in order only in a step that
//! preempted nobody, while there are sequence slots, budget and blocks.
//! Under vLLM's priority policy (`--scheduling-policy priority`) the queue
//! is ordered by (priority, arrival) and the preempted request is the
//! running one with the highest (priority, arrival), wherever it stands.

use super::cost::StepWork;
use super::kv::{KvCache, Unit};
use std::collections::VecDeque;
use std::sync::Arc;

/// A request inside the engine.
#[derive(Debug, Clone)]
pub struct Seq {
    pub id: u64,
    pub prompt: u32,
    pub max_output: u32,
    /// Tokens whose KV is computed.
    pub computed: u32,
    pub generated: u32,
    /// Blocks this sequence owns (cached units it uses are not counted).
    pub blocks: u32,
    /// Its prompt (and answer, where known ahead) as the prefix cache knows
    /// it (empty: nothing reusable).
    pub units: Arc<[Unit]>,
    /// The first `held` units are the cache's, used by this sequence.
    pub held: usize,
    /// Their blocks and tokens.
    pub prefix_blocks: u32,
    pub held_tokens: u32,
    /// Prompt tokens found in the cache when it was first scheduled
    /// (vLLM's `num_cached_tokens`, `usage.prompt_tokens_details.cached_tokens`).
    pub cached_tokens: Option<u32>,
    pub arrived_at: f64,
    /// Entered the waiting queue last (arrival or preemption).
    pub queued_at: f64,
    /// Seconds spent waiting, summed over every wait.
    pub queue_time: f64,
    pub first_scheduled_at: Option<f64>,
    pub preemptions: u32,
    /// Images: the vision encoder's work, done in the step that takes its
    /// first prompt tokens (FLOPs, and the encoder's parameters in
    /// billions, whose weights that step reads); 0 once done.
    pub encoder_flops: f64,
    pub encoder_params_b: f64,
    /// vLLM's request `priority`: lower is served first under the
    /// priority policy ([`Limits::priority_scheduling`]); 0 by default.
    pub priority: i64,
}

impl Seq {
    pub fn new(id: u64, prompt: u32, max_output: u32, arrived_at: f64) -> Seq {
        Seq {
            id,
            prompt: prompt.max(1),
            max_output: max_output.max(1),
            computed: 0,
            generated: 0,
            blocks: 0,
            units: Arc::from([]),
            held: 0,
            prefix_blocks: 0,
            held_tokens: 0,
            cached_tokens: None,
            arrived_at,
            queued_at: arrived_at,
            queue_time: 0.0,
            first_scheduled_at: None,
            preemptions: 0,
            encoder_flops: 0.0,
            encoder_params_b: 0.0,
            priority: 0,
        }
    }

    /// Tokens the sequence holds: prompt + generated so far.
    fn tokens(&self) -> u32 {
        self.prompt + self.generated
    }

    /// Its prompt (or, after a preemption, its prompt and answer so far) is
    /// not all computed: its next tokens are a prefill, not one decode.
    fn prefilling(&self) -> bool {
        self.tokens() - self.computed > 1 || self.generated == 0
    }
}

/// Scheduler limits (vLLM names) and the engine's step rules.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_num_seqs: u32,
    pub max_num_batched_tokens: u32,
    /// A prompt may be split over steps (chunked prefill). Without it a
    /// prompt is computed whole in one step: it waits for a step with room
    /// for all of it, or, as the step's first prefill, goes whole however
    /// long it is.
    pub chunked_prefill: bool,
    /// Prefill and decode tokens share one step. Without it a step is either
    /// prefills (taken first, while a prompt can be admitted or is part
    /// done) or decodes, and every running request waits out the prefills.
    pub mixed_steps: bool,
    /// vLLM 0.6's multi-step scheduling (`--num-scheduler-steps`): a step of
    /// decodes alone starts a block of this many decode steps, scheduled
    /// once. No request is admitted until the block ends, and the block's
    /// tokens reach the clients together at its end (1: off).
    pub multi_step: u32,
    /// Static batching: a batch is admitted only when the last has ended,
    /// its prompts all prefilled in one step whatever the token budget.
    pub static_batch: bool,
    /// vLLM's `--scheduling-policy priority`: the waiting queue ordered by
    /// (priority, arrival), and out of blocks the running request with the
    /// highest (priority, arrival) preempted, as vLLM V1 does.
    pub priority_scheduling: bool,
}

impl Limits {
    /// vLLM V1's rules: chunked prefill, prefill and decode in one step.
    pub fn v1(max_num_seqs: u32, max_num_batched_tokens: u32) -> Limits {
        Limits {
            max_num_seqs,
            max_num_batched_tokens,
            chunked_prefill: true,
            mixed_steps: true,
            multi_step: 1,
            static_batch: false,
            priority_scheduling: false,
        }
    }
}

/// Which tokens a step takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StepKind {
    Mixed,
    Prefills,
    Decodes,
}

/// One scheduled sequence: index into `running` and new tokens this step
/// (of a decode with speculative decoding, `drafts` of them are guesses).
#[derive(Debug, Clone, Copy)]
struct Slot {
    id: u64,
    new_tokens: u32,
    drafts: u32,
}

/// Speculative decoding's counts, as vLLM's counters name them
/// (`vllm:spec_decode_num_drafts_total`, …).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct SpecStats {
    /// Proposals: one per sequence and step that drafted.
    pub drafts: u64,
    pub draft_tokens: u64,
    pub accepted_tokens: u64,
    /// Per draft position, the proposals that position was accepted in.
    pub accepted_per_position: Vec<u64>,
}

/// What a step produced.
#[derive(Debug, Default)]
pub struct StepResult {
    pub work: StepWork,
    /// Requests that got a token: (id, tokens generated so far, finished).
    pub emitted: Vec<(u64, u32, bool)>,
    pub preempted: u32,
    /// Sequences that finished (removed from the engine).
    pub finished: Vec<Seq>,
}

#[derive(Debug)]
pub struct Scheduler {
    pub limits: Limits,
    pub kv: KvCache,
    pub waiting: VecDeque<Seq>,
    pub running: Vec<Seq>,
    pub preemptions_total: u64,
    scheduled: Vec<Slot>,
    preempted_in_step: u32,
    /// Steps taken of the current multi-step block (0: none open).
    block_steps: u32,
    /// The open block's tokens and finished requests, released at its end.
    held: StepResult,
    /// An earlier step's buffers, given back ([`Scheduler::recycle`]): a
    /// step of a long plan allocates nothing.
    spare: StepResult,
    /// `--spec-decode`: decodes draft and verify several tokens a step.
    pub spec: Option<super::spec::SpecDecode>,
    pub spec_stats: SpecStats,
}

impl SpecStats {
    /// Another engine's counts added in.
    pub fn add(&mut self, other: &SpecStats) {
        self.drafts += other.drafts;
        self.draft_tokens += other.draft_tokens;
        self.accepted_tokens += other.accepted_tokens;
        let positions = &mut self.accepted_per_position;
        if positions.len() < other.accepted_per_position.len() {
            positions.resize(other.accepted_per_position.len(), 0);
        }
        for (p, o) in positions.iter_mut().zip(&other.accepted_per_position) {
            *p += o;
        }
    }

    /// Accepted ÷ drafted tokens.
    pub fn acceptance_rate(&self) -> Option<f64> {
        (self.draft_tokens > 0).then(|| self.accepted_tokens as f64 / self.draft_tokens as f64)
    }

    /// 1 + accepted ÷ drafts: tokens a sequence gains per verification step.
    pub fn mean_accepted_length(&self) -> Option<f64> {
        (self.drafts > 0).then(|| 1.0 + self.accepted_tokens as f64 / self.drafts as f64)
    }

    /// Per position, the share of drafts it was accepted in (`k` of them).
    pub fn acceptance_by_position(&self, k: u32) -> Vec<f64> {
        let n = self.drafts.max(1) as f64;
        (0..k as usize)
            .map(|i| self.accepted_per_position.get(i).copied().unwrap_or(0) as f64 / n)
            .collect()
    }
}

/// One proposal of `drafted` tokens, `accepted` of them passing.
fn count_drafts(stats: &mut SpecStats, drafted: u32, accepted: u32) {
    stats.drafts += 1;
    stats.draft_tokens += u64::from(drafted);
    stats.accepted_tokens += u64::from(accepted);
    let positions = &mut stats.accepted_per_position;
    if positions.len() < accepted as usize {
        positions.resize(accepted as usize, 0);
    }
    for p in positions.iter_mut().take(accepted as usize) {
        *p += 1;
    }
}

impl Scheduler {
    pub fn new(limits: Limits, kv: KvCache) -> Self {
        Scheduler {
            limits,
            kv,
            waiting: VecDeque::new(),
            running: Vec::new(),
            preemptions_total: 0,
            scheduled: Vec::new(),
            preempted_in_step: 0,
            block_steps: 0,
            held: StepResult::default(),
            spare: StepResult::default(),
            spec: None,
            spec_stats: SpecStats::default(),
        }
    }

    pub fn add(&mut self, seq: Seq) {
        self.enqueue(seq, false);
    }

    /// Into the waiting queue: at its end (first come, first served; a
    /// preempted request at its front), or under the priority policy
    /// after every request of a lower or equal (priority, arrival).
    fn enqueue(&mut self, seq: Seq, preempted: bool) {
        if !self.limits.priority_scheduling {
            match preempted {
                true => self.waiting.push_front(seq),
                false => self.waiting.push_back(seq),
            }
            return;
        }
        let key = (seq.priority, seq.arrived_at);
        let at = self
            .waiting
            .iter()
            .position(|w| (w.priority, w.arrived_at) > key)
            .unwrap_or(self.waiting.len());
        self.waiting.insert(at, seq);
    }

    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty()
    }

    /// Drops a request whose client went away, freeing its blocks. Call between steps.
    pub fn abort(&mut self, id: u64) -> bool {
        if let Some(i) = self.running.iter().position(|s| s.id == id) {
            let mut seq = self.running.remove(i);
            Self::free(&mut self.kv, &mut seq);
            return true;
        }
        if let Some(i) = self.waiting.iter().position(|s| s.id == id) {
            self.waiting.remove(i);
            return true;
        }
        false
    }

    /// Gives `seq` blocks for `tokens` tokens in total.
    fn grow(kv: &mut KvCache, seq: &mut Seq, tokens: u32) -> bool {
        let held = (seq.blocks + seq.prefix_blocks) as u64;
        // Most steps stay inside the blocks held: a product, not the
        // division `blocks_for` takes (once a running request a step).
        if tokens as u64 <= held * kv.block_size as u64 {
            return true;
        }
        let need = kv.blocks_for(tokens as u64).saturating_sub(held);
        if need == 0 {
            return true;
        }
        if kv.allocate(need) {
            seq.blocks += need as u32;
            true
        } else {
            false
        }
    }

    fn free(kv: &mut KvCache, seq: &mut Seq) {
        kv.release(seq.blocks as u64);
        seq.blocks = 0;
        Self::unhold(kv, seq);
    }

    /// Gives back the cached units `seq` uses.
    fn unhold(kv: &mut KvCache, seq: &mut Seq) {
        kv.unuse(&seq.units[..seq.held]);
        seq.held = 0;
        seq.prefix_blocks = 0;
        seq.held_tokens = 0;
    }

    /// Starts `seq` from the longest cached prefix of its prompt.
    fn reuse(kv: &mut KvCache, seq: &mut Seq) {
        seq.held = kv.lookup(&seq.units, seq.prompt);
        for u in &seq.units[..seq.held] {
            seq.prefix_blocks += u.tokens / kv.block_size;
            seq.held_tokens += u.tokens;
        }
        seq.computed = seq.held_tokens;
    }

    /// The units `seq` has now computed become cached (its blocks move to
    /// the cache), in order, until one is cached already. Units may run past
    /// the prompt into the answer (vLLM caches every full block): a next
    /// turn that carries the answer reuses them.
    fn publish(kv: &mut KvCache, seq: &mut Seq) {
        while let Some(&u) = seq.units.get(seq.held) {
            let end = seq.held_tokens + u.tokens;
            if end > seq.computed || !kv.register(u) {
                return;
            }
            let blocks = u.tokens / kv.block_size;
            seq.blocks -= blocks;
            seq.prefix_blocks += blocks;
            seq.held_tokens = end;
            seq.held += 1;
        }
    }

    /// Plans the step that starts at `now`: which sequences get how many tokens.
    /// Returns the work for the cost model; [`Scheduler::finish_step`] applies it.
    pub fn plan(&mut self, now: f64) -> StepWork {
        if self.block_steps > 0 {
            // Inside a multi-step block: its decodes again, scheduled with
            // the block, so the step pays no scheduling overhead.
            let mut work = self.plan_kind(now, StepKind::Decodes);
            work.in_block = true;
            return work;
        }
        let work = self.plan_rules(now);
        if self.limits.multi_step > 1 && work.tokens > 0 && self.decodes_only() {
            self.block_steps = 1;
        }
        work
    }

    /// Every sequence scheduled in the planned step is decoding.
    fn decodes_only(&self) -> bool {
        let mut slots = self.scheduled.iter().peekable();
        self.running
            .iter()
            .all(|seq| slots.next_if(|s| s.id == seq.id).is_none() || !seq.prefilling())
    }

    /// A step by the engine's rules (no block open).
    fn plan_rules(&mut self, now: f64) -> StepWork {
        if self.limits.static_batch {
            // A static batch runs to its end (plan_kind admits no one into
            // it); the next is admitted and prefilled whole once it has.
            let prefilling = self.running.iter().any(|s| s.prefilling());
            let kind = match self.running.is_empty() || prefilling {
                true => StepKind::Prefills,
                false => StepKind::Decodes,
            };
            return self.plan_kind(now, kind);
        }
        if self.limits.mixed_steps {
            return self.plan_kind(now, StepKind::Mixed);
        }
        // Prefills first (SGLang, vLLM V0); decodes when no prompt can go.
        let prefilling = self.running.iter().any(|s| s.prefilling());
        let admissible =
            !self.waiting.is_empty() && (self.running.len() as u32) < self.limits.max_num_seqs;
        if prefilling || admissible {
            let work = self.plan_kind(now, StepKind::Prefills);
            if work.tokens > 0 {
                return work;
            }
        }
        self.plan_kind(now, StepKind::Decodes)
    }

    /// The tokens a sequence gets in a step with `budget` left, or `None`
    /// when it takes none in this kind of step.
    fn share(&self, seq: &Seq, kind: StepKind, budget: u32) -> Option<u32> {
        let need = seq.tokens() - seq.computed + self.drafts(seq);
        match kind {
            StepKind::Prefills if !seq.prefilling() => return None,
            StepKind::Decodes if seq.prefilling() => return None,
            _ => {}
        }
        if self.limits.chunked_prefill || need <= budget || self.limits.static_batch {
            Some(need.min(budget))
        } else if self.scheduled.iter().all(|s| s.new_tokens == 1) {
            // (Looked at only for a whole prompt over the budget: this runs
            // for every running request of every step.)
            // Without chunking the engines size their budget to the longest
            // prompt (vLLM V0: max_model_len; TensorRT-LLM refuses a prompt
            // over max_num_tokens): a long prompt goes whole, the step's
            // first prefill.
            Some(need)
        } else {
            None
        }
    }

    /// Draft tokens a decoding sequence verifies this step: k, or fewer
    /// near its last token (0 without speculative decoding, or prefilling).
    fn drafts(&self, seq: &Seq) -> u32 {
        match &self.spec {
            Some(s) if !seq.prefilling() => {
                s.k.min(seq.max_output.saturating_sub(seq.generated + 1))
            }
            _ => 0,
        }
    }

    fn plan_kind(&mut self, now: f64, kind: StepKind) -> StepWork {
        // A static batch in progress is closed to newcomers.
        let closed = self.limits.static_batch && !self.running.is_empty();
        self.scheduled.clear();
        self.preempted_in_step = 0;
        // A static batch's prompts go together, whatever the budget.
        let budget = match self.limits.static_batch {
            true => u32::MAX,
            false => self.limits.max_num_batched_tokens,
        };
        let budget = self.schedule_running(now, kind, budget);
        if self.preempted_in_step == 0 && kind != StepKind::Decodes && !closed {
            self.admit_waiting(now, kind, budget);
        }
        self.work()
    }

    /// Schedules the running sequences' shares in order, within `budget`,
    /// preempting the latest admitted while the KV cache is out of blocks;
    /// what is left of the budget. Scheduling stops at a sequence that had
    /// to preempt itself.
    fn schedule_running(&mut self, now: f64, kind: StepKind, mut budget: u32) -> u32 {
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let Some(n) = self.share(&self.running[i], kind, budget) else {
                i += 1;
                continue;
            };
            let target = self.running[i].computed + n;
            loop {
                let (kv, seq) = (&mut self.kv, &mut self.running[i]);
                if Self::grow(kv, seq, target) {
                    break;
                }
                let (victim, freed) = self.preempt_latest(now);
                budget = budget.saturating_add(freed);
                match victim.cmp(&i) {
                    std::cmp::Ordering::Equal => return budget, // it was the victim itself
                    std::cmp::Ordering::Less => i -= 1,         // one scheduled before it
                    std::cmp::Ordering::Greater => {}
                }
            }
            budget = budget.saturating_sub(n);
            let drafts = self.drafts(&self.running[i]).min(n.saturating_sub(1));
            self.scheduled.push(Slot {
                id: self.running[i].id,
                new_tokens: n,
                drafts,
            });
            i += 1;
        }
        budget
    }

    /// Out of blocks: the most recently admitted running request goes back
    /// to the front of the queue, its blocks freed, anything scheduled for
    /// it this step undone; where it was in `running`, and the step's
    /// tokens it gives back.
    fn preempt_latest(&mut self, now: f64) -> (usize, u32) {
        // Under the priority policy: the lowest-priority, latest-arrived.
        let at = match self.limits.priority_scheduling {
            true => (0..self.running.len())
                .max_by(|&a, &b| {
                    let key = |s: &Seq| (s.priority, s.arrived_at);
                    key(&self.running[a])
                        .partial_cmp(&key(&self.running[b]))
                        .unwrap_or(std::cmp::Ordering::Equal)
                })
                .expect("running is not empty here"),
            false => self.running.len() - 1,
        };
        let mut victim = self.running.remove(at);
        Self::free(&mut self.kv, &mut victim);
        victim.computed = 0;
        victim.preemptions += 1;
        victim.queued_at = now;
        self.preemptions_total += 1;
        self.preempted_in_step += 1;
        let freed = self
            .scheduled
            .iter()
            .filter(|s| s.id == victim.id)
            .map(|s| s.new_tokens)
            .sum();
        self.scheduled.retain(|s| s.id != victim.id);
        self.enqueue(victim, true);
        (at, freed)
    }

    /// Admits waiting requests in order while the budget, `max_num_seqs`
    /// and the KV cache allow; the first that does not fit stays first
    /// (head-of-line blocking).
    fn admit_waiting(&mut self, now: f64, kind: StepKind, mut budget: u32) {
        while budget > 0 && (self.running.len() as u32) < self.limits.max_num_seqs {
            let Some(mut seq) = self.waiting.pop_front() else {
                break;
            };
            let (queries, hits) = (self.kv.queries, self.kv.hits);
            if seq.computed == 0 {
                Self::reuse(&mut self.kv, &mut seq);
            }
            // A whole prompt that does not fit what is left of the budget,
            // or of the cache, waits for the next step; its lookup is undone
            // (it is looked up again when admitted).
            let fits = self.share(&seq, kind, budget).filter(|&n| {
                let target = seq.computed + n;
                Self::grow(&mut self.kv, &mut seq, target)
            });
            let Some(n) = fits else {
                Self::unhold(&mut self.kv, &mut seq);
                seq.computed = 0;
                (self.kv.queries, self.kv.hits) = (queries, hits);
                self.waiting.push_front(seq);
                break;
            };
            seq.cached_tokens.get_or_insert(seq.held_tokens);
            seq.queue_time += (now - seq.queued_at).max(0.0);
            seq.first_scheduled_at.get_or_insert(now);
            budget = budget.saturating_sub(n);
            self.scheduled.push(Slot {
                id: seq.id,
                new_tokens: n,
                drafts: 0,
            });
            self.running.push(seq);
        }
    }

    fn work(&self) -> StepWork {
        let mut w = StepWork::default();
        // `scheduled` follows `running` order, so one pass pairs them.
        let mut slots = self.scheduled.iter().peekable();
        for seq in &self.running {
            let Some(slot) = slots.next_if(|s| s.id == seq.id) else {
                continue;
            };
            let n = slot.new_tokens as u64;
            let p = seq.computed as f64;
            w.sequences += 1;
            w.tokens += n;
            w.encoder_flops += seq.encoder_flops;
            w.encoder_params_b = w.encoder_params_b.max(seq.encoder_params_b);
            w.attended += n as f64 * p + (n * n) as f64 / 2.0;
            w.kv_read_tokens += p;
            if slot.drafts > 0 {
                // Every position is verified: each needs its logits.
                w.logits += slot.new_tokens;
                w.drafting += 1;
                w.draft_context += p;
            } else if seq.computed + slot.new_tokens == seq.tokens() {
                w.logits += 1;
            }
        }
        w
    }

    /// Applies the planned step, once it has ended.
    pub fn finish_step(&mut self, work: StepWork) -> StepResult {
        let mut result = StepResult {
            work,
            preempted: self.preempted_in_step,
            emitted: std::mem::take(&mut self.spare.emitted),
            finished: std::mem::take(&mut self.spare.finished),
        };
        let mut slots = self.scheduled.iter().peekable();
        let mut i = 0;
        while i < self.running.len() {
            let Some(slot) = slots.next_if(|s| s.id == self.running[i].id) else {
                i += 1;
                continue;
            };
            let seq = &mut self.running[i];
            seq.computed += slot.new_tokens;
            seq.encoder_flops = 0.0; // encoded, once
            let decoded = seq.computed >= seq.tokens();
            let accepted = match &self.spec {
                Some(s) if decoded && slot.drafts > 0 => {
                    let n = s.accept(slot.drafts, |p| super::spec::draw(seq.id, seq.generated, p));
                    count_drafts(&mut self.spec_stats, slot.drafts, n);
                    n
                }
                _ => 0,
            };
            if decoded {
                // The KV of the rejected guesses is not kept.
                seq.computed = seq.tokens() + accepted;
            }
            // Whole prompt units become reusable once computed.
            if seq.held < seq.units.len() {
                Self::publish(&mut self.kv, seq);
            }
            if decoded {
                // The accepted guesses and one more token, together.
                let mut done = false;
                for _ in 0..=accepted {
                    seq.generated += 1;
                    done = seq.generated >= seq.max_output;
                    result.emitted.push((seq.id, seq.generated, done));
                    if done {
                        break;
                    }
                }
                if done {
                    let mut seq = self.running.remove(i);
                    Self::free(&mut self.kv, &mut seq);
                    result.finished.push(seq);
                    continue;
                }
            }
            i += 1;
        }
        self.close_block(result)
    }

    /// A step's result, read: its buffers serve the next step.
    pub fn recycle(&mut self, mut used: StepResult) {
        used.emitted.clear();
        used.finished.clear();
        self.spare = used;
    }

    /// Inside a multi-step block the step's tokens and finished requests
    /// wait for the block's last step (or for it to run out of decodes),
    /// which hands over the whole block's.
    fn close_block(&mut self, mut result: StepResult) -> StepResult {
        if self.block_steps == 0 {
            return result;
        }
        let ends = self.block_steps >= self.limits.multi_step
            || result.work.tokens == 0
            || !self.running.iter().any(|s| !s.prefilling());
        self.held.emitted.append(&mut result.emitted);
        self.held.finished.append(&mut result.finished);
        if !ends {
            self.block_steps += 1;
            return result;
        }
        self.block_steps = 0;
        result.emitted = std::mem::take(&mut self.held.emitted);
        result.finished = std::mem::take(&mut self.held.finished);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sched(blocks: u64, max_seqs: u32, budget: u32) -> Scheduler {
        Scheduler::new(
            Limits::v1(max_seqs, budget),
            KvCache::new(blocks, 16, false),
        )
    }

    fn run_step(s: &mut Scheduler, now: f64) -> StepResult {
        let w = s.plan(now);
        s.finish_step(w)
    }

    #[test]
    fn under_the_priority_policy_the_lowest_value_waits_least() {
        let mut limits = Limits::v1(1, 4096);
        limits.priority_scheduling = true;
        let mut s = Scheduler::new(limits, KvCache::new(1000, 16, false));
        for (id, p) in [(1, 5), (2, 0), (3, 5), (4, -1)] {
            let mut seq = Seq::new(id, 10, 10, id as f64);
            seq.priority = p;
            s.add(seq);
        }
        let order: Vec<u64> = s.waiting.iter().map(|q| q.id).collect();
        assert_eq!(order, vec![4, 2, 1, 3], "by priority, then arrival");
    }

    #[test]
    fn prefill_then_one_token_per_step() {
        let mut s = sched(100, 8, 2048);
        s.add(Seq::new(1, 100, 3, 0.0));
        let r = run_step(&mut s, 0.0);
        assert_eq!(r.work.tokens, 100);
        assert_eq!(
            r.emitted,
            vec![(1, 1, false)],
            "the prefill step yields the first token"
        );
        let r = run_step(&mut s, 0.01);
        assert_eq!(r.work.tokens, 1);
        let r = run_step(&mut s, 0.02);
        assert_eq!(r.emitted, vec![(1, 3, true)]);
        assert!(s.is_idle());
        assert_eq!(s.kv.usage(), 0.0);
    }

    #[test]
    fn chunked_prefill_shares_the_budget_with_decodes() {
        let mut s = sched(1000, 8, 512);
        s.add(Seq::new(1, 10, 100, 0.0));
        run_step(&mut s, 0.0);
        s.add(Seq::new(2, 2000, 5, 0.0));
        let r = run_step(&mut s, 0.01);
        // One decode for request 1, 511 prompt tokens for request 2.
        assert_eq!(r.work.tokens, 512);
        assert_eq!(r.emitted.len(), 1);
        let mut steps = 1;
        while s.running.iter().find(|q| q.id == 2).unwrap().generated == 0 {
            run_step(&mut s, 0.01 * steps as f64);
            steps += 1;
        }
        assert_eq!(steps, 4, "2000 prompt tokens in chunks of 511");
    }

    fn with_rules(chunked_prefill: bool, mixed_steps: bool) -> Scheduler {
        let limits = Limits {
            chunked_prefill,
            mixed_steps,
            ..Limits::v1(8, 512)
        };
        Scheduler::new(limits, KvCache::new(1000, 16, false))
    }

    #[test]
    fn without_chunked_prefill_a_prompt_goes_whole_beside_the_decodes() {
        let mut s = with_rules(false, true);
        s.add(Seq::new(1, 10, 100, 0.0));
        run_step(&mut s, 0.0);
        s.add(Seq::new(2, 2000, 5, 0.0));
        let r = run_step(&mut s, 0.01);
        assert_eq!(r.work.tokens, 1 + 2000, "one decode and the whole prompt");
        assert_eq!(
            r.emitted.len(),
            2,
            "the prompt's first token in that same step"
        );
        // A second long prompt does not join a step that already has one.
        s.add(Seq::new(3, 600, 5, 0.0));
        s.add(Seq::new(4, 600, 5, 0.0));
        let r = run_step(&mut s, 0.02);
        assert_eq!(r.work.tokens, 2 + 600, "two decodes and one whole prompt");
    }

    #[test]
    fn separate_steps_run_prefills_first_and_the_decodes_wait() {
        let mut s = with_rules(true, false);
        s.add(Seq::new(1, 10, 100, 0.0));
        run_step(&mut s, 0.0);
        s.add(Seq::new(2, 1000, 5, 0.0));
        // 1000 prompt tokens in chunks of 512: two prefill steps, request 1 waits.
        let r = run_step(&mut s, 0.01);
        assert_eq!((r.work.tokens, r.emitted.len()), (512, 0));
        let r = run_step(&mut s, 0.02);
        assert_eq!(r.work.tokens, 488);
        assert_eq!(r.emitted, vec![(2, 1, false)]);
        // Then a decode step for both.
        let r = run_step(&mut s, 0.03);
        assert_eq!(r.work.tokens, 2);
        assert_eq!(r.emitted.len(), 2);
    }

    #[test]
    fn max_num_seqs_caps_admission() {
        let mut s = sched(1000, 2, 8192);
        for id in 0..5 {
            s.add(Seq::new(id, 10, 10, 0.0));
        }
        run_step(&mut s, 0.0);
        assert_eq!(s.running.len(), 2);
        assert_eq!(s.waiting.len(), 3);
    }

    #[test]
    fn out_of_blocks_preempts_the_newest_and_requeues_it_first() {
        // 6 blocks of 16: two sequences of 40 prompt tokens take 3 each.
        let mut s = sched(6, 8, 8192);
        s.add(Seq::new(1, 40, 100, 0.0));
        s.add(Seq::new(2, 40, 100, 0.0));
        s.add(Seq::new(3, 10, 10, 0.0));
        run_step(&mut s, 0.0);
        assert_eq!(s.running.len(), 2, "request 3 waits: no blocks");
        let mut t = 0.01;
        while s.preemptions_total == 0 {
            run_step(&mut s, t);
            t += 0.01;
        }
        // Request 1 crossed into a 4th block: request 2 (admitted last) was preempted.
        assert_eq!(s.running.iter().map(|q| q.id).collect::<Vec<_>>(), vec![1]);
        assert_eq!(s.waiting.front().unwrap().id, 2);
        assert_eq!(
            s.waiting.front().unwrap().computed,
            0,
            "recompute from scratch"
        );
        assert_eq!(s.waiting.front().unwrap().preemptions, 1);
    }

    #[test]
    fn under_the_priority_policy_the_low_priority_is_preempted_even_when_scheduled_first() {
        // 6 blocks of 16: a low-priority request of 40 prompt tokens, then
        // a high-priority one of 47 that crosses into a 4th block first.
        let mut limits = Limits::v1(8, 8192);
        limits.priority_scheduling = true;
        let mut s = Scheduler::new(limits, KvCache::new(6, 16, false));
        let mut low = Seq::new(1, 40, 100, 0.0);
        low.priority = 10;
        s.add(low);
        run_step(&mut s, 0.0);
        s.add(Seq::new(2, 47, 100, 0.01));
        let mut t = 0.01;
        let work = loop {
            let w = s.plan(t);
            if s.preemptions_total > 0 {
                break w;
            }
            s.finish_step(w);
            t += 0.01;
        };
        // The victim stood before the request that needed the block: it
        // is taken out of the step, and the step goes on with the other.
        assert_eq!(s.running.iter().map(|q| q.id).collect::<Vec<_>>(), vec![2]);
        assert_eq!(
            s.scheduled.iter().map(|x| x.id).collect::<Vec<_>>(),
            vec![2]
        );
        assert_eq!(s.waiting.front().unwrap().id, 1);
        assert_eq!(s.waiting.front().unwrap().computed, 0);
        let r = s.finish_step(work);
        assert_eq!(r.emitted.len(), 1, "only the high-priority request's token");
    }

    #[test]
    fn no_admission_in_a_step_that_preempted() {
        let mut s = sched(6, 8, 8192);
        s.add(Seq::new(1, 47, 100, 0.0)); // 3 blocks, crosses into the 4th at its 2nd token
        s.add(Seq::new(2, 48, 100, 0.0)); // 3 blocks, full
        run_step(&mut s, 0.0);
        s.add(Seq::new(3, 1, 1, 0.0));
        let r = run_step(&mut s, 0.01);
        assert_eq!(r.preempted, 1);
        assert_eq!(s.preemptions_total, 1);
        assert!(
            s.running.iter().all(|q| q.id != 3),
            "nothing admitted in the preempting step"
        );
    }

    #[test]
    fn abort_frees_the_blocks() {
        let mut s = sched(10, 8, 8192);
        s.add(Seq::new(1, 100, 50, 0.0));
        s.add(Seq::new(2, 10, 50, 0.0));
        run_step(&mut s, 0.0);
        assert!(s.kv.usage() > 0.5);
        assert!(s.abort(1));
        assert!(s.kv.usage() < 0.2);
        assert!(!s.abort(1));
    }

    #[test]
    fn shared_prefix_hits_the_cache() {
        let mut s = Scheduler::new(Limits::v1(8, 8192), KvCache::new(100, 16, true));
        let units: Arc<[Unit]> = super::super::kv::shared_prefix_units(9, 64, 16).into();
        let mut a = Seq::new(1, 100, 2, 0.0);
        a.units = units.clone();
        s.add(a);
        run_step(&mut s, 0.0);
        let mut b = Seq::new(2, 100, 2, 0.0);
        b.units = units;
        s.add(b);
        let r = run_step(&mut s, 0.01);
        // Request 1 decodes 1 token, request 2 computes 100 − 64 prompt tokens.
        assert_eq!(r.work.tokens, 1 + 36);
        assert_eq!(s.kv.hits, 64);
        assert_eq!(s.running[0].id, 2);
        assert_eq!(s.running[0].cached_tokens, Some(64));
        assert_eq!(
            r.finished[0].cached_tokens,
            Some(0),
            "request 1 found nothing"
        );
    }

    #[test]
    fn a_multi_step_block_admits_nobody_and_hands_its_tokens_over_at_its_end() {
        let limits = Limits {
            chunked_prefill: false,
            mixed_steps: false,
            multi_step: 4,
            ..Limits::v1(8, 4096)
        };
        let mut s = Scheduler::new(limits, KvCache::new(1000, 16, false));
        s.add(Seq::new(1, 10, 100, 0.0));
        let r = run_step(&mut s, 0.0);
        assert_eq!(
            r.emitted,
            vec![(1, 1, false)],
            "a prefill step hands over at once"
        );
        // Decodes alone: a block of four starts.
        let w = s.plan(0.01);
        assert!(
            !w.in_block,
            "the block's first step is scheduled (pays the overhead)"
        );
        assert!(
            s.finish_step(w).emitted.is_empty(),
            "held for the block's end"
        );
        s.add(Seq::new(2, 10, 5, 0.015));
        for step in 2..=3 {
            let w = s.plan(0.01 * step as f64);
            assert!(w.in_block, "step {step} of the block is scheduled with it");
            assert_eq!(w.sequences, 1, "request 2 is not admitted inside the block");
            assert!(s.finish_step(w).emitted.is_empty());
        }
        let r = run_step(&mut s, 0.04);
        assert_eq!(
            r.emitted,
            vec![(1, 2, false), (1, 3, false), (1, 4, false), (1, 5, false)],
            "the block's four tokens, together"
        );
        let w = s.plan(0.05);
        assert_eq!(w.tokens, 10, "after the block, request 2's prefill");
    }

    #[test]
    fn a_block_ends_early_when_its_last_request_finishes() {
        let limits = Limits {
            multi_step: 8,
            ..Limits::v1(8, 4096)
        };
        let mut s = Scheduler::new(limits, KvCache::new(1000, 16, false));
        s.add(Seq::new(1, 10, 3, 0.0));
        run_step(&mut s, 0.0);
        assert!(run_step(&mut s, 0.01).emitted.is_empty());
        let r = run_step(&mut s, 0.02);
        assert_eq!(r.emitted, vec![(1, 2, false), (1, 3, true)]);
        assert_eq!(r.finished.len(), 1, "finished with its last token");
        assert!(s.is_idle());
    }
}
