//! From records to numbers, exactly as `docs/metrics.md` defines them.

use crate::compare::{self, RunValues};
use crate::cost::{Cost, GpuPrice, Produced};
use crate::record::{RequestRecord, TokenSource};
use crate::results::{
    AdapterFigures, CacheHits, Counts, ErrorSample, Fidelity, Latency, ObjectiveResult, SloReport,
    SteadyWindow, Throughput, Tokens, Window,
};
use crate::slo::{Slo, SloMetric, Verdict};
use crate::stats::Distribution;
use std::collections::BTreeMap;

const US: f64 = 1e-6;
/// Distributions hold microseconds; summaries report milliseconds.
const US_TO_MS: f64 = 1e-3;

/// Everything computed from the records alone.
#[derive(Debug, Clone)]
pub struct Measured {
    /// `--lora`: each adapter's figures.
    pub adapters: BTreeMap<String, AdapterFigures>,
    /// `--class`: each class's figures, under its own SLO (else the run's).
    pub classes: BTreeMap<String, AdapterFigures>,
    /// The media the requests carried, when any did.
    pub media: Option<crate::results::MediaFigures>,
    /// `--response-format`: the answers' checks.
    pub structured_output: Option<crate::results::StructuredOutput>,
    /// `--tools`: the calls the answers made.
    pub tool_calls: Option<crate::results::ToolCallFigures>,
    /// `--grade`: the answers graded, and those right (the rule is the
    /// run's, which records do not carry: `GradeTally::finish` takes it).
    pub grades: crate::grading::GradeTally,
    /// `--multi-turn`: whole sessions.
    pub sessions: Option<crate::results::SessionFigures>,
    /// `--workflow`: whole workflows, each step's figures, and the
    /// findings on the graph's shape.
    pub workflows: Option<crate::results::WorkflowFigures>,
    pub steps: BTreeMap<String, AdapterFigures>,
    pub workflow_findings: Vec<crate::results::Finding>,
    /// The speech APIs' figures, and their records for the findings
    /// (which name the run's load: [`crate::speech::SpeechTally::findings`]).
    pub speech: Option<crate::results::SpeechFigures>,
    pub speech_tally: crate::speech::SpeechTally,
    pub window: Window,
    pub latency: Latency,
    pub throughput: Throughput,
    pub counts: Counts,
    pub tokens: Tokens,
    pub fidelity: Fidelity,
    pub slo: Option<SloReport>,
    pub cost: Option<Cost>,
    /// TTFT against send time over the last half of the sending
    /// ([`crate::overload`]): whether an open loop's queue grew.
    pub queue_growth: Option<crate::overload::QueueGrowth>,
}

/// Computes the run's metrics over the measured (non-warm-up) records.
pub fn measure(records: &[RequestRecord], slo: Option<&Slo>, price: Option<GpuPrice>) -> Measured {
    let mut agg = Aggregator::new(slo.cloned(), price);
    records.iter().for_each(|r| agg.add(r));
    agg.finish()
}

/// Multi-turn TTFT is kept per turn up to this index; later turns are
/// pooled under it, so memory stays flat whatever the sessions' length.
pub const MAX_TURN_KEPT: u32 = 32;

/// Token slots kept before their grid doubles: 4 MiB, 2.9 hours of 10 ms.
pub const MAX_TOKEN_SLOTS: usize = 1 << 20;

pub use crate::instants::GRID_US;

/// At most this many distinct (kind, message) pairs are told apart for the
/// top errors; beyond, they are counted under their kind only.
const MAX_MESSAGES: usize = 10_000;

/// The run's figures from its records one at a time, in memory that does not
/// grow with the run's tokens: distributions are HDR histograms, tokens are
/// summed per 10 ms slot of the run's clock (a coarser slot past
/// [`MAX_TOKEN_SLOTS`]), and each request keeps only its send and end
/// instants and its intended start (24 bytes, for the exact concurrency and
/// arrival statistics) until a run too long for that tallies them on a grid
/// ([`crate::instants`]). Records may come in any order.
#[derive(Debug, Clone)]
pub struct Aggregator {
    slo: Option<Slo>,
    price: Option<GpuPrice>,
    warmup: u64,
    counts: Counts,
    messages: BTreeMap<(String, String), u64>,
    /// Every measured request's send, end and intended start.
    instants: crate::instants::Instants,
    /// Every measured request's TTFT by its send (the report's chart);
    /// `None` in an adapter's own aggregator.
    ttft_by_sent: Option<crate::ttft_by_sent::TtftBySent>,
    /// Lengths asked and delivered (see [`Fidelity`]).
    input_asked: Distribution,
    input_served: Distribution,
    output_asked: Distribution,
    output_delivered: Distribution,
    /// Output tokens of successful measured requests per slot of
    /// `grid_us` (10 ms, doubled each time the run passes [`MAX_TOKEN_SLOTS`]
    /// of them), by chunk arrival.
    tokens_per_slot: Vec<u32>,
    grid_us: u64,
    ttft: Distribution,
    answer_start: Distribution,
    /// Thinking time and the answer phase's TPOT, of requests that reasoned.
    reasoning_span: Distribution,
    answer_tpot: Distribution,
    /// Answer start where a request reasoned, TTFT where it did not: what
    /// an `answer_start` objective is judged on.
    answer_or_ttft: Distribution,
    ttft_sched: Distribution,
    tpot: Distribution,
    /// Gaps of requests whose every chunk carried one token: their ITL and
    /// ICL are the same values, recorded once (the per-token cost halves).
    single_token_gaps: Distribution,
    /// ITL and ICL of requests with multi-token chunks.
    itl_multi: Distribution,
    icl_multi: Distribution,
    e2e: Distribution,
    lag: Distribution,
    per_user: Distribution,
    ttft_by_turn: BTreeMap<u32, Distribution>,
    tokens: Tokens,
    cache: CacheHits,
    good_requests: u64,
    good_tokens: u64,
    /// `--lora`: each adapter's requests, aggregated apart too (`None` in
    /// an adapter's own aggregator, which splits no further).
    by_adapter: Option<BTreeMap<String, Aggregator>>,
    /// `--class`: each class's requests apart, likewise, each under its SLO.
    by_class: Option<BTreeMap<String, Aggregator>>,
    /// `--class NAME:…:slo=SPEC`: a class's own SLO.
    class_slos: BTreeMap<String, Slo>,
    /// `--abandoned-in-latency`: the leavers' TTFT and gaps are counted.
    abandoned_in_latency: bool,
    /// `--workflow`: each step's requests apart, likewise.
    by_step: Option<BTreeMap<String, Aggregator>>,
    workflows: crate::workflows::WorkflowTally,
    speech: crate::speech::SpeechTally,
    media: crate::media::MediaTally,
    formats: crate::formats::FormatTally,
    tool_calls: crate::tool_calls::ToolTally,
    grades: crate::grading::GradeTally,
    sessions: crate::sessions::SessionTally,
    finish_gaps: crate::waves::FinishGaps,
}

/// Adapters kept apart past this many are pooled under one name, so a
/// mistaken flag cannot make the figures grow without bound.
const MAX_ADAPTERS: usize = 64;

/// Adds `r` to its group's aggregator in `apart` (made by `make`), past
/// [`MAX_ADAPTERS`] groups pooled as `(others)`; nothing without `apart`.
fn add_apart(
    apart: &mut Option<BTreeMap<String, Aggregator>>,
    name: &str,
    make: impl FnOnce() -> Aggregator,
    r: &RequestRecord,
) {
    let Some(apart) = apart.as_mut() else { return };
    let full = apart.len() >= MAX_ADAPTERS && !apart.contains_key(name);
    let key = if full { "(others)" } else { name };
    apart.entry(key.to_string()).or_insert_with(make).add(r);
}

/// Each group's figures, its rates over the run's window (`window_s`).
fn figures_apart(
    apart: &mut Option<BTreeMap<String, Aggregator>>,
    window_s: f64,
) -> BTreeMap<String, AdapterFigures> {
    let rate = |x: f64| if window_s > 0.0 { x / window_s } else { 0.0 };
    apart
        .iter_mut()
        .flatten()
        .map(|(name, agg)| {
            let m = agg.finish();
            let figures = AdapterFigures {
                requests: m.counts.requests,
                succeeded: m.counts.succeeded,
                failed: m.counts.failed,
                ttft_ms: m.latency.ttft_ms,
                tpot_ms: m.latency.tpot_ms,
                e2e_ms: m.latency.e2e_ms,
                output_tokens: m.tokens.output_total,
                output_tokens_per_s: rate(m.tokens.output_total as f64),
                requests_per_s: rate(m.counts.succeeded as f64),
                slo: m.slo,
            };
            (name.clone(), figures)
        })
        .collect()
}

impl Aggregator {
    /// A group's own aggregator (an adapter's, a class's): it splits no
    /// further and keeps no TTFT-by-send series.
    fn part(slo: Option<Slo>, price: Option<GpuPrice>) -> Aggregator {
        Aggregator {
            by_adapter: None,
            by_class: None,
            by_step: None,
            ttft_by_sent: None,
            ..Aggregator::new(slo, price)
        }
    }

    /// `--class NAME:…:slo=SPEC`: each named class judged by its own SLO.
    pub fn with_class_slos(mut self, slos: BTreeMap<String, Slo>) -> Aggregator {
        self.class_slos = slos;
        self
    }

    /// `--abandoned-in-latency`: a leaver's TTFT and the gaps between
    /// the tokens it got count in TTFT and ITL (the server did serve
    /// them); its TPOT and E2E, cut short by the user, never do.
    pub fn with_abandoned_in_latency(mut self, yes: bool) -> Aggregator {
        self.abandoned_in_latency = yes;
        self
    }

    pub fn new(slo: Option<Slo>, price: Option<GpuPrice>) -> Aggregator {
        Aggregator {
            slo,
            price,
            warmup: 0,
            counts: Counts::default(),
            messages: BTreeMap::new(),
            instants: Default::default(),
            ttft_by_sent: Some(Default::default()),
            grid_us: GRID_US,
            input_asked: Distribution::new(),
            input_served: Distribution::new(),
            output_asked: Distribution::new(),
            output_delivered: Distribution::new(),
            tokens_per_slot: Vec::new(),
            ttft: Distribution::new(),
            answer_start: Distribution::new(),
            reasoning_span: Distribution::new(),
            answer_tpot: Distribution::new(),
            answer_or_ttft: Distribution::new(),
            ttft_sched: Distribution::new(),
            tpot: Distribution::new(),
            single_token_gaps: Distribution::new(),
            itl_multi: Distribution::new(),
            icl_multi: Distribution::new(),
            e2e: Distribution::new(),
            lag: Distribution::new(),
            per_user: Distribution::new(),
            ttft_by_turn: BTreeMap::new(),
            tokens: Tokens::default(),
            cache: CacheHits::default(),
            good_requests: 0,
            by_adapter: Some(BTreeMap::new()),
            by_class: Some(BTreeMap::new()),
            class_slos: BTreeMap::new(),
            abandoned_in_latency: false,
            by_step: Some(BTreeMap::new()),
            workflows: Default::default(),
            speech: Default::default(),
            media: Default::default(),
            formats: Default::default(),
            tool_calls: Default::default(),
            grades: Default::default(),
            sessions: Default::default(),
            finish_gaps: Default::default(),
            good_tokens: 0,
        }
    }

    /// Takes one record into the figures; the record can then be dropped.
    pub fn add(&mut self, r: &RequestRecord) {
        if r.warmup {
            self.warmup += 1;
            return;
        }
        let (price, leavers) = (self.price, self.abandoned_in_latency);
        let part = move |slo| Aggregator::part(slo, price).with_abandoned_in_latency(leavers);
        if let Some(name) = &r.adapter {
            let slo = self.slo.clone();
            add_apart(&mut self.by_adapter, name, || part(slo), r);
        }
        if let Some(name) = &r.class {
            let slo = self
                .class_slos
                .get(name)
                .cloned()
                .or_else(|| self.slo.clone());
            add_apart(&mut self.by_class, name, || part(slo), r);
        }
        if let Some(call) = &r.workflow {
            let slo = self.slo.clone();
            add_apart(&mut self.by_step, &call.step, || part(slo), r);
        }
        self.workflows.add(r);
        self.speech.add(r);
        self.count(r);
        self.instants
            .add(r.sent_at_us, r.done_at_us, r.succeeded(), r.scheduled_at_us);
        self.lag.record(r.lag_us() as f64);
        if let (Some(t), Some(ttft)) = (&mut self.ttft_by_sent, r.ttft_us()) {
            t.add(r.sent_at_us, ttft);
        }
        self.sessions.add(r);
        if r.abandoned() && self.abandoned_in_latency {
            self.time_served(r);
        }
        if !r.succeeded() {
            return;
        }
        self.time(r);
        self.finish_gaps.add(r.done_at_us);
        self.media.add(r);
        self.formats.add(r);
        self.tool_calls.add(r);
        self.grades.add(r);
        self.count_tokens(r);
        self.lengths(r);
        if self.slo.as_ref().is_some_and(|s| s.request_is_good(r)) {
            self.good_requests += 1;
            self.good_tokens = self.good_tokens.saturating_add(r.output_tokens);
        }
    }

    fn count(&mut self, r: &RequestRecord) {
        let c = &mut self.counts;
        c.requests += 1;
        c.short_outputs += r.short_output() as u64;
        c.waited_for_slot += r.waited_for_slot as u64;
        c.retried += (r.retries > 0) as u64;
        c.implausible_usage += r.implausible_usage.is_some() as u64;
        c.retried_succeeded += (r.retries > 0 && r.succeeded()) as u64;
        let Some(kind) = r.error_kind else {
            c.succeeded += 1;
            return;
        };
        if r.abandoned() {
            c.abandoned += 1;
            return;
        }
        c.failed += 1;
        *c.errors.entry(kind.to_string()).or_insert(0) += 1;
        let message = r.error.clone().unwrap_or_default();
        let key = (kind.to_string(), message);
        if self.messages.len() < MAX_MESSAGES || self.messages.contains_key(&key) {
            *self.messages.entry(key).or_insert(0) += 1;
        }
    }

    /// What a leaver was served before it left: its TTFT and its gaps.
    fn time_served(&mut self, r: &RequestRecord) {
        if let Some(v) = r.ttft_us() {
            self.ttft.record(v as f64);
        }
        if let Some(v) = r.ttft_from_scheduled_us() {
            self.ttft_sched.record(v as f64);
        }
        self.gaps(r);
    }

    fn gaps(&mut self, r: &RequestRecord) {
        if r.chunks.iter().all(|c| c.tokens() <= 1) {
            self.single_token_gaps.record_all_us(r.chunk_gaps_us());
        } else {
            for (gap, k) in r.itl_us() {
                self.itl_multi.record_n(gap, k as u64);
            }
            self.icl_multi.record_all_us(r.chunk_gaps_us());
        }
    }

    fn time(&mut self, r: &RequestRecord) {
        if let Some(v) = r.ttft_us() {
            self.ttft.record(v as f64);
            if let Some(turn) = r.turn {
                let d = self.ttft_by_turn.entry(turn.min(MAX_TURN_KEPT));
                d.or_default().record(v as f64);
            }
        }
        if let Some(v) = r.ttft_from_scheduled_us() {
            self.ttft_sched.record(v as f64);
        }
        if let Some(v) = r.answer_start_us().filter(|_| r.reasoning_tokens.is_some()) {
            self.answer_start.record(v as f64);
        }
        if let Some(v) = r.reasoning_span_us() {
            self.reasoning_span.record(v as f64);
        }
        if let Some(v) = r.answer_tpot_us() {
            self.answer_tpot.record(v);
        }
        if self.slo.is_some() {
            if let Some(v) = r.answer_start_or_ttft_us() {
                self.answer_or_ttft.record(v as f64);
            }
        }
        if let Some(v) = r.tpot_us() {
            self.tpot.record(v);
            if v > 0.0 {
                self.per_user.record(1e6 / v * 1e3); // milli-tokens/s keeps 3 digits
            }
        }
        self.gaps(r);
        self.e2e.record(r.e2e_us() as f64);
    }

    fn count_tokens(&mut self, r: &RequestRecord) {
        if let Some(last) = r.chunks.last() {
            while last.at_us() / self.grid_us >= MAX_TOKEN_SLOTS as u64 {
                self.coarsen_slots();
            }
            let slot = (last.at_us() / self.grid_us) as usize;
            if slot >= self.tokens_per_slot.len() {
                self.tokens_per_slot.resize(slot + 1, 0);
            }
        }
        let t = &mut self.tokens;
        // Saturating: a total never wraps round to a small number.
        t.input_total = t.input_total.saturating_add(r.input_tokens.unwrap_or(0));
        t.output_total = t.output_total.saturating_add(r.output_tokens);
        if let Some(n) = r.items {
            t.items_total = Some(t.items_total.unwrap_or(0).saturating_add(n));
        }
        if let Some(n) = r.reasoning_tokens {
            let s = t.reasoning.get_or_insert_with(Default::default);
            s.tokens = s.tokens.saturating_add(n);
            s.requests += 1;
            s.hidden_requests += u64::from(r.reasoning_hidden);
            s.budget_spent_requests += u64::from(r.thinking_budget_spent());
            *s.sources
                .entry(source_name(r.reasoning_token_source))
                .or_insert(0) += 1;
        }
        *t.input_sources
            .entry(source_name(r.input_token_source))
            .or_insert(0) += 1;
        if let (Some(cached), Some(prompt)) = (r.cached_tokens, r.input_tokens) {
            let c = &mut self.cache;
            c.requests += 1;
            c.prompt_tokens = c.prompt_tokens.saturating_add(prompt);
            c.cached_tokens = c.cached_tokens.saturating_add(cached.min(prompt));
        }
        *t.output_sources
            .entry(source_name(r.output_token_source))
            .or_insert(0) += 1;
        let mut single = 0u64; // most chunks carry one token: counted apart
        for c in &r.chunks {
            match c.tokens() {
                1 => single += 1,
                k => *t.tokens_per_chunk.entry(k).or_insert(0) += 1,
            }
            let slot = &mut self.tokens_per_slot[(c.at_us() / self.grid_us) as usize];
            *slot = slot.saturating_add(c.tokens());
        }
        if single > 0 {
            *t.tokens_per_chunk.entry(1).or_insert(0) += single;
        }
    }

    /// Lengths asked and delivered, for the workload's fidelity.
    fn lengths(&mut self, r: &RequestRecord) {
        if let Some(n) = r.requested_input_tokens {
            self.input_asked.record(n as f64);
        }
        if let (Some(n), Some(TokenSource::ServerUsage)) = (r.input_tokens, r.input_token_source) {
            self.input_served.record(n as f64);
        }
        if let Some(n) = r.requested_output_tokens {
            self.output_asked.record(n as f64);
        }
        self.output_delivered.record(r.output_tokens as f64);
    }

    fn fidelity(&mut self) -> Fidelity {
        Fidelity {
            input_tokens_asked: self.input_asked.summary(1.0),
            input_tokens_served: self.input_served.summary(1.0),
            output_tokens_asked: self.output_asked.summary(1.0),
            output_tokens_delivered: self.output_delivered.summary(1.0),
            early_stops: self.counts.short_outputs,
            arrivals: self.instants.arrivals(),
        }
    }

    /// Doubles the token grid: each pair of slots becomes one.
    fn coarsen_slots(&mut self) {
        let pairs = self.tokens_per_slot.chunks(2);
        self.tokens_per_slot = pairs
            .map(|p| p.iter().fold(0u32, |a, &t| a.saturating_add(t)))
            .collect();
        self.grid_us *= 2;
    }

    /// The grid the steady window is rounded to: the coarser of the
    /// tokens' and the tallied instants'.
    fn grid(&self) -> u64 {
        self.grid_us.max(self.instants.grid_us())
    }

    /// Output tokens per second of the run, by chunk arrival (for charts).
    pub fn tokens_per_second(&self) -> Vec<f64> {
        if self.grid_us > 1_000_000 {
            // A run of days: each second gets its slot's mean.
            let per = (self.grid_us / 1_000_000) as usize;
            let each = |&t: &u32| std::iter::repeat_n(t as f64 / per as f64, per);
            return self.tokens_per_slot.iter().flat_map(each).collect();
        }
        let per = (1_000_000 / self.grid_us) as usize;
        self.tokens_per_slot
            .chunks(per)
            .map(|c| c.iter().map(|&t| t as f64).sum())
            .collect()
    }

    /// Time-weighted in-flight requests per second of the run (for charts).
    pub fn in_flight_per_second(&self) -> Vec<f64> {
        self.instants.in_flight_per_second()
    }

    /// The last send of the measured requests, µs.
    pub fn last_sent_us(&self) -> Option<u64> {
        self.instants.last_sent()
    }

    /// Each measured request's (send µs, TTFT µs), failed ones with a first
    /// token too; `None` when the run had too many to keep.
    pub fn ttft_by_sent(&self) -> Option<impl Iterator<Item = (u64, u64)> + '_> {
        self.ttft_by_sent.as_ref()?.points()
    }

    /// The latency distributions, µs (for charts): TTFT, TPOT, ITL, E2E.
    pub fn distributions(&self) -> [(&'static str, Distribution); 4] {
        [
            ("TTFT", self.ttft.clone()),
            ("TPOT", self.tpot.clone()),
            ("ITL", self.merged_itl()),
            ("E2E", self.e2e.clone()),
        ]
    }

    /// Answer start where a request reasoned, TTFT where it did not (kept
    /// with an SLO only): what an `answer_start` objective is judged on.
    pub fn answer_or_ttft(&self) -> &Distribution {
        &self.answer_or_ttft
    }

    /// Realtime sessions' lags, every delta's (µs).
    pub fn realtime_lag(&self) -> &Distribution {
        self.speech.lag()
    }

    fn merged_itl(&self) -> Distribution {
        let mut itl = self.single_token_gaps.clone();
        itl.merge(&self.itl_multi);
        itl
    }

    /// The figures. Sorts what it keeps per request in place (no copy of
    /// it is made, so the run's peak memory stays that of the aggregator).
    pub fn finish(&mut self) -> Measured {
        let itl = self.merged_itl();
        let window = self.window();
        let latency = self.latency(&itl);
        let counts = self.counts(&itl);
        let tokens = self.tokens();
        let throughput = self.throughput(window.duration_s, &tokens, &counts);
        let slo = self.slo.as_ref().map(|s| {
            let samples = |m: SloMetric| match m {
                SloMetric::Ttft => &self.ttft,
                SloMetric::AnswerStart => &self.answer_or_ttft,
                SloMetric::Tpot => &self.tpot,
                SloMetric::Itl => &itl,
                SloMetric::E2e => &self.e2e,
                SloMetric::Lag => self.speech.lag(),
            };
            slo_report(s, samples, &latency, self.good_requests)
        });
        let cost = self.cost(window.duration_s, &tokens, &counts);
        let adapters = figures_apart(&mut self.by_adapter, window.duration_s);
        let classes = figures_apart(&mut self.by_class, window.duration_s);
        let steps = figures_apart(&mut self.by_step, window.duration_s);
        Measured {
            workflows: self.workflows.finish(),
            workflow_findings: self.workflows.findings(),
            speech: self.speech.finish(window.duration_s),
            speech_tally: self.speech.clone(),
            steps,
            adapters,
            classes,
            media: self.media.finish(),
            structured_output: self.formats.finish(),
            tool_calls: self.tool_calls.finish(),
            grades: self.grades,
            sessions: self.sessions.finish(),
            window,
            latency,
            throughput,
            counts,
            tokens,
            fidelity: self.fidelity(),
            slo,
            cost,
            queue_growth: self
                .ttft_by_sent()
                .and_then(crate::overload::QueueGrowth::fit),
        }
    }

    /// Each latency's summary, ms; ITL is `itl`, the merged gaps.
    fn latency(&mut self, itl: &Distribution) -> Latency {
        let mut icl = self.single_token_gaps.clone();
        icl.merge(&self.icl_multi);
        Latency {
            ttft_ms: self.ttft.summary(US_TO_MS),
            answer_start_ms: self.answer_start.summary(US_TO_MS),
            reasoning_ms: self.reasoning_span.summary(US_TO_MS),
            answer_tpot_ms: self.answer_tpot.summary(US_TO_MS),
            ttft_from_scheduled_ms: self.ttft_sched.summary(US_TO_MS),
            tpot_ms: self.tpot.summary(US_TO_MS),
            itl_ms: itl.summary(US_TO_MS),
            icl_ms: icl.summary(US_TO_MS),
            e2e_ms: self.e2e.summary(US_TO_MS),
            client_lag_ms: self.lag.summary(US_TO_MS),
            ttft_ms_by_turn: self
                .ttft_by_turn
                .iter()
                .filter_map(|(&turn, d)| Some((turn, d.summary(US_TO_MS)?)))
                .collect(),
        }
    }

    /// The counts, with the warm-up, the commonest errors and the requests
    /// that ended in the same step as the one before (within half the ITL p50).
    fn counts(&self, itl: &Distribution) -> Counts {
        let mut counts = self.counts.clone();
        counts.warmup = self.warmup;
        counts.top_errors = top_errors(&self.messages);
        counts.finished_together = itl
            .quantile(0.5)
            .map_or(0, |p50| self.finish_gaps.within(p50 / 2.0));
        counts
    }

    /// The token counts, with what is derived from them: answer tokens,
    /// whether chunks carried several, the prefix cache's hit rate.
    fn tokens(&self) -> Tokens {
        let mut tokens = self.tokens.clone();
        if let Some(r) = &mut tokens.reasoning {
            r.answer_tokens = tokens.output_total.saturating_sub(r.tokens);
        }
        tokens.multi_token_chunks = tokens.tokens_per_chunk.keys().any(|&k| k > 1);
        tokens.prefix_cache = (self.cache.requests > 0).then(|| CacheHits {
            hit_rate: self.cache.cached_tokens as f64 / self.cache.prompt_tokens.max(1) as f64,
            ..self.cache.clone()
        });
        tokens
    }

    /// The rates over the run's window (`window_s`; none in an empty one).
    fn throughput(&mut self, window_s: f64, tokens: &Tokens, counts: &Counts) -> Throughput {
        let rate = |x: f64| if window_s > 0.0 { x / window_s } else { 0.0 };
        let judged = self.slo.is_some();
        Throughput {
            output_tokens_per_s: rate(tokens.output_total as f64),
            total_tokens_per_s: rate((tokens.output_total + tokens.input_total) as f64),
            input_tokens_per_s: rate(tokens.input_total as f64),
            items_per_s: tokens.items_total.map(|n| rate(n as f64)),
            requests_per_s: rate(counts.succeeded as f64),
            goodput_requests_per_s: judged.then(|| rate(self.good_requests as f64)),
            goodput_output_tokens_per_s: judged.then(|| rate(self.good_tokens as f64)),
            per_user_output_tokens_per_s: self.per_user.summary(1e-3),
            concurrency: match self.instants.span_us() {
                Some((from, to)) => self.instants.concurrency(from, to),
                None => Default::default(),
            },
            output_tokens_per_s_ci95: self.rate_interval(tokens.output_total),
        }
    }

    /// What the run cost at `--price`, per token produced and per answer
    /// (a reasoning request that spent its budget thinking gave none).
    fn cost(&self, window_s: f64, tokens: &Tokens, counts: &Counts) -> Option<Cost> {
        let reasoning = tokens.reasoning.as_ref();
        let judged = self.slo.is_some();
        self.price.map(|p| {
            p.cost(
                window_s,
                Produced {
                    output_tokens: tokens.output_total,
                    total_tokens: tokens.output_total + tokens.input_total,
                    good_output_tokens: judged.then_some(self.good_tokens),
                    answer_tokens: reasoning.map(|r| r.answer_tokens),
                    answers: counts
                        .succeeded
                        .saturating_sub(reasoning.map_or(0, |r| r.budget_spent_requests)),
                },
            )
        })
    }

    /// tokens/s's 95 % interval, as `compare` bootstraps it, from the
    /// per-10 ms token totals (each slot placed at its middle).
    fn rate_interval(&self, output_total: u64) -> Option<(f64, f64)> {
        let (start, end) = self.span_us()?;
        let slots = self.tokens_per_slot.iter().enumerate();
        let tokens_at = slots
            .filter(|(_, &t)| t > 0)
            .map(|(i, &t)| (i as u64 * self.grid_us + self.grid_us / 2, t as f64));
        let values = RunValues::of_rate((start, end), tokens_at, output_total as f64);
        compare::interval(
            &values,
            "output_tokens_per_s",
            &compare::Settings::default(),
        )
    }

    /// First send and last end of the measured requests, µs.
    fn span_us(&self) -> Option<(u64, u64)> {
        self.instants.span_us()
    }

    fn window(&mut self) -> Window {
        let (Some((start, end)), Some(first_done), Some(last_sent)) = (
            self.instants.span_us(),
            self.instants.first_done(),
            self.instants.last_sent(),
        ) else {
            return Window::default();
        };
        let (start_s, end_s) = (start as f64 * US, end as f64 * US);
        // Steady state: from the first completion (the pipeline is full) to
        // the last send (after it the load only drains), rounded inward to
        // the grid (10 ms, coarser in a run too long to keep it).
        let g = self.grid();
        let (a, b) = (first_done.div_ceil(g), last_sent / g);
        let steady = (b > a).then(|| {
            let (from, to) = (a * g, b * g);
            let span_s = (to - from) as f64 * US;
            let per = (g / self.grid_us) as usize;
            let slots = self.tokens_per_slot.get(
                (a as usize * per).min(self.tokens_per_slot.len())
                    ..(b as usize * per).min(self.tokens_per_slot.len()),
            );
            let tokens: u64 = slots.map_or(0, |s| s.iter().map(|&t| t as u64).sum());
            let done = self.instants.succeeded_between(from, to);
            SteadyWindow {
                start_s: from as f64 * US,
                end_s: to as f64 * US,
                duration_s: span_s,
                output_tokens_per_s: tokens as f64 / span_s,
                requests_per_s: done as f64 / span_s,
                concurrency_mean: self.instants.concurrency(from, to).mean,
            }
        });
        Window {
            start_s,
            end_s,
            duration_s: end_s - start_s,
            steady,
        }
    }
}

/// The three most frequent (kind, message) pairs among the failures.
fn top_errors(messages: &BTreeMap<(String, String), u64>) -> Vec<ErrorSample> {
    let mut list: Vec<ErrorSample> = messages
        .iter()
        .map(|((kind, message), &count)| ErrorSample {
            kind: kind.clone(),
            message: message.clone(),
            count,
        })
        .collect();
    list.sort_by_key(|e| std::cmp::Reverse(e.count));
    list.truncate(3);
    list
}

fn source_name(s: Option<TokenSource>) -> String {
    match s {
        Some(s) => serde_json::to_value(s)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        None => "unknown".into(),
    }
}

/// Each objective judged on its samples (see [`crate::slo`]), with the
/// summary's figure as the estimate.
pub fn slo_report<'a>(
    slo: &Slo,
    samples: impl Fn(SloMetric) -> &'a Distribution,
    latency: &Latency,
    good_requests: u64,
) -> SloReport {
    let objectives: Vec<ObjectiveResult> = slo
        .objectives
        .iter()
        .map(|o| {
            let summary = match o.metric {
                SloMetric::Ttft => latency.ttft_ms,
                SloMetric::AnswerStart | SloMetric::Lag => samples(o.metric).summary(US_TO_MS),
                SloMetric::Tpot => latency.tpot_ms,
                SloMetric::Itl => latency.itl_ms,
                SloMetric::E2e => latency.e2e_ms,
            };
            o.judge(samples(o.metric), summary.and_then(|s| s.get(&o.stat)))
        })
        .collect();
    let verdict = Verdict::all(objectives.iter().filter_map(|o| o.verdict));
    SloReport {
        met: verdict == Verdict::Met,
        verdict: Some(verdict),
        objectives,
        good_requests,
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn arrival_stats_tell_constant_from_bursty() {
        let constant: Vec<u64> = (0..100).map(|i| i * 100_000).collect();
        let (rate, cv2, disp) = crate::instants::arrival_stats(constant.iter().copied());
        assert!((rate - 10.0).abs() < 1e-9 && cv2 == 0.0, "{rate} {cv2}");
        assert_eq!(disp, Some(0.0), "ten every second, exactly");
        // Pairs 1 ms apart every 200 ms: the same rate, gaps far more spread.
        let bursty: Vec<u64> = (0..100)
            .map(|i| (i / 2) * 200_000 + (i % 2) * 1_000)
            .collect();
        let (_, cv2, _) = crate::instants::arrival_stats(bursty.iter().copied());
        assert!(cv2 > 0.9, "{cv2}");
        let (_, _, short) =
            crate::instants::arrival_stats([0u64, 1_000_000, 2_000_000].into_iter());
        assert_eq!(short, None, "too few windows to say");
    }
    use super::*;
    use crate::record::{Chunk, ErrorKind};

    /// A request sent at `sent` (ms) with `n` tokens: first after `ttft` ms, then every `itl` ms.
    fn req(id: u64, sent: u64, ttft: u64, itl: u64, n: u64) -> RequestRecord {
        let chunks: Vec<Chunk> = (0..n)
            .map(|i| Chunk((sent + ttft + i * itl) * 1000, 1))
            .collect();
        RequestRecord::test_success(id, sent * 1000, chunks, 100)
    }

    #[test]
    fn closed_loop_of_two() {
        // Two slots, each serving back-to-back requests of 1 s: 100 ms TTFT + 9 × 100 ms.
        let mut records = vec![];
        for slot in 0..2u64 {
            for i in 0..5u64 {
                records.push(req(slot * 5 + i, i * 1000, 100, 100, 10));
            }
        }
        let m = measure(&records, None, None);
        assert_eq!(m.counts.requests, 10);
        assert_eq!(m.counts.succeeded, 10);
        assert!((m.window.duration_s - 5.0).abs() < 1e-9);
        assert!((m.throughput.output_tokens_per_s - 20.0).abs() < 1e-9);
        assert!((m.throughput.total_tokens_per_s - 220.0).abs() < 1e-9);
        assert!((m.throughput.requests_per_s - 2.0).abs() < 1e-9);
        assert_eq!(m.throughput.concurrency.max, 2);
        assert!((m.throughput.concurrency.mean - 2.0).abs() < 1e-9);
        let ttft = m.latency.ttft_ms.unwrap();
        assert!((ttft.p50 - 100.0).abs() < 0.1 && (ttft.mean - 100.0).abs() < 1e-9);
        assert!((m.latency.tpot_ms.unwrap().mean - 100.0).abs() < 1e-9);
        assert!((m.latency.e2e_ms.unwrap().mean - 1000.0).abs() < 1e-9);
        let per_user = m.throughput.per_user_output_tokens_per_s.unwrap();
        assert!((per_user.mean - 10.0).abs() < 1e-9);
        let steady = m.window.steady.unwrap();
        assert!((steady.start_s - 1.0).abs() < 1e-9 && (steady.end_s - 4.0).abs() < 1e-9);
        assert!((steady.output_tokens_per_s - 20.0).abs() < 1e-9);
        assert!(!m.tokens.multi_token_chunks);
    }

    #[test]
    fn failures_and_warmup_are_counted_not_averaged() {
        let mut records = vec![
            req(0, 0, 100, 10, 5),
            req(1, 0, 100, 10, 5),
            req(2, 0, 100, 10, 5),
        ];
        records[0].warmup = true;
        records[2].error_kind = Some(ErrorKind::Http(429));
        records[2].chunks.clear();
        records[2].first_token_at_us = None;
        records[2].output_tokens = 0;
        let m = measure(&records, None, None);
        assert_eq!(m.counts.warmup, 1);
        assert_eq!(m.counts.requests, 2);
        assert_eq!(m.counts.failed, 1);
        assert_eq!(m.counts.errors.get("http_429"), Some(&1));
        assert_eq!(m.latency.ttft_ms.unwrap().count, 1);
        assert_eq!(m.tokens.output_total, 5);
    }

    #[test]
    fn goodput_and_slo_verdict() {
        let records = vec![req(0, 0, 100, 10, 5), req(1, 0, 300, 10, 5)];
        let slo = Slo::parse("ttft_p99=200ms").unwrap();
        let m = measure(&records, Some(&slo), None);
        let report = m.slo.unwrap();
        assert_eq!(report.good_requests, 1);
        assert!(!report.met, "p99 TTFT is 300 ms");
        // Two requests cannot decide a p99 that one of them passes.
        assert_eq!(report.verdict, Some(Verdict::NotEnoughData));
        assert_eq!(report.objectives[0].n, Some(2));
        assert!(m.throughput.goodput_requests_per_s.unwrap() > 0.0);
        // The maximum is a statement about these requests: judged at once.
        let lenient = Slo::parse("ttft_max=400ms").unwrap();
        let report = measure(&records, Some(&lenient), None).slo.unwrap();
        assert_eq!(report.verdict, Some(Verdict::Met));
        assert!(report.met);
        let strict = Slo::parse("ttft_max=200ms").unwrap();
        let report = measure(&records, Some(&strict), None).slo.unwrap();
        assert_eq!(report.verdict, Some(Verdict::NotMet));
    }

    #[test]
    fn short_outputs_are_flagged() {
        let mut r = req(0, 0, 10, 10, 5);
        r.requested_output_tokens = Some(8);
        let m = measure(&[r], None, None);
        assert_eq!(m.counts.short_outputs, 1);
    }
}
