//! `sim serve`: the engine in real time behind an OpenAI-compatible HTTP
//! front, with vLLM V1's `/metrics` (names, types, units, buckets), so
//! tokenscope and any Prometheus scraper read it like a vLLM server.
//!
//! One task owns the engine: it takes new requests between steps, plans a
//! step, sleeps for the step's modelled duration on the precise timer, then
//! hands each request its token. A request whose client is gone is aborted and
//! its KV blocks freed, as vLLM does.

use crate::engine::kv;
use crate::engine::scheduler::{Seq, StepResult};
use crate::engine::{Engine, EngineConfig, EngineState};
use crate::faults::{Fault, Faults};
use crate::http::{bad_request, injected_status, parse_body};
use crate::openai::{self, Ask, Dialect, Writer};
use crate::pooling::Pooled;
use crate::prom::{self, Exposition, Histogram};
use crate::timer;
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Json;
use bytes::Bytes;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Name served at /v1/models and in responses.
    pub model_name: String,
    /// Output length when a request sets no `max_tokens`.
    pub default_max_tokens: u32,
    pub faults: Faults,
    pub stall: Duration,
    pub seed: u64,
    /// Modelled start-up (weights loaded, KV cache set up): until it has
    /// passed, /health and the APIs answer 503 "loading model", as
    /// llama.cpp's server does.
    pub load_time: Duration,
    /// Engines behind the one endpoint (vLLM's data parallelism: each its
    /// own scheduler and KV cache, `/metrics` labelled `engine="i"`).
    pub replicas: u32,
    /// Which engine a request goes to (kv-aware reads every engine's cache
    /// as the request arrives).
    pub router: crate::router::Router,
    /// Each answer's first tokens are reasoning, this many (a length SPEC
    /// sampled per request from the seed), shown as the second says.
    pub reasoning: Option<(
        tokenscope_workload::lengths::LengthSpec,
        openai::ReasoningAs,
    )>,
}

impl ServeOptions {
    /// Request `id`'s reasoning tokens and how they are shown.
    fn reasoning(&self, id: u64) -> Option<(u64, openai::ReasoningAs)> {
        use rand::SeedableRng;
        let (spec, how) = self.reasoning?;
        let mut rng = rand::rngs::StdRng::seed_from_u64(
            self.seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x7265_6173,
        );
        Some((spec.sample(&mut rng), how))
    }

    pub fn for_config(config: &EngineConfig) -> Self {
        ServeOptions {
            model_name: config.model.name.clone(),
            default_max_tokens: 256,
            faults: Faults::default(),
            stall: Duration::from_secs(5),
            seed: 0,
            load_time: Duration::ZERO,
            replicas: 1,
            router: crate::router::Router::RoundRobin,
            reasoning: None,
        }
    }
}

enum Event {
    Token,
    /// The last token, with the engine's own view of the request.
    Done(Value),
}

struct Submit {
    seq: Seq,
    events: mpsc::UnboundedSender<Event>,
    arrived: Instant,
}

/// What `/metrics` shows, updated by the engine task after every step.
struct Metrics {
    state: EngineState,
    prompt_tokens: u64,
    generation_tokens: u64,
    finished_length: u64,
    finished_abort: u64,
    prefix_queries: u64,
    prefix_hits: u64,
    ttft: Histogram,
    itl: Histogram,
    tpot: Histogram,
    e2e: Histogram,
    queue: Histogram,
    prefill: Histogram,
    decode: Histogram,
    inference: Histogram,
    iteration_tokens: Histogram,
    /// `--spec-decode`: the engine's counts (vLLM's spec_decode counters).
    spec: Option<crate::engine::scheduler::SpecStats>,
}

impl Metrics {
    fn new() -> Self {
        Metrics {
            state: EngineState {
                running: 0,
                waiting: 0,
                kv_usage: 0.0,
                preemptions_total: 0,
            },
            prompt_tokens: 0,
            generation_tokens: 0,
            finished_length: 0,
            finished_abort: 0,
            prefix_queries: 0,
            prefix_hits: 0,
            ttft: Histogram::new(prom::TTFT_BUCKETS),
            itl: Histogram::new(prom::ITL_BUCKETS),
            tpot: Histogram::new(prom::ITL_BUCKETS),
            e2e: Histogram::new(prom::REQUEST_BUCKETS),
            queue: Histogram::new(prom::REQUEST_BUCKETS),
            prefill: Histogram::new(prom::REQUEST_BUCKETS),
            decode: Histogram::new(prom::REQUEST_BUCKETS),
            inference: Histogram::new(prom::REQUEST_BUCKETS),
            iteration_tokens: Histogram::new(prom::ITERATION_TOKEN_BUCKETS),
            spec: None,
        }
    }
}

/// One engine behind the endpoint: where its requests go and what it shows.
struct Replica {
    submit: mpsc::UnboundedSender<Submit>,
    metrics: Arc<Mutex<Metrics>>,
    /// The engine, locked by its task for each step's bookkeeping (never
    /// across a step's sleep) and by the kv-aware router to read its cache:
    /// the global, up-to-date index of cached blocks that KV-aware routers
    /// (NVIDIA Dynamo's, llm-d's) build from the engines' KV events.
    engine: Arc<Mutex<Engine>>,
}

struct Shared {
    replicas: Vec<Replica>,
    next_id: AtomicU64,
    /// Requests in flight (the built-in answers' load-dependent faults).
    in_flight: Arc<AtomicU64>,
    options: ServeOptions,
    config: EngineConfig,
    kv_blocks: u64,
    kv_block_size: u32,
    /// The longest request taken (`EngineConfig::max_model_len`); longer is a 400.
    max_model_len: u64,
    model_json: String,
    /// When the modelled start-up ends.
    ready_at: Instant,
    /// The modelled front ends' serial stages (`front_end.rs`), one a
    /// replica, on a clock of µs since `started`: requests that arrive
    /// together get through one after another, as in `sim plan`.
    front_end: Mutex<crate::front_end::SerialStages>,
    started: Instant,
    /// Requests through the front end on their way to the engine (`BatchGate`).
    gate: Arc<BatchGate>,
}

/// The most 200 µs waits the engine makes for requests due at it.
const GATE_WAITS: u32 = 250;

/// The hand-over from the front end to the engine. On `sim plan`'s clock a
/// request due at the engine by a step's start joins that step. Here each
/// request's task submits its own, one after another as the runtime gets
/// round to them: an engine that stepped on the first of several due
/// together would take it alone (a static batch's eight members, released
/// at one instant, were prefilled 1 + 7). So every request is expected here
/// from when its front-end time is known until it is submitted, and the
/// engine holds its next step while requests due by now are on their way.
#[derive(Default)]
struct BatchGate(Mutex<std::collections::BTreeMap<Instant, usize>>);

impl BatchGate {
    /// A member due at the engine `at`; expected until the `Handover` drops.
    fn expect(self: &Arc<Self>, at: Instant) -> Handover {
        *lock(&self.0).entry(at).or_default() += 1;
        Handover {
            gate: self.clone(),
            at,
        }
    }

    /// Waits while requests due by now have not been submitted; returns how
    /// many 200 µs waits that took. Bounded: a request lost on its way holds
    /// a step 50 ms at most.
    async fn wait_for_due(&self) -> u32 {
        for waits in 0..GATE_WAITS {
            let now = Instant::now();
            if lock(&self.0).range(..=now).next().is_none() {
                return waits;
            }
            timer::sleep_until(now + Duration::from_micros(200)).await;
        }
        GATE_WAITS
    }
}

/// A request expected by the engine until this is dropped (once
/// submitted, or on any way out).
struct Handover {
    gate: Arc<BatchGate>,
    at: Instant,
}

impl Drop for Handover {
    fn drop(&mut self) {
        let mut due = lock(&self.gate.0);
        if let Some(n) = due.get_mut(&self.at) {
            *n -= 1;
            if *n == 0 {
                due.remove(&self.at);
            }
        }
    }
}

impl Shared {
    /// The 503 a loading server answers, while it loads.
    fn loading(&self) -> Option<Response> {
        (Instant::now() < self.ready_at).then(|| {
            let body =
                r#"{"error":{"message":"Loading model","type":"unavailable_error","code":503}}"#;
            (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::CONTENT_TYPE, "application/json")],
                body,
            )
                .into_response()
        })
    }
}

impl Shared {
    /// The front end's cost (parsing, tokenisation, the hop to the
    /// engine, the hand-over to every tensor-parallel rank) before the
    /// scheduler sees a request of `tokens` prompt tokens that `arrived`:
    /// its serial share queues behind the requests before it. It comes out
    /// expected by the engine until submitted.
    async fn front_end(&self, arrived: Instant, tokens: u64) -> Handover {
        let cost = crate::front_end::Costs::of(&self.config, tokens);
        let us = |d: Duration| d.as_micros() as u64;
        let at_us = us(arrived.saturating_duration_since(self.started));
        let cost_us = us(Duration::from_secs_f64(cost.serial_s));
        let (_, out_us) = lock(&self.front_end).pass(at_us, cost_us, self.replicas.len());
        let mut through = self.started + Duration::from_micros(out_us);
        let rest = Duration::from_secs_f64(cost.overlapped_s + cost.ranks_s);
        if self.config.limits().static_batch {
            // A static batcher hands over what arrived while the front end
            // was busy as one batch, once it is idle (as `sim plan`'s does).
            loop {
                crate::timer::sleep_until(through).await;
                let idle = self.started + Duration::from_micros(lock(&self.front_end).idle_at_us());
                if idle <= through {
                    break;
                }
                through = idle;
            }
        }
        let handover = self.gate.expect(through + rest);
        crate::timer::sleep_until(through + rest).await;
        handover
    }

    /// The engine's sequence of a request of `prefill` tokens that may
    /// write `max_tokens`. With prefix caching its cache units are the
    /// prompt's words and the answer's: the answer is known ahead (its words
    /// are fixed), so the blocks it fills are cached too, as vLLM caches
    /// every full block, and a next turn that carries it back finds them.
    fn seq_of(
        &self,
        id: u64,
        (prefill, max_tokens): (u64, u64),
        (body, dialect): (&Value, Dialect),
    ) -> Seq {
        let mut seq = Seq::new(id, prefill as u32, max_tokens as u32, 0.0);
        // vLLM's `priority` (lower first), heeded under --scheduling-policy priority.
        seq.priority = body["priority"].as_i64().unwrap_or(0);
        if self.config.prefix_caching {
            let answer = openai::text(0, max_tokens);
            let words = openai::prompt_words(body, dialect).chain(answer.split_whitespace());
            seq.units = kv::word_units(words, self.kv_block_size).into();
        }
        seq
    }

    /// Hands `seq` to the replica the router picks; its events come on
    /// `events`. The answer to send instead when the engine has stopped.
    fn submit(
        &self,
        seq: Seq,
        events: mpsc::UnboundedSender<Event>,
        arrived: Instant,
    ) -> Result<(), Box<Response>> {
        let replica = self.pick(seq.id, &seq.units, seq.prompt);
        let submitted = replica.submit.send(Submit {
            seq,
            events,
            arrived,
        });
        submitted.map_err(|_| {
            Box::new((StatusCode::SERVICE_UNAVAILABLE, "engine stopped").into_response())
        })
    }

    /// The engine a request of these cache units goes to.
    fn pick(&self, id: u64, units: &[kv::Unit], prompt: u32) -> &Replica {
        use crate::router::Router;
        let n = self.replicas.len();
        let i = match self.options.router {
            Router::LeastOutstanding => (0..n)
                .min_by_key(|&i| {
                    let st = lock(&self.replicas[i].metrics).state;
                    (st.running + st.waiting, (i + n - id as usize % n) % n)
                })
                .unwrap_or(0),
            Router::PrefixAffinity => units
                .first()
                .map_or(id as usize % n, |u| (u.key % n as u64) as usize),
            Router::KvAware => {
                // Every engine locked at once, in index order (the engine
                // tasks lock only their own), so the choice sees one moment.
                let engines: Vec<_> = self.replicas.iter().map(|r| lock(&r.engine)).collect();
                let refs: Vec<&Engine> = engines.iter().map(|e| &**e).collect();
                crate::router::pick(Router::KvAware, &refs, units, prompt, id)
            }
            Router::RoundRobin => id as usize % n,
        };
        &self.replicas[i]
    }
}

/// The engine as the speech endpoints' model: a job is a request of its
/// prompt and the audio encoder's work (prefill of equal cost, from the
/// audio's seconds: [`crate::speech::AudioEncoder`]), writing its tokens;
/// it goes through the front end and the scheduler as any request does.
struct EngineSpeech(Arc<Shared>);

impl crate::speech::Model for EngineSpeech {
    fn start(&self, job: crate::speech::Job) -> mpsc::UnboundedReceiver<()> {
        let (tx, rx) = mpsc::unbounded_channel();
        let s = self.0.clone();
        tokio::spawn(async move {
            let id = s.next_id.fetch_add(1, Ordering::Relaxed);
            let encoder = crate::speech::AudioEncoder::of(&s.config.model)
                .prefill_tokens(job, s.config.model.active_params_b);
            let prompt = job.prompt_tokens.clamp(1, u32::MAX as u64 / 4);
            let handover = s.front_end(job.arrived, prompt).await;
            let tokens = job.output_tokens.clamp(1, u32::MAX as u64 / 4);
            let seq = Seq::new(id, (prompt + encoder) as u32, tokens as u32, 0.0);
            let (events, mut done) = mpsc::unbounded_channel();
            if s.submit(seq, events, job.arrived).is_err() {
                return;
            }
            drop(handover);
            // Every event is a token (the last comes as `Done`); a closed
            // receiver drops `done`, and the engine aborts the request.
            while let Some(ev) = done.recv().await {
                if tx.send(()).is_err() || matches!(ev, Event::Done(_)) {
                    return;
                }
            }
        });
        rx
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A running simulated server.
pub struct EngineServer {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    /// The engines' live states, for tests to compare with what `/metrics` said.
    metrics: Vec<Arc<Mutex<Metrics>>>,
}

impl EngineServer {
    /// Binds `addr` (port 0 for a free one) and serves on the current runtime.
    pub async fn start(
        addr: SocketAddr,
        config: EngineConfig,
        options: ServeOptions,
    ) -> Result<EngineServer, String> {
        let mut replicas = Vec::new();
        let (mut kv_blocks, mut kv_block_size) = (0, 16);
        let gate = Arc::new(BatchGate::default());
        for _ in 0..options.replicas.max(1) {
            let engine = Engine::new(config.clone())?;
            kv_blocks = engine.scheduler.kv.total_blocks;
            kv_block_size = engine.scheduler.kv.block_size;
            let engine = Arc::new(Mutex::new(engine));
            let metrics = Arc::new(Mutex::new(Metrics::new()));
            let (submit, submissions) = mpsc::unbounded_channel();
            let gate = gate.clone();
            tokio::spawn(run_engine(
                engine.clone(),
                submissions,
                metrics.clone(),
                gate,
            ));
            replicas.push(Replica {
                submit,
                metrics,
                engine,
            });
        }
        let listener =
            crate::http::listen(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let metrics = replicas.iter().map(|r| r.metrics.clone()).collect();
        let shared = Arc::new(Shared {
            replicas,
            next_id: AtomicU64::new(0),
            in_flight: Arc::default(),
            model_json: serde_json::to_string(&options.model_name).expect("a string serializes"),
            ready_at: Instant::now() + options.load_time,
            front_end: Mutex::default(),
            started: Instant::now(),
            gate,
            options,
            max_model_len: config.max_model_len(),
            config,
            kv_blocks,
            kv_block_size,
        });
        let app = crate::http::api_routes(respond, pool)
            .route("/v1/models", get(models))
            .route("/health", get(health))
            .route("/version", get(version))
            .route(
                "/reset_prefix_cache",
                axum::routing::post(reset_prefix_cache),
            )
            .route("/metrics", get(metrics_text))
            .with_state(shared.clone());
        let speech = crate::speech::routes(
            Arc::new(EngineSpeech(shared.clone())),
            &shared.options.model_name,
            Arc::default(),
        );
        let app = app.merge(speech);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            crate::http::serve(listener, app, stopped).await;
        });
        Ok(EngineServer {
            addr,
            stop: Some(stop),
            task,
            metrics,
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The (first) engine's state after its latest step.
    pub fn state(&self) -> EngineState {
        lock(&self.metrics[0]).state
    }

    /// Each engine's state after its latest step.
    pub fn states(&self) -> Vec<EngineState> {
        self.metrics.iter().map(|m| lock(m).state).collect()
    }

    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = self.task.await;
    }
}

struct Live {
    events: mpsc::UnboundedSender<Event>,
    arrived: Instant,
    first: Option<Instant>,
    last: Instant,
    prompt: u32,
}

/// The engine task: steps in real time while there is work.
async fn run_engine(
    shared: Arc<Mutex<Engine>>,
    mut submissions: mpsc::UnboundedReceiver<Submit>,
    metrics: Arc<Mutex<Metrics>>,
    gate: Arc<BatchGate>,
) {
    let origin = Instant::now();
    let secs = |at: Instant| at.duration_since(origin).as_secs_f64();
    let mut live: HashMap<u64, Live> = HashMap::new();
    let add = |engine: &mut Engine, live: &mut HashMap<u64, Live>, s: Submit| {
        let mut seq = s.seq;
        let now = secs(Instant::now());
        seq.arrived_at = now;
        seq.queued_at = now;
        live.insert(
            seq.id,
            Live {
                events: s.events,
                arrived: s.arrived,
                first: None,
                last: s.arrived,
                prompt: seq.prompt,
            },
        );
        engine.add(seq);
    };
    // Back-to-back steps start at the previous step's deadline, not when the
    // loop gets round to them, so bookkeeping time does not stretch the clock.
    let mut previous_end: Option<Instant> = None;
    loop {
        gate.wait_for_due().await;
        let step = {
            let mut engine = lock(&shared);
            while let Ok(s) = submissions.try_recv() {
                add(&mut engine, &mut live, s);
            }
            (!engine.is_idle()).then(|| {
                let start = previous_end.unwrap_or_else(Instant::now);
                let (dt, work) = engine.begin_step(secs(start));
                (start, dt, work)
            })
        };
        let Some((start, dt, work)) = step else {
            previous_end = None;
            // Requests due with this one join its step (`BatchGate`).
            match submissions.recv().await {
                Some(s) => add(&mut lock(&shared), &mut live, s),
                None => return,
            }
            continue;
        };
        // The step runs unlocked: the router may read the cache meanwhile.
        let end = start + Duration::from_secs_f64(dt);
        timer::sleep_until(end).await;
        previous_end = Some(end);
        let now = Instant::now();
        let mut engine = lock(&shared);
        let result = engine.end_step(work);

        let mut m = lock(&metrics);
        m.iteration_tokens.observe(work.tokens as f64);
        let clock = (origin, now);
        let gone = hand_out(&result, &mut live, &mut m, clock);
        count_finished(&result.finished, &mut live, &mut m, clock);
        // Requests whose client left: abort them now, between steps.
        live.retain(|id, l| {
            let closed = l.events.is_closed() || gone.contains(id);
            if closed {
                engine.abort(*id);
                m.finished_abort += 1;
            }
            !closed
        });
        m.state = engine.state();
        m.spec = engine.spec_stats().cloned();
        m.prefix_queries = engine.scheduler.kv.queries;
        m.prefix_hits = engine.scheduler.kv.hits;
    }
}

/// Sends each token the step emitted to its client (a done request's
/// timings with its last) and counts TTFT and ITL. Returns the requests
/// whose client has gone. `clock`: the engine's origin and the step's end.
fn hand_out(
    result: &StepResult,
    live: &mut HashMap<u64, Live>,
    m: &mut Metrics,
    (origin, now): (Instant, Instant),
) -> Vec<u64> {
    let secs = |at: Instant| at.duration_since(origin).as_secs_f64();
    let mut gone = Vec::new();
    for &(id, _, done) in &result.emitted {
        let Some(l) = live.get_mut(&id) else { continue };
        match l.first {
            None => {
                l.first = Some(now);
                m.ttft.observe((now - l.arrived).as_secs_f64());
                m.prompt_tokens += l.prompt as u64;
            }
            Some(_) => m.itl.observe((now - l.last).as_secs_f64()),
        }
        l.last = now;
        m.generation_tokens += 1;
        let event = if done {
            let seq = result
                .finished
                .iter()
                .find(|s| s.id == id)
                .expect("done requests are finished");
            let scheduled = seq.first_scheduled_at.unwrap_or(seq.arrived_at);
            Event::Done(json!({
                "cache_n": seq.cached_tokens.unwrap_or(0),
                "queue_ms": seq.queue_time * 1e3,
                "prefill_ms": ((secs(l.first.unwrap_or(now)) - scheduled) * 1e3).max(0.0),
                "preemptions": seq.preemptions,
            }))
        } else {
            Event::Token
        };
        if l.events.send(event).is_err() {
            gone.push(id);
        }
    }
    gone
}

/// The finished requests leave: their E2E, queue, prefill, decode and TPOT
/// into vLLM's histograms.
fn count_finished(
    finished: &[Seq],
    live: &mut HashMap<u64, Live>,
    m: &mut Metrics,
    (origin, now): (Instant, Instant),
) {
    for seq in finished {
        let Some(l) = live.remove(&seq.id) else {
            continue;
        };
        let first = l.first.unwrap_or(now);
        let scheduled =
            origin + Duration::from_secs_f64(seq.first_scheduled_at.unwrap_or(seq.arrived_at));
        m.finished_length += 1;
        m.e2e.observe((now - l.arrived).as_secs_f64());
        m.queue.observe(seq.queue_time);
        m.prefill
            .observe(first.saturating_duration_since(scheduled).as_secs_f64());
        m.decode.observe((now - first).as_secs_f64());
        m.inference
            .observe(now.saturating_duration_since(scheduled).as_secs_f64());
        if seq.generated > 1 {
            m.tpot
                .observe((now - first).as_secs_f64() / (seq.generated - 1) as f64);
        }
    }
}

/// vLLM V1's speculative-decoding counters (its `SpecDecodingProm`), one
/// per-position series for each of the `k` draft positions.
fn spec_counters(e: &mut Exposition, ms: &[std::sync::MutexGuard<'_, Metrics>], k: u32) {
    let stats: Vec<_> = ms
        .iter()
        .map(|m| m.spec.clone().unwrap_or_default())
        .collect();
    let each = |f: &dyn Fn(&crate::engine::scheduler::SpecStats) -> u64| -> Vec<f64> {
        stats.iter().map(|s| f(s) as f64).collect()
    };
    e.counter(
        "vllm:spec_decode_num_drafts",
        "Number of spec decoding drafts.",
        &each(&|s| s.drafts),
    );
    e.counter(
        "vllm:spec_decode_num_draft_tokens",
        "Number of draft tokens.",
        &each(&|s| s.draft_tokens),
    );
    e.counter(
        "vllm:spec_decode_num_accepted_tokens",
        "Number of accepted tokens.",
        &each(&|s| s.accepted_tokens),
    );
    let positions: Vec<String> = (0..k).map(|p| p.to_string()).collect();
    let by_position: Vec<Vec<(&str, f64)>> = stats
        .iter()
        .map(|s| {
            positions
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    (
                        p.as_str(),
                        s.accepted_per_position.get(i).copied().unwrap_or(0) as f64,
                    )
                })
                .collect()
        })
        .collect();
    e.counter_by(
        "vllm:spec_decode_num_accepted_tokens_per_pos",
        "Accepted tokens per draft position.",
        "position",
        &by_position,
    );
}

/// vLLM's `/version`: what the server is, for the results history.
async fn version() -> Response {
    Json(json!({"version": concat!("tokenscope-sim ", env!("CARGO_PKG_VERSION"))})).into_response()
}

/// vLLM's `POST /reset_prefix_cache`: every engine's unused cached
/// prefixes dropped (what `--between-points reset-prefix-cache` calls).
async fn reset_prefix_cache(State(s): State<Arc<Shared>>) -> Response {
    let blocks: u64 = s
        .replicas
        .iter()
        .map(|r| lock(&r.engine).scheduler.kv.reset_prefix_cache())
        .sum();
    Json(json!({"reset": true, "blocks_freed": blocks})).into_response()
}

async fn health(State(s): State<Arc<Shared>>) -> Response {
    s.loading()
        .unwrap_or_else(|| StatusCode::OK.into_response())
}

async fn models(State(s): State<Arc<Shared>>) -> Response {
    if let Some(loading) = s.loading() {
        return loading;
    }
    let body = format!(
        r#"{{"object":"list","data":[{{"id":{},"object":"model","owned_by":"tokenscope-sim","max_model_len":{}}}]}}"#,
        s.model_json, s.max_model_len
    );
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// A series of one figure per replica: its name, help and value.
type Figure = (&'static str, &'static str, fn(&Metrics) -> f64);

/// vLLM V1's gauges.
const GAUGES: [Figure; 3] = [
    (
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        |m| m.state.running as f64,
    ),
    (
        "vllm:num_requests_waiting",
        "Number of requests waiting to be processed.",
        |m| m.state.waiting as f64,
    ),
    (
        "vllm:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.",
        |m| m.state.kv_usage,
    ),
];

/// vLLM V1's counters (named without `_total`, which the exposition adds).
const COUNTERS: [Figure; 5] = [
    (
        "vllm:num_preemptions",
        "Cumulative number of preemption from the engine.",
        |m| m.state.preemptions_total as f64,
    ),
    (
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        |m| m.prefix_queries as f64,
    ),
    (
        "vllm:prefix_cache_hits",
        "Prefix cache hits, in terms of number of cached tokens.",
        |m| m.prefix_hits as f64,
    ),
    (
        "vllm:prompt_tokens",
        "Number of prefill tokens processed.",
        |m| m.prompt_tokens as f64,
    ),
    (
        "vllm:generation_tokens",
        "Number of generation tokens processed.",
        |m| m.generation_tokens as f64,
    ),
];

/// A histogram series: its name, help and the replica's histogram.
type Distribution = (&'static str, &'static str, fn(&Metrics) -> &Histogram);

/// vLLM V1's histograms, in its bucket layouts.
const HISTOGRAMS: [Distribution; 9] = [
    (
        "vllm:iteration_tokens_total",
        "Number of tokens per engine_step.",
        |m| &m.iteration_tokens,
    ),
    (
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        |m| &m.ttft,
    ),
    (
        "vllm:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        |m| &m.itl,
    ),
    (
        "vllm:request_time_per_output_token_seconds",
        "Histogram of time_per_output_token_seconds per request.",
        |m| &m.tpot,
    ),
    (
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        |m| &m.e2e,
    ),
    (
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        |m| &m.queue,
    ),
    (
        "vllm:request_prefill_time_seconds",
        "Histogram of time spent in PREFILL phase for request.",
        |m| &m.prefill,
    ),
    (
        "vllm:request_decode_time_seconds",
        "Histogram of time spent in DECODE phase for request.",
        |m| &m.decode,
    ),
    (
        "vllm:request_inference_time_seconds",
        "Histogram of time spent in RUNNING phase for request.",
        |m| &m.inference,
    ),
];

/// `/metrics`: vLLM V1's names, types and units, a series per replica
/// (`engine="i"`), as a vLLM server with several engines exposes them.
async fn metrics_text(State(s): State<Arc<Shared>>) -> Response {
    let labels = (0..s.replicas.len())
        .map(|i| format!("model_name={},engine=\"{i}\"", s.model_json))
        .collect();
    let mut e = Exposition::each(labels);
    let ms: Vec<_> = s.replicas.iter().map(|r| lock(&r.metrics)).collect();
    let each = |f: fn(&Metrics) -> f64| -> Vec<f64> { ms.iter().map(|m| f(m)).collect() };
    for (name, help, value) in GAUGES {
        e.gauge(name, help, &each(value));
    }
    for (name, help, value) in COUNTERS {
        e.counter(name, help, &each(value));
    }
    e.counter_by(
        "vllm:request_success",
        "Count of successfully processed requests.",
        "finished_reason",
        &ms.iter()
            .map(|m| {
                vec![
                    ("stop", 0.0),
                    ("length", m.finished_length as f64),
                    ("abort", m.finished_abort as f64),
                ]
            })
            .collect::<Vec<_>>(),
    );
    if ms.iter().any(|m| m.spec.is_some()) {
        spec_counters(&mut e, &ms, s.config.spec.as_ref().map_or(0, |s| s.k));
    }
    for (name, help, hist) in HISTOGRAMS {
        e.histogram(name, help, &ms.iter().map(|m| hist(m)).collect::<Vec<_>>());
    }
    drop(ms);
    engine_facts(&mut e, &s);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        e.finish(),
    )
        .into_response()
}

/// The info series: the simulated deployment, and each replica's cache
/// config as vLLM's `cache_config_info` gives it.
fn engine_facts(e: &mut Exposition, s: &Shared) {
    let (c, n) = (&s.config, s.replicas.len());
    let facts = |i: usize| -> Vec<(&str, String)> {
        vec![
            ("engine", i.to_string()),
            ("block_size", c.block_size.to_string()),
            ("cache_dtype", format!("{:?}", c.kv_dtype).to_lowercase()),
            (
                "enable_prefix_caching",
                c.prefix_caching.to_string().to_uppercase(),
            ),
            (
                "gpu_memory_utilization",
                c.gpu_memory_utilization.to_string(),
            ),
            ("num_gpu_blocks", s.kv_blocks.to_string()),
        ]
    };
    e.info(
        "tokenscope:engine_info",
        "The simulated deployment behind this server (tokenscope sim serve).",
        &[vec![
            ("model", c.model.name.clone()),
            ("gpu", c.gpu.name.clone()),
            ("tp", c.tp.to_string()),
            ("replicas", n.to_string()),
        ]],
    );
    e.info(
        "vllm:cache_config_info",
        "Information of the LLMEngine CacheConfig",
        &(0..n).map(facts).collect::<Vec<_>>(),
    );
}

async fn respond(s: Arc<Shared>, body: Bytes, dialect: Dialect) -> Response {
    if let Some(loading) = s.loading() {
        return loading;
    }
    let arrived = Instant::now();
    let body = match parse_body(&body) {
        Ok(b) => b,
        Err(msg) => return bad_request(&msg),
    };
    let ask = Ask::read(&body, dialect);
    // vLLM refuses a priority it would not heed.
    let priority = body["priority"].as_i64().unwrap_or(0);
    if priority != 0 && !s.config.priority_scheduling {
        return bad_request(&format!(
            "Got priority {priority} but Priority scheduling is not enabled."
        ));
    }
    let id = s.next_id.fetch_add(1, Ordering::Relaxed);
    let in_flight = crate::answers::InFlight::enter(&s.in_flight);
    let fault = s.options.faults.for_request(s.options.seed, id);
    if let Fault::Status(code) = fault {
        return injected_status(code);
    }
    let (prompt, max_tokens, encoder) = match sizes(&s, &ask) {
        Ok(sizes) => sizes,
        Err(refused) => return *refused,
    };
    let handover = s.front_end(arrived, prompt).await;
    let (events, rx) = mpsc::unbounded_channel();
    let seq = s.seq_of(id, (prompt + encoder, max_tokens), (&body, dialect));
    if let Err(stopped) = s.submit(seq, events, arrived) {
        return *stopped;
    }
    drop(handover);
    let mut writer = Writer::new(dialect, "sim", id, &s.model_json, prompt).asked(&ask);
    let reasoning = s
        .options
        .reasoning(id)
        .map(|(n, how)| (n.min(max_tokens), how));
    if let Some((n, how)) = reasoning {
        writer.set_reasoning(n, how);
    }
    let context = crate::answers::Context {
        body: &body,
        ask: &ask,
        dialect,
        faults: &s.options.faults,
        seed: s.options.seed,
        n: id,
        tokens: max_tokens,
        reasoning: reasoning.map_or(0, |r| r.0),
        in_flight: in_flight.at_arrival,
    };
    crate::answers::shape(&mut writer, &context);
    if !ask.stream {
        return whole(writer, rx, &s.options.model_name).await;
    }
    let state = StreamState {
        writer,
        stall: s.options.stall,
        rx,
        sent: 0,
        phase: Phase::Role,
        include_usage: ask.include_usage,
        fault,
        half: max_tokens / 2,
        _in_flight: in_flight,
    };
    let body = Body::from_stream(futures_util::stream::unfold(state, |mut st| async move {
        let item = st.next().await?;
        Some((item, st))
    }));
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(body)
        .expect("a valid response")
}

/// A generating request's sizes as the engine sees them: its prompt, the
/// output it may write, and the vision encoder's work as prefill tokens of
/// equal cost. A request longer than the model's context is refused, as
/// vLLM refuses it.
fn sizes(s: &Shared, ask: &Ask) -> Result<(u64, u64, u64), Box<Response>> {
    let max_tokens = ask
        .max_tokens
        .map_or(s.options.default_max_tokens as u64, |n| {
            n.clamp(1, u32::MAX as u64)
        });
    let params = s.config.model.active_params_b * 1e9;
    let encoder = (ask.image_tokens as f64 * crate::vision::ENCODER_FLOPS_PER_TOKEN
        / (2.0 * params))
        .ceil()
        .min(u32::MAX as f64 / 2.0) as u64;
    let prompt = ask.prompt_tokens.clamp(1, u32::MAX as u64 / 2);
    if let Some(why) = EngineConfig::too_long(s.max_model_len, prompt, max_tokens) {
        return Err(Box::new(bad_request(&why)));
    }
    Ok((prompt, max_tokens, encoder))
}

/// A non-streamed answer: waits for its last token, then writes it whole.
async fn whole(
    mut writer: Writer,
    mut rx: mpsc::UnboundedReceiver<Event>,
    model_name: &str,
) -> Response {
    let mut n = 0;
    while let Some(ev) = rx.recv().await {
        n += 1;
        if let Event::Done(timings) = ev {
            writer.set_cached_tokens(timings["cache_n"].as_u64().unwrap_or(0));
            break;
        }
    }
    Json(writer.whole(n, model_name)).into_response()
}

/// An embeddings or rerank request: each of its sequences (an input, a
/// query–document pair) goes to the engine as a prefill that ends at its
/// first token, as a pooling model's forward pass ends; the answer leaves
/// when the last is read. Nothing is generated or streamed.
async fn pool(s: Arc<Shared>, body: Bytes, kind: Pooled) -> Response {
    if let Some(loading) = s.loading() {
        return loading;
    }
    let arrived = Instant::now();
    let body = match parse_body(&body) {
        Ok(b) => b,
        Err(msg) => return bad_request(&msg),
    };
    let seqs = match kind.sequences(&body) {
        Ok(seqs) => seqs,
        Err(msg) => return bad_request(&msg),
    };
    let first = s.next_id.fetch_add(seqs.len() as u64, Ordering::Relaxed);
    if let Fault::Status(code) = s.options.faults.for_request(s.options.seed, first) {
        return injected_status(code);
    }
    // A pooling model's pass writes nothing: an input may fill the context.
    let refused = seqs
        .iter()
        .find_map(|&n| EngineConfig::too_long(s.max_model_len, n, 0));
    if let Some(why) = refused {
        return bad_request(&why);
    }
    let handover = s.front_end(arrived, seqs.iter().sum()).await;
    let mut waits = Vec::with_capacity(seqs.len());
    for (k, &tokens) in seqs.iter().enumerate() {
        let (events, rx) = mpsc::unbounded_channel();
        let seq = Seq::new(first + k as u64, tokens.max(1) as u32, 1, 0.0);
        if let Err(stopped) = s.submit(seq, events, arrived) {
            return *stopped;
        }
        waits.push(rx);
    }
    drop(handover);
    for mut rx in waits {
        while let Some(ev) = rx.recv().await {
            if matches!(ev, Event::Done(_)) {
                break;
            }
        }
    }
    Json(kind.answer(&body, &s.options.model_name, &seqs)).into_response()
}

enum Phase {
    Role,
    Tokens,
    Usage,
    Done,
    End,
}

struct StreamState {
    writer: Writer,
    stall: Duration,
    rx: mpsc::UnboundedReceiver<Event>,
    sent: u64,
    phase: Phase,
    include_usage: bool,
    fault: Fault,
    half: u64,
    /// Counted in flight until the stream is done with.
    _in_flight: crate::answers::InFlight,
}

impl StreamState {
    /// The next token and any the engine handed over with it (a multi-step
    /// block's, or a step's that this stream fell behind on), with their
    /// count: they go out as one event, as vLLM sends the tokens it has
    /// when the stream is written. A stream with a fault to inject takes
    /// them one at a time, so the fault falls where it should.
    async fn take_tokens(&mut self) -> Option<(Event, u64)> {
        let mut ev = self.rx.recv().await?;
        let mut n = 1;
        while matches!(self.fault, Fault::None) && matches!(ev, Event::Token) {
            match self.rx.try_recv() {
                Ok(next) => (ev, n) = (next, n + 1),
                Err(_) => break,
            }
        }
        Some((ev, n))
    }

    async fn next(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        loop {
            match self.phase {
                Phase::Role => {
                    self.phase = Phase::Tokens;
                    if let Some(role) = self.writer.role() {
                        return Some(Ok(role));
                    }
                }
                Phase::Tokens => {
                    let (ev, n) = self.take_tokens().await?;
                    // A stream with a fault takes its tokens one at a time.
                    if self.sent == self.half {
                        match self.fault {
                            Fault::Disconnect => {
                                return Some(Err(std::io::Error::other("injected disconnect")))
                            }
                            Fault::Malformed => return Some(Ok(Writer::malformed())),
                            Fault::Stall => tokio::time::sleep(self.stall).await,
                            _ => {}
                        }
                    }
                    // Hidden reasoning streams nothing.
                    let token = self.writer.tokens(self.sent, self.sent + n, None);
                    self.sent += n;
                    if let Event::Done(timings) = ev {
                        self.phase = Phase::Usage;
                        if let Some(cached) = timings["cache_n"].as_u64() {
                            self.writer.set_cached_tokens(cached);
                        }
                        let mut both = token.map(|t| t.to_vec()).unwrap_or_default();
                        both.extend_from_slice(&self.writer.finish(&timings, self.sent));
                        return Some(Ok(Bytes::from(both)));
                    }
                    if let Some(token) = token {
                        return Some(Ok(token));
                    }
                }
                Phase::Usage => {
                    self.phase = Phase::Done;
                    if self.include_usage {
                        return Some(Ok(self.writer.usage(self.sent)));
                    }
                }
                Phase::Done => {
                    self.phase = Phase::End;
                    return self.writer.done().map(Ok);
                }
                Phase::End => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The engine waits for requests due by now until they are submitted,
    /// not for one due later, and for a lost one no longer than its bound;
    /// every request leaves the gate when dropped.
    #[tokio::test]
    async fn requests_due_are_waited_for_and_no_longer() {
        let gate = Arc::new(BatchGate::default());
        assert_eq!(gate.wait_for_due().await, 0, "nothing expected");
        let later = gate.expect(Instant::now() + Duration::from_secs(3600));
        assert_eq!(gate.wait_for_due().await, 0, "a request due later");
        let due: Vec<Handover> = (0..3).map(|_| gate.expect(Instant::now())).collect();
        let submitted = tokio::spawn(async move { drop(due) });
        let waits = gate.wait_for_due().await;
        assert!(
            (1..GATE_WAITS).contains(&waits),
            "waited {waits} times for members submitted at once"
        );
        submitted.await.expect("the submitting task");
        let lost = gate.expect(Instant::now());
        assert_eq!(gate.wait_for_due().await, GATE_WAITS, "a lost request");
        drop((lost, later));
        assert!(lock(&gate.0).is_empty());
    }
}
