//! `results.json`: the whole result of one run, schema `tokenscope.run/v1`.
//! Documented field by field in `docs/results-schema.md`; scripts rely on the
//! names, so fields are only ever added.

use crate::cost::Cost;
/// The SLO verdict types live with the SLO; `results.json` carries them.
pub use crate::slo::{ObjectiveResult, SloReport};
use crate::stats::Summary;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const SCHEMA: &str = "tokenscope.run/v1";

/// Why and when a run was stopped early (`--stop-on`, [`crate::breaker`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tripped {
    /// `saturation` or `errors`.
    pub rule: String,
    /// Seconds into the run (the finish of the request that tripped it).
    pub at_s: f64,
    pub why: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunResults {
    /// Always [`SCHEMA`].
    pub schema: String,
    pub tool: Tool,
    /// Wall-clock start, RFC 3339 UTC (the only wall-clock time; all others are monotonic).
    pub started_at: String,
    /// The run was cut short (Ctrl-C); every finished request is still recorded.
    pub partial: bool,
    /// The run could not write its output (a full disk): what failed and
    /// what was kept. The figures are over every request held in memory;
    /// `requests.jsonl` holds the first `counts` of them that reached the disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_error: Option<String>,
    /// `--stop-on`: the rule that stopped the run early, when, and why.
    /// Every request that finished is in the figures; those in flight were
    /// cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<Tripped>,
    /// A long run's records rotated into compressed segments
    /// (`--rotate-records`), and those removed under `--keep-records`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records: Option<RecordSegments>,
    /// Present when no server was measured: the run was simulated by `sim plan`
    /// on a virtual clock, and this describes the simulated deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simulated: Option<serde_json::Value>,
    pub target: Target,
    /// The settings the run used (credentials never appear here).
    pub config: serde_json::Value,
    pub window: Window,
    pub latency: Latency,
    pub throughput: Throughput,
    pub counts: Counts,
    pub tokens: Tokens,
    /// What the run asked of the server against what it delivered.
    #[serde(default)]
    pub workload: Fidelity,
    pub slo: Option<SloReport>,
    pub efficiency: Efficiency,
    pub server: Server,
    pub client: ClientUsage,
    pub diagnosis: Vec<Finding>,
    /// This run was one shard of a run spread over processes (`--shard I/N`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardInfo>,
    /// This run was merged from shards (`tokenscope merge`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged: Option<Merged>,
    /// `bench --cold-start`: the server's start and its first requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cold_start: Option<ColdStart>,
    /// Doubts about how the run was set up, raised before or while it ran
    /// (too few requests to judge an SLO, an arrival process split over
    /// shards), each with what to do about it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<RunWarning>,
    /// `--lora`: each adapter's requests and their figures, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub adapters: BTreeMap<String, AdapterFigures>,
    /// `--class`: each class of traffic's figures and SLO verdict.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub classes: BTreeMap<String, AdapterFigures>,
    /// The media the requests carried, when any did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media: Option<MediaFigures>,
    /// `--response-format`: how many answers were what was asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_output: Option<StructuredOutput>,
    /// `--tools`: the calls the answers made and how many were valid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<ToolCallFigures>,
    /// `--grade`: how many answers were right.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<Accuracy>,
    /// `--multi-turn`: the sessions (an agent's tasks) end to end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<SessionFigures>,
    /// `--workflow`, `--replay-trace`: the workflows end to end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflows: Option<WorkflowFigures>,
    /// `--workflow`: each step's figures, by its name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub steps: BTreeMap<String, AdapterFigures>,
    /// The speech APIs: RTFx, the transcript's pace, a realtime session's lag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speech: Option<SpeechFigures>,
}

/// The speech requests' figures (docs/metrics.md, "Speech").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SpeechFigures {
    /// Succeeded speech requests (realtime sessions among them).
    pub requests: u64,
    /// Seconds of audio transcribed (sent), and produced (text to speech).
    pub audio_in_s: f64,
    pub audio_out_s: f64,
    /// RTFx per request: its audio's seconds over its send-to-end seconds.
    pub rtfx: Option<Summary>,
    /// The real-time factor at the median request: 1 ÷ RTFx p50.
    pub rtf_p50: Option<f64>,
    /// Over the run: all audio seconds over the measured window's seconds.
    pub run_rtfx: Option<f64>,
    /// Transcript words a second, from each first delta to its end.
    pub words_per_s: Option<f64>,
    /// Realtime sessions.
    pub sessions: u64,
    /// Each delta's lag behind the audio it covers, ms.
    pub lag_ms: Option<Summary>,
    /// From the last audio sent to `transcription.done`, ms.
    pub final_to_done_ms: Option<Summary>,
    /// Sessions judged for a growing lag, and those whose lag grew.
    pub sessions_judged: u64,
    pub sessions_lag_grew: u64,
}

/// One doubt about a run's set-up, as `results.json` keeps it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunWarning {
    /// Its kind, stable for scripts (`slo_sample_size`, …).
    pub kind: String,
    /// What is in doubt and what to do, as printed.
    pub message: String,
}

/// `bench --cold-start`: the server started by tokenscope, its time to
/// ready, and what its first requests met against the steady state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ColdStart {
    /// The command's program (its arguments are not recorded: they may hold secrets).
    pub program: String,
    /// From the command's start to the first successful `/health`, s.
    pub ready_s: f64,
    /// From the stop signal to the server's exit, s.
    pub stop_s: f64,
    /// TTFT (ms) of the requests sent before any request finished: they met the server cold.
    pub first_wave: Option<Summary>,
    /// TTFT (ms) of the rest.
    pub steady: Option<Summary>,
    /// First-wave requests whose TTFT exceeded the steady state's p99.
    pub affected: u64,
    /// First-wave TTFT p50 − steady TTFT p50, ms.
    pub excess_p50_ms: Option<f64>,
}

/// One shard of a run spread over processes or machines.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ShardInfo {
    /// 0-based; shard 0 alone reads the server's metrics and the GPUs.
    pub index: u32,
    pub count: u32,
    /// The instant every shard was told to start at (RFC 3339 UTC), if one was.
    pub start_at: Option<String>,
    /// This shard's clock origin (its 0 µs) on its host's wall clock, µs
    /// since the Unix epoch: what the merge aligns the shards' records by.
    pub origin_unix_us: u64,
    /// How far past `start_at` the load began, ms (connections, scheduling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_ms: Option<f64>,
    /// The whole run's load settings (identical on every shard of one run;
    /// `config` holds this shard's part).
    pub whole: serde_json::Value,
    /// The host it ran on: shards on one host share one clock.
    #[serde(default)]
    pub host: String,
    /// The host's clock discipline as its kernel saw it at the start, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<ClockSync>,
}

/// A host clock's synchronisation, from the kernel (`adjtimex`, read-only):
/// what a shard's wall-clock origin can be trusted to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ClockSync {
    /// NTP (or PTP) disciplines the clock: the kernel's `STA_UNSYNC` is clear.
    pub synchronised: bool,
    /// The kernel's estimated and maximum error of the clock, µs.
    pub est_error_us: i64,
    pub max_error_us: i64,
}

/// Where a merged run came from.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Merged {
    pub shards: Vec<MergedShard>,
    /// Latest clock origin − earliest, ms: start lateness and the hosts'
    /// clock offsets together (the merge cannot tell them apart).
    pub origin_spread_ms: f64,
    /// What the alignment rests on.
    pub clock_note: String,
    /// An open loop's shards against the single-process schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<ScheduleCheck>,
}

/// Each shard's intended send times against the whole run's schedule
/// (drawn again from its seed, rate and process), request by request: the
/// shards of an open loop send every N-th arrival of one schedule, so
/// together they are the single process's, to the microsecond.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScheduleCheck {
    pub requests: u64,
    /// Those whose intended send time is the schedule's, to the µs.
    pub exact: u64,
    pub max_error_us: u64,
}

/// One shard's own figures, kept in a merged run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MergedShard {
    pub index: u32,
    pub dir: String,
    #[serde(default)]
    pub host: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<ClockSync>,
    /// Its clock origin after the earliest shard's, ms (its records were shifted by it).
    pub origin_offset_ms: f64,
    pub requests: u64,
    pub output_tokens: u64,
    /// Its sending lag and loop delay, p99 ms: the client's own share of its figures.
    pub client_lag_p99_ms: Option<f64>,
    pub loop_delay_p99_ms: Option<f64>,
    pub cpu_seconds: Option<f64>,
    /// The error floor its `--self-check` measured, when it ran one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub self_check: Option<SelfCheck>,
    /// Its diagnosis, by rule.
    pub findings: Vec<String>,
}

/// Workload fidelity: whether the benchmark exercised what it claims —
/// the lengths asked against those the server counted and wrote, and the
/// arrivals the load pattern (or trace) intended against those sent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Fidelity {
    /// Prompt tokens: as the workload built them (the client's tokenizer)
    /// and as the server counted them (`usage.prompt_tokens`, when it says).
    pub input_tokens_asked: Option<Summary>,
    pub input_tokens_served: Option<Summary>,
    /// Output tokens: `max_tokens` asked and tokens written.
    pub output_tokens_asked: Option<Summary>,
    pub output_tokens_delivered: Option<Summary>,
    /// Answers that ended before their `max_tokens` (EOS or a stop).
    pub early_stops: u64,
    pub arrivals: Option<ArrivalFidelity>,
}

/// Arrivals intended (`scheduled_at`) and sent (`sent_at`), measured requests.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ArrivalFidelity {
    pub intended_per_s: f64,
    pub sent_per_s: f64,
    /// Burstiness: the squared coefficient of variation of the gaps between
    /// arrivals (1 for Poisson, 0 for constant, > 1 burstier).
    pub intended_gap_cv2: f64,
    pub sent_gap_cv2: f64,
    /// Index of dispersion of arrivals counted in 1 s windows (variance ÷
    /// mean; 1 for Poisson); `None` for runs shorter than 5 windows.
    pub intended_dispersion_1s: Option<f64>,
    pub sent_dispersion_1s: Option<f64>,
    /// The requests these figures rest on: every measured one, or in a run
    /// too long to keep them all the first 262,144.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tool {
    pub name: String,
    pub version: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Target {
    pub url: String,
    /// `openai-chat` or `openai-completions`.
    pub api: String,
    pub model: String,
    /// The built-in server started by `bench` when no `--url` was given.
    pub builtin: Option<String>,
}

impl Target {
    /// ` (built-in …)` after the URL when a built-in server answered, else nothing.
    pub fn builtin_note(&self) -> String {
        self.builtin
            .as_deref()
            .map(|b| format!(" ({b})"))
            .unwrap_or_default()
    }
}

/// The measured window: first send → last completion of the measured
/// (non-warm-up) requests, in seconds since the run's start.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Window {
    pub start_s: f64,
    pub end_s: f64,
    pub duration_s: f64,
    /// Ramp and drain trimmed: first completion → last send. `None` when they do not overlap.
    pub steady: Option<SteadyWindow>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct SteadyWindow {
    pub start_s: f64,
    pub end_s: f64,
    pub duration_s: f64,
    /// Output tokens that arrived inside the steady window ÷ its length.
    pub output_tokens_per_s: f64,
    /// Completions inside the steady window ÷ its length.
    pub requests_per_s: f64,
    /// Time-weighted mean in-flight requests inside the steady window.
    pub concurrency_mean: f64,
}

/// Every latency distribution in milliseconds. `None` = no sample, never zero.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Latency {
    /// first token − sent.
    pub ttft_ms: Option<Summary>,
    /// first token − scheduled (open loop: what a user arriving on schedule waits).
    pub ttft_from_scheduled_ms: Option<Summary>,
    /// (last token − first token) / (output tokens − 1), per request.
    pub tpot_ms: Option<Summary>,
    /// Token-split gaps: a chunk of k tokens adds its gap / k, k times.
    pub itl_ms: Option<Summary>,
    /// Gaps between chunks (inter-chunk latency).
    pub icl_ms: Option<Summary>,
    /// end of stream − sent.
    pub e2e_ms: Option<Summary>,
    /// sent − scheduled: how late the client was.
    pub client_lag_ms: Option<Summary>,
    /// Time to the first answer token: first answer (not reasoning) chunk −
    /// sent, over requests that answered (absent when no request reasoned:
    /// it is then TTFT). AIPerf's TTFO, GuideLLM's time to first output token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_start_ms: Option<Summary>,
    /// Thinking time on the stream: first answer chunk − first chunk, over
    /// requests whose thinking was streamed (not hidden) and that answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_ms: Option<Summary>,
    /// TPOT of the answer phase: (last token − first answer chunk) ÷
    /// (answer tokens − 1), over requests that reasoned; `tpot_ms` is over
    /// the whole generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_tpot_ms: Option<Summary>,
    /// Multi-turn: TTFT by turn index (0 = a session's first request); turns
    /// from [`crate::metrics::MAX_TURN_KEPT`] on are pooled under it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ttft_ms_by_turn: BTreeMap<u32, Summary>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Throughput {
    pub output_tokens_per_s: f64,
    /// Its 95 % interval: the bootstrap `compare` uses, over the output
    /// tokens in 20 equal slices of the window (how much the rate varies
    /// over the run), from the run's per-10 ms token totals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_per_s_ci95: Option<(f64, f64)>,
    pub total_tokens_per_s: f64,
    /// Prompt tokens ÷ window: what a pooling API (embeddings, rerank) carries.
    #[serde(default)]
    pub input_tokens_per_s: f64,
    /// Items (vectors, scored documents) ÷ window, for a pooling API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items_per_s: Option<f64>,
    pub requests_per_s: f64,
    /// Requests meeting every SLO ÷ window (`None` without `--slo`).
    pub goodput_requests_per_s: Option<f64>,
    pub goodput_output_tokens_per_s: Option<f64>,
    /// Per request: 1000 / TPOT — the decode speed one user sees.
    pub per_user_output_tokens_per_s: Option<Summary>,
    pub concurrency: Concurrency,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Concurrency {
    /// Time-weighted mean of in-flight requests over the window.
    pub mean: f64,
    pub max: u64,
    /// Set in a run too long to keep every request's instants: `max` is
    /// then an upper bound, the largest count in flight within a slot of
    /// this many ms (the mean stays exact; docs/metrics.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_resolution_ms: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Counts {
    /// Measured requests (warm-up excluded).
    pub requests: u64,
    pub succeeded: u64,
    pub failed: u64,
    /// Left on purpose (`--cancel`): neither succeeded nor failed, and in
    /// no latency figure.
    #[serde(default)]
    pub abandoned: u64,
    /// Failures by kind: `connect`, `timeout`, `http_429`, `stream`, `server_error`, `malformed`, `cancelled`.
    pub errors: BTreeMap<String, u64>,
    pub warmup: u64,
    /// Succeeded with fewer output tokens than requested.
    pub short_outputs: u64,
    /// Open loop with `--max-concurrency`: requests that could not leave on time.
    pub waited_for_slot: u64,
    /// Requests sent again because a kept-alive connection was found closed by the server.
    pub retried: u64,
    /// Responses whose usage counts could not be true (counted from the stream instead).
    #[serde(default)]
    pub implausible_usage: u64,
    /// Of the `retried` requests, those that then succeeded on a new connection.
    #[serde(default)]
    pub retried_succeeded: u64,
    /// The most frequent failure messages (up to 3), with their kind and count.
    #[serde(default)]
    pub top_errors: Vec<ErrorSample>,
    /// Succeeded requests that ended within half a median ITL of the one
    /// ended before them (the same engine step): closed-loop users in
    /// waves end so (`crate::waves`).
    #[serde(default)]
    pub finished_together: u64,
}

/// One failure message and how many requests ended with it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorSample {
    pub kind: String,
    pub message: String,
    pub count: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Tokens {
    /// Over successful measured requests.
    pub input_total: u64,
    pub output_total: u64,
    pub input_sources: BTreeMap<String, u64>,
    pub output_sources: BTreeMap<String, u64>,
    /// How many chunks carried k tokens, by k.
    pub tokens_per_chunk: BTreeMap<u32, u64>,
    /// Some chunk carried more than one token: ITL is a split of chunk gaps.
    pub multi_token_chunks: bool,
    /// Prompt tokens the server served from its prefix cache, over the
    /// successful requests whose server said (`None`: no server said).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_cache: Option<CacheHits>,
    /// Reasoning among the output tokens, when any request reasoned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<Reasoning>,
    /// A pooling run's items (vectors embedded, documents scored) over
    /// the successful requests; absent for the generating APIs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items_total: Option<u64>,
}

impl Tokens {
    /// Reasoning ÷ output tokens, when any request reasoned.
    pub fn reasoning_share(&self) -> Option<f64> {
        let r = self.reasoning.as_ref()?;
        Some(r.tokens as f64 / self.output_total.max(1) as f64)
    }
}

/// What the successful requests spent reasoning.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reasoning {
    /// Reasoning tokens (included in `output_total`).
    pub tokens: u64,
    /// `output_total − tokens`: the answers' tokens.
    pub answer_tokens: u64,
    /// Requests that reasoned.
    pub requests: u64,
    /// Of those, requests whose reasoning the server counted and never
    /// streamed (hidden reasoning).
    pub hidden_requests: u64,
    /// Requests that used their whole length reasoning: no answer.
    pub budget_spent_requests: u64,
    /// Where the counts came from, by source.
    pub sources: BTreeMap<String, u64>,
}

/// Prefix-cache hits as the server reported them per request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CacheHits {
    /// Requests whose response said how many prompt tokens were cached.
    pub requests: u64,
    /// Their prompt tokens, and of those the cached ones.
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    /// cached ÷ prompt tokens.
    pub hit_rate: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Efficiency {
    pub cost: Option<Cost>,
    /// GPU utilisation, memory, power (from the telemetry stage; `None` until measured).
    pub gpu: Option<serde_json::Value>,
    /// KV-cache usage (from the server's metrics; `None` until measured).
    pub kv_cache: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Server {
    /// Detected server kind (`None` = not detected).
    pub kind: Option<String>,
    /// The server's own version, where it tells one (vLLM's and SGLang's
    /// `version`, TGI's `/info`, llama.cpp's `/props` build).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Summaries of the server's own metrics (`None` = not scraped).
    pub metrics: Option<serde_json::Value>,
}

/// What the load generator itself cost, so a run that measured the client can be told apart.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ClientUsage {
    /// CPU time of the client's threads (user + system) over the whole run.
    pub cpu_seconds: Option<f64>,
    /// cpu_seconds ÷ window: cores the client kept busy.
    pub cpu_cores: Option<f64>,
    /// CPU microseconds per streamed output token.
    pub cpu_us_per_output_token: Option<f64>,
    /// Client threads (tokio workers).
    pub threads: Option<usize>,
    /// The event-loop delay probe: how late a timer asking to wake every
    /// 1 ms ran, ms. Every time the client stamps is this late at worst.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loop_delay_ms: Option<crate::stats::Summary>,
    /// Per second of the run: `[second, worst loop delay in it (ms)]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loop_delay_per_s: Vec<(u64, f64)>,
    /// Connections opened before the measured window, so their connect
    /// time is not inside any TTFT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections: Option<Connections>,
    /// The open-file limit the run had (raised to the hard limit at start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_file_limit: Option<u64>,
    /// The process's peak resident memory at the end of the load, MB
    /// (a built-in server in the same process included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_rss_mb: Option<f64>,
    /// The run's clock origin (its 0 µs) on the host's `CLOCK_MONOTONIC`,
    /// µs: a server on the same machine that stamps that clock (the exact
    /// server's `timings.*_mono_us`) can be lined up with the records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monotonic_origin_us: Option<u64>,
    /// Whether each read was stamped with the kernel's arrival time of its
    /// bytes (plain http on Linux) rather than when the client read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_read_stamps: Option<bool>,
    /// Where they were: reads that still came without the kernel's stamp
    /// (the kernel turns stamping on a moment after it is first asked), each
    /// stamped when read instead, up to `wake_batch_us` late.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unstamped_reads: Option<u64>,
    /// How long an idle client thread gathered wake-ups (`--wake-batch`), µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_batch_us: Option<u64>,
    /// The error floor `bench --self-check` measured on this machine first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub self_check: Option<SelfCheck>,
}

/// The resolution of this machine's measurements at a load: the client run
/// against the built-in exact server, its figures compared per request with
/// the server's own send times (`tokenscope selftest`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SelfCheck {
    /// Concurrent streams, all started at once.
    pub streams: u64,
    pub requests: u64,
    /// What the exact server was told to do.
    pub server_ttft_ms: f64,
    pub server_itl_ms: f64,
    pub output_tokens: u64,
    /// Client TTFT − the server's (request arrival → first token handed to
    /// the socket), per request, ms: what the client adds (send, read, and
    /// the server's accept queue, which a loaded machine shares).
    pub ttft_error_ms: Option<crate::stats::Summary>,
    /// Client TPOT − the server's, per request, ms.
    pub tpot_error_ms: Option<crate::stats::Summary>,
    /// On the host's shared clock: the client's read stamp of the first
    /// token − the server's send of it, ms. The client's own share of the
    /// TTFT error; the rest is [`SelfCheck::server_queue_ms`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_read_delay_ms: Option<crate::stats::Summary>,
    /// The same for the last token: the client's share of an E2E error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_read_delay_ms: Option<crate::stats::Summary>,
    /// The server's handler arrival − the client's send stamp, ms: the
    /// kernel and the server accepting and parsing the burst, which the
    /// server's own TTFT does not count. A real server has this queue too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_queue_ms: Option<crate::stats::Summary>,
    /// The client's event-loop delay during the check, ms.
    pub loop_delay_ms: Option<crate::stats::Summary>,
    /// Requests that failed during the check (a floor with failures is suspect).
    pub failed: u64,
}

impl SelfCheck {
    /// "at 64 streams this machine measures TTFT within +0.14 / +0.32 ms (p50/p99) …"
    pub fn sentence(&self) -> String {
        let pair = |s: &Option<crate::stats::Summary>| {
            s.map_or("—".to_string(), |s| {
                format!("{:+.2} / {:+.2} ms", s.p50, s.p99)
            })
        };
        let failed = match self.failed {
            0 => String::new(),
            n => format!(
                "; {n} of {} requests failed: the floor is suspect",
                self.requests
            ),
        };
        let split = match (&self.first_read_delay_ms, &self.server_queue_ms) {
            (Some(_), Some(_)) => format!(
                "; of that, the client read the first token {} after the server sent it, and the server's accept queue took {}",
                pair(&self.first_read_delay_ms),
                pair(&self.server_queue_ms)
            ),
            _ => String::new(),
        };
        format!(
            "at {} streams this machine measures TTFT within {} and TPOT within {} (p50 / p99) of the server's own send times{split}{failed}",
            self.streams,
            pair(&self.ttft_error_ms),
            pair(&self.tpot_error_ms)
        )
    }
}

/// Connections opened ahead of the load (`bench --cold-connections` opens none).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Connections {
    pub opened: u64,
    pub failed: u64,
    /// Time to connect and get a first answer (`GET /v1/models`), ms.
    pub connect_ms: Option<crate::stats::Summary>,
    /// The whole warm-up, before the run's clock started, ms.
    pub took_ms: f64,
}

/// One statement of the diagnosis, with the numbers behind it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// Stable rule name (`client_saturated`, `short_outputs`, ...).
    pub rule: String,
    /// `info`, `warning` or `critical`.
    pub severity: String,
    pub message: String,
    pub evidence: BTreeMap<String, serde_json::Value>,
}

/// One LoRA adapter's part of a run (`--lora`): its requests and the
/// figures over them. Its rates are over the run's whole window, so the
/// adapters' add up to the run's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AdapterFigures {
    pub requests: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub ttft_ms: Option<Summary>,
    pub tpot_ms: Option<Summary>,
    pub e2e_ms: Option<Summary>,
    pub output_tokens: u64,
    pub output_tokens_per_s: f64,
    pub requests_per_s: f64,
    /// Its SLO's verdict: a class's own SLO, else the run's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo: Option<SloReport>,
}

/// What the requests' images, audio and video were and cost: per request
/// sent with media (and succeeded), and TTFT by image count and size.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MediaFigures {
    /// Successful requests that carried media.
    pub requests: u64,
    pub images_per_request: f64,
    pub audio_per_request: f64,
    pub video_per_request: f64,
    /// Encoded bytes sent inline per request.
    pub bytes_per_request: f64,
    /// The server's prompt tokens past the text's own (the client's count
    /// of what it wrote), per image, where the server counted the prompt:
    /// what an image costs in tokens (the chat template's few tokens included).
    pub tokens_per_image: Option<f64>,
    /// TTFT by how many images a request carried.
    pub ttft_ms_by_images: BTreeMap<u32, Summary>,
    /// TTFT by the size of a request's first image (`640x480`).
    pub ttft_ms_by_size: BTreeMap<String, Summary>,
}

/// `--response-format`: the successful requests' answers checked against
/// the format asked for (valid JSON; valid against the schema).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StructuredOutput {
    pub checked: u64,
    pub valid: u64,
    pub valid_share: f64,
    /// The Wilson 95 % interval of the share.
    pub valid_share_ci95: (f64, f64),
    /// Why the others were not, most frequent first (eight reasons kept).
    pub failures: Vec<FormatFailure>,
}

/// `--tools`: the successful requests that offered tools, the calls their
/// answers made, and the calls whose arguments were valid (JSON, and valid
/// against the named tool's `parameters` schema).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolCallFigures {
    /// Successful requests that offered tools.
    pub requests: u64,
    /// Of those, the requests whose answer made at least one call.
    pub requests_with_calls: u64,
    pub calls: u64,
    pub calls_per_request: f64,
    pub valid: u64,
    /// Of the calls, the share valid, and its Wilson 95 % interval.
    pub valid_share: f64,
    pub valid_share_ci95: (f64, f64),
    /// Why the others were not, most frequent first (eight reasons kept).
    pub failures: Vec<FormatFailure>,
    /// Time to the first tool-call token (from the send), ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_to_first_call_ms: Option<crate::stats::Summary>,
}

/// `--multi-turn`: whole sessions, from their first send to their last
/// answer — with `--tools`, an agent's task latency — and where the time
/// went: the server (each request's send to its end), the tools
/// (`--tool-latency`), the rest (think time, the client's gaps).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionFigures {
    pub sessions: u64,
    /// Requests a session made, and of those the turns after tool results.
    pub requests_per_session: f64,
    pub tool_rounds_per_session: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2e_ms: Option<crate::stats::Summary>,
    /// Shares of all sessions' time (they add up to 1).
    pub server_share: f64,
    pub tool_share: f64,
    pub other_share: f64,
}

/// `--workflow`, `--replay-trace`: whole workflows, from their arrival to
/// the end of their last step, and their critical paths. A workflow that
/// did not complete (a call failed, the run ended it) is counted, not
/// timed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkflowFigures {
    pub workflows: u64,
    pub complete: u64,
    pub calls_per_workflow: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub makespan_ms: Option<crate::stats::Summary>,
    /// Shares of the complete workflows' makespans on their critical
    /// paths (they add up to 1): model calls, tools' waits, the rest.
    pub path_llm_share: f64,
    pub path_tool_share: f64,
    pub path_other_share: f64,
    /// Within those, the share the joins on the critical paths spent
    /// waiting for their slowest branch (after the median one ended).
    #[serde(default)]
    pub path_join_wait_share: f64,
    /// Calls of one workflow in flight at once: the mean of each
    /// workflow's peak, and the largest.
    pub peak_in_flight_mean: f64,
    pub peak_in_flight_max: u64,
}

/// `--grade`: the graded answers and the share right, with its interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Accuracy {
    /// How answers were graded (`exact`, `number`, `regex:…`).
    pub rule: String,
    pub graded: u64,
    pub correct: u64,
    pub share: f64,
    /// The Wilson 95 % interval of the share.
    pub share_ci95: (f64, f64),
}

/// One reason answers failed their format, and how many.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FormatFailure {
    pub reason: String,
    pub count: u64,
}

/// Where a long run's records went (`tokenscope_core::segments`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RecordSegments {
    /// Segments rotated out of `requests.jsonl`, numbered from 1.
    pub segments: u32,
    /// The oldest segments removed to keep under `--keep-records`, and the
    /// records they held (still counted in every figure).
    pub removed_segments: u32,
    pub removed_records: u64,
}
