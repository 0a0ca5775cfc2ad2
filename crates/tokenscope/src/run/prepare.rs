//! Phase 2 of a run: everything opened before its clock starts, so none of
//! it is measured as the server's time — the records file (a failed write
//! stops the run: no request is sent that cannot be kept), the HTTP client,
//! the metrics scraper's baseline scrape, one connection per stream, and a
//! shard's wait for the shared start instant.

use super::probe::Probed;
use super::target::metrics_endpoints;
use crate::exit::Exit;
use crate::spec::shard::{wait_until, CONNECT_AHEAD};
use crate::spec::RunSpec;
use anyhow::Context;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokenscope_core::clock::Clock;
use tokenscope_load::connections::{self, Warmed};
use tokenscope_load::http1;
use tokenscope_load::loop_delay;
use tokenscope_load::protocol::Protocol;
use tokenscope_load::recorder::Recorder;
use tokenscope_load::request::Target;
use tokenscope_load::runner::{Progress, Runner};
use tokenscope_load::structured::AnswerCheck;
use tokenscope_load::tools::ToolUse;
use tokenscope_telemetry::scraper::{ScrapeConfig, Scraper};
use tokenscope_workload::adapters::Adapters;
use tokio_util::sync::CancellationToken;

/// A run ready to start: its clock has just started.
pub struct Prepared {
    /// `--serve-metrics`: the exporter and this run's name in it.
    pub live: Option<(Arc<crate::live_metrics::LiveMetrics>, String)>,
    /// `--otlp-endpoint`: this run's push of the same figures.
    pub otlp: Option<Arc<crate::otlp::OtlpExport>>,
    pub probed: Probed,
    pub started_at: String,
    pub recorder: Recorder,
    pub runner: Arc<Runner>,
    pub http: Arc<http1::Client>,
    pub scraper: Option<Scraper>,
    pub progress: Arc<Progress>,
    pub cancel: CancellationToken,
    /// Set by Ctrl-C or SIGTERM.
    pub interrupted: Arc<AtomicBool>,
    pub warmed: Option<Warmed>,
    /// A shard: how late after the shared instant its load started.
    pub late: Option<Duration>,
    pub clock: Clock,
    /// The clock's origin on the wall clock, µs since the Unix epoch.
    pub origin_unix_us: u64,
    pub loop_probe: loop_delay::Probe,
}

pub async fn prepare(spec: &RunSpec, probed: Probed) -> anyhow::Result<Prepared> {
    let out_dir = probed.out_dir.clone();
    std::fs::create_dir_all(&out_dir)
        .with_context(|| format!("creating the run directory {}", out_dir.display()))?;
    crate::run_dir::reserve_output(&out_dir)?;
    let cancel = CancellationToken::new();
    refuse_closed_saturation(spec)?;
    let live = live_metrics(spec, &probed)?;
    let ids = request_ids(&spec.request, &probed.headers);
    let otlp = otlp_export(spec, &probed, &ids)?;
    let progress = Arc::new(Progress::default());
    let recorder = Recorder::create_with(
        &out_dir.join(crate::run_dir::REQUESTS),
        cancel.clone(),
        crate::spec::pricing::aggregator(&spec.output)
            .with_class_slos(class_slos(spec))
            .with_abandoned_in_latency(spec.request.abandoned_in_latency),
        recorder_options(spec, live.clone(), otlp.clone()),
    )?;
    let target = target(spec, &probed, ids)?;
    let started_at = crate::run_dir::now_rfc3339();
    // The baseline scrape comes before the clock starts: a slow metrics
    // endpoint never eats into the load's time or bunches its schedule.
    let mut scraper = start_scraper(spec, &probed, &progress, &out_dir).await?;
    let start_at = spec.shard.as_ref().and_then(|s| s.start_at.as_ref());
    // A shared start instant: connections are opened just before it, as
    // servers close idle ones within seconds (vLLM's after 5 s).
    if let Some(at) = start_at {
        wait_until(at, CONNECT_AHEAD).await;
    }
    let warmed = warm(spec, &probed, &target).await?;
    // Every shard starts its load at the same instant, connections already open.
    let late = match start_at {
        Some(at) => Some(wait_until(at, Duration::ZERO).await),
        None => None,
    };
    let clock = Clock::start();
    let origin_unix_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    if let Some(s) = &mut scraper {
        s.run_from(clock.origin());
    }
    if let Some(o) = &otlp {
        o.started(origin_unix_us);
    }
    let loop_probe = loop_delay::Probe::start(clock);
    if let Some((m, run)) = &live {
        let sources = crate::live_metrics::RunSources {
            progress: progress.clone(),
            loop_delay: Some(loop_probe.shared()),
            server: scraper.as_ref().map(|s| s.latest()),
        };
        m.started(run, sources);
    }
    let http = target.http.clone();
    let runner = Arc::new(Runner {
        target,
        clock,
        sink: recorder.sink(),
        cancel: cancel.clone(),
        progress: progress.clone(),
        panic_at: std::env::var("TOKENSCOPE_FAULT_PANIC_REQUEST")
            .ok()
            .and_then(|v| v.parse().ok()),
    });
    Ok(Prepared {
        live,
        otlp,
        probed,
        started_at,
        recorder,
        runner,
        http,
        scraper,
        progress,
        cancel,
        interrupted: Arc::new(AtomicBool::new(false)),
        warmed,
        late,
        clock,
        origin_unix_us,
        loop_probe,
    })
}

/// `--stop-on saturation` judges a queue growing with send time: an open
/// loop's. A closed loop's users bound its queue.
fn refuse_closed_saturation(spec: &RunSpec) -> anyhow::Result<()> {
    let closed = matches!(
        spec.plan.pattern,
        tokenscope_workload::arrival::LoadPattern::Closed { .. }
    );
    let asked = spec
        .client
        .stop_on
        .contains(&tokenscope_core::breaker::StopRule::Saturation);
    match closed && asked {
        true => Err(Exit::usage(
            "--stop-on saturation needs an open loop (--rate): a closed loop's users bound the server's queue, so it cannot grow without end".into(),
        )),
        false => Ok(()),
    }
}

/// What every request is sent to and how.
fn target(
    spec: &RunSpec,
    probed: &Probed,
    ids: tokenscope_load::request_ids::RequestIds,
) -> anyhow::Result<Target> {
    let (base, api, r) = (&probed.base, probed.api, &spec.request);
    refuse_unfit(spec, api)?;
    // A pooling API answers whole: nothing streams.
    let stream = !r.no_stream && !api.pooling();
    let path = api.endpoint(&probed.model, stream);
    let endpoint = reqwest::Url::parse(&format!("{base}{path}")).context("endpoint URL")?;
    let http = http1::Client::new(
        &endpoint,
        &probed.headers,
        Duration::from_secs(10),
        probed.ca_pem.as_deref(),
    )
    .map_err(|why| Exit::usage(format!("--url `{base}`: {why}")))?
    .with_content_type(api.content_type());
    Ok(Target {
        pacing: tokenscope_load::target::Pacing {
            chunk_ms: r.audio_chunk_ms,
            paced: r.audio_pace == "realtime",
        },
        http: Arc::new(http),
        api,
        model: probed.model.clone(),
        ignore_eos: r.ignore_eos,
        stream,
        documents: api.documents(r.batch_size),
        adapters: adapters(spec)?,
        check: answer_check(spec, api)?,
        tools: tool_use(spec, api)?,
        grade: grade(spec)?,
        keep_text: r.keep_text,
        shape: tokenscope_load::protocol::Shape {
            system_prompt: r.system_prompt.clone(),
            temperature: r.temperature,
            extra: r.extra_body.clone().unwrap_or_default(),
            response_format: r.response_format.clone(),
        },
        reasoning: r.reasoning_parser,
        timeout: r.timeout,
        idle_timeout: r.idle_timeout,
        ids,
        classes: classes(spec)?,
        abandon: r.cancel.zip(r.cancel_after).map(|(share, after)| {
            tokenscope_load::abandon::Abandon {
                share,
                after,
                seed: spec.plan.seed,
            }
        }),
    })
}

/// `--class`: the classes each request draws from, by the run's seed.
fn classes(spec: &RunSpec) -> anyhow::Result<Option<Arc<tokenscope_load::classes::Classes>>> {
    let list = &spec.request.classes;
    if list.is_empty() {
        return Ok(None);
    }
    let classes = tokenscope_load::classes::Classes::new(list.clone(), spec.plan.seed)
        .map_err(Exit::usage)?;
    Ok(Some(Arc::new(classes)))
}

/// `--class NAME:…:slo=SPEC`: each class's own SLO (checked as the flag was read).
fn class_slos(spec: &RunSpec) -> std::collections::BTreeMap<String, tokenscope_core::slo::Slo> {
    spec.request
        .classes
        .iter()
        .filter_map(|c| {
            let slo = tokenscope_core::slo::Slo::parse(c.slo.as_deref()?).ok()?;
            Some((c.name.clone(), slo))
        })
        .collect()
}

/// Each request's id header and trace context; a `--header` of the same
/// name is the user's own id, sent instead of tokenscope's.
fn request_ids(
    r: &crate::cli::RequestArgs,
    headers: &reqwest::header::HeaderMap,
) -> tokenscope_load::request_ids::RequestIds {
    let name = r.request_id_header.as_str();
    let ours = name != "none" && !headers.contains_key(name.to_ascii_lowercase().as_str());
    // A user's own traceparent is sent instead of ours, too.
    let context = r.trace_context && !headers.contains_key("traceparent");
    tokenscope_load::request_ids::RequestIds::new(ours.then_some(name), context)
}

/// Refuses what the API cannot carry, before anything is sent: a batch to
/// a generating API, media it has no field for (the requests would go
/// without them), sessions to a pooling API.
fn refuse_unfit(spec: &RunSpec, api: &dyn Protocol) -> anyhow::Result<()> {
    let r = &spec.request;
    let priority = r.classes.iter().any(|c| c.priority.is_some());
    if priority && !matches!(api.name(), "openai-chat" | "openai-completions") {
        return Err(Exit::usage(format!(
            "--class …:priority=N is sent as vLLM's `priority` field of the OpenAI chat and completions APIs; {} has no such field",
            api.name()
        )));
    }
    if r.cancel.is_some() && (r.no_stream || api.pooling()) {
        return Err(Exit::usage(format!(
            "--cancel leaves a streamed answer part-way; {} answers whole here (--no-stream or a pooling API): nothing to leave",
            api.name()
        )));
    }
    if api.audio_in()
        && !spec
            .load
            .media_kinds()
            .contains(&tokenscope_load::protocol::MediaKind::Audio)
    {
        return Err(Exit::usage(format!(
            "{} sends an audio clip with every request: add --audio 1 (and --audio-seconds S or a SPEC such as uniform:2..10), or a --dataset whose entries name audio",
            api.name()
        )));
    }
    let lag_slo = spec.output.slo.as_ref().is_some_and(|s| {
        s.objectives
            .iter()
            .any(|o| o.metric == tokenscope_core::slo::SloMetric::Lag)
    });
    if lag_slo && !api.websocket() {
        return Err(Exit::usage(format!(
            "--slo lag_…: the lag behind the speaker is a realtime session's (--api openai-realtime); {} has none",
            api.name()
        )));
    }
    let clips = spec.load.flags.audio;
    if api.audio_in() && clips > 1 {
        return Err(Exit::usage(format!(
            "{} uploads one clip a request: --audio {clips} would send one and count {clips} (use --audio 1)",
            api.name()
        )));
    }
    if r.batch_size > 1 && !api.pooling() {
        return Err(Exit::usage(format!(
            "--batch-size {} applies to the pooling APIs (openai-embeddings, rerank); {} sends one prompt a request",
            r.batch_size,
            api.name()
        )));
    }
    let unsent: Vec<String> = spec
        .load
        .media_kinds()
        .into_iter()
        .filter(|k| !api.media_kinds().contains(k))
        .map(|k| format!("{k:?}").to_lowercase())
        .collect();
    if !unsent.is_empty() {
        return Err(Exit::usage(format!(
            "{} cannot carry {} (requests would go without them): openai-chat takes images, audio and video; openai-responses and anthropic-messages take images",
            api.name(),
            unsent.join(" or ")
        )));
    }
    if api.pooling() && spec.plan.workload.multi_turn.is_some() {
        let why = format!(
            "--multi-turn needs a generating API; {} answers whole vectors or scores",
            api.name()
        );
        return Err(Exit::usage(why));
    }
    Ok(())
}

/// `--lora`: the adapters and how requests are assigned to them.
fn adapters(spec: &RunSpec) -> anyhow::Result<Option<Arc<Adapters>>> {
    let r = &spec.request;
    if r.lora.is_empty() {
        return Ok(None);
    }
    let a = Adapters::new(
        r.lora.clone(),
        r.lora_assignment.clone(),
        spec.plan.workload.seed,
    );
    Ok(Some(Arc::new(a.map_err(Exit::usage)?)))
}

/// `--response-format`: the check each answer is held to, where the API
/// has a field to ask for it.
fn answer_check(spec: &RunSpec, api: &dyn Protocol) -> anyhow::Result<Option<Arc<AnswerCheck>>> {
    let Some(f) = &spec.request.response_format else {
        return Ok(None);
    };
    if !api.response_formats() {
        return Err(Exit::usage(format!(
            "--response-format: {} has no field for it (chat, completions, Responses, Anthropic, TGI and SGLang do)",
            api.name()
        )));
    }
    let check = AnswerCheck::new(f).map_err(|e| Exit::usage(format!("--response-format: {e}")))?;
    Ok(Some(Arc::new(check)))
}

/// `--grade`: needs a dataset whose entries carry their expected answers.
fn grade(spec: &RunSpec) -> anyhow::Result<Option<Arc<tokenscope_load::grading::Grade>>> {
    let Some(g) = &spec.request.grade else {
        return Ok(None);
    };
    if !spec.load.has_expected_answers() {
        return Err(Exit::usage(
            "--grade needs answers to grade against: a --dataset whose entries carry `expected` (or --dataset builtin:arithmetic)".into(),
        ));
    }
    Ok(Some(Arc::new(g.clone())))
}

/// What the recorder does besides writing records: the live taps (the
/// exporter and the OTLP push, when asked for), and for a long run its
/// windows and rotation (`spec::records`).
fn recorder_options(
    spec: &RunSpec,
    live: Option<(Arc<crate::live_metrics::LiveMetrics>, String)>,
    otlp: Option<Arc<crate::otlp::OtlpExport>>,
) -> tokenscope_load::recorder::Options {
    let (records, duration) = (&spec.output.records, spec.plan.duration);
    // The exporter serves each window's percentiles and SLO status: with
    // --serve-metrics there are windows (a minute) unless --windows says.
    let served = live
        .as_ref()
        .map(|_| crate::spec::records::DEFAULT_WINDOW.as_micros() as u64);
    let windows = records
        .window_us(duration)
        .or(served)
        .map(|us| (us, spec.output.slo.clone()));
    let window_tap = live.clone().filter(|_| windows.is_some()).map(|(m, run)| {
        Arc::new(move |w: &tokenscope_core::windows::WindowSummary| m.window(&run, w))
            as tokenscope_load::recorder::WindowTap
    });
    tokenscope_load::recorder::Options {
        tap: tap(live, otlp, spec.output.slo.clone()),
        rotation: records.rotation(duration),
        windows,
        window_tap,
        bounded: None,
        hand_back: None,
        breaker: (!spec.client.stop_on.is_empty())
            .then(|| tokenscope_core::breaker::Breaker::new(spec.client.stop_on.clone())),
    }
}

fn tap(
    live: Option<(Arc<crate::live_metrics::LiveMetrics>, String)>,
    otlp: Option<Arc<crate::otlp::OtlpExport>>,
    slo: Option<tokenscope_core::slo::Slo>,
) -> Option<tokenscope_load::recorder::Tap> {
    if live.is_none() && otlp.is_none() {
        return None;
    }
    Some(Arc::new(
        move |r: &tokenscope_core::record::RequestRecord| {
            if let Some((m, run)) = &live {
                m.observe(run, slo.as_ref(), r);
            }
            if let Some(o) = &otlp {
                o.observe(r);
            }
        },
    ))
}

/// `--otlp-endpoint`: this run's push, its resource saying what ran.
fn otlp_export(
    spec: &RunSpec,
    probed: &Probed,
    ids: &tokenscope_load::request_ids::RequestIds,
) -> anyhow::Result<Option<Arc<crate::otlp::OtlpExport>>> {
    let Some(url) = &spec.output.otlp_endpoint else {
        return Ok(None);
    };
    let run = probed
        .out_dir
        .file_name()
        .map_or_else(|| "run".into(), |n| n.to_string_lossy().into_owned());
    let shard = spec.shard.as_ref().map(|s| s.shard.index.to_string());
    let resource = vec![
        (
            "service.version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        ),
        ("tokenscope.run".to_string(), run),
        ("tokenscope.api".to_string(), probed.api.name().to_string()),
        (
            "tokenscope.tag".to_string(),
            spec.output.history.tag.join(","),
        ),
        ("tokenscope.shard".to_string(), shard.unwrap_or_default()),
        ("server.address".to_string(), probed.base.clone()),
    ];
    let export = crate::otlp::OtlpExport::start(
        url,
        crate::otlp::Run {
            operation: crate::otlp::operation(probed.api.name()),
            model: probed.model.clone(),
            resource,
            span_sample: spec.output.otlp_span_sample,
            ids: ids.clone(),
        },
    )?;
    Ok(Some(Arc::new(export)))
}

/// `--serve-metrics`: the process's exporter and this run's name in it
/// (its directory's), labelled with what ran.
fn live_metrics(
    spec: &RunSpec,
    probed: &Probed,
) -> anyhow::Result<Option<(Arc<crate::live_metrics::LiveMetrics>, String)>> {
    let Some(addr) = spec.output.serve_metrics else {
        return Ok(None);
    };
    let shard = spec.shard.as_ref().map(|s| s.shard.index.to_string());
    let labels = vec![
        ("model".to_string(), probed.model.clone()),
        ("api".to_string(), probed.api.name().to_string()),
        ("tag".to_string(), spec.output.history.tag.join(",")),
        ("shard".to_string(), shard.unwrap_or_default()),
    ];
    let m = crate::live_metrics::exporter(addr, labels)?;
    let run = probed
        .out_dir
        .file_name()
        .map_or_else(|| "run".into(), |n| n.to_string_lossy().into_owned());
    Ok(Some((m, run)))
}

/// `--tools` and `--tool-choice` (or a dataset's tools): what every
/// request offers, refused where the API has no tools or nothing is offered.
fn tool_use(spec: &RunSpec, api: &dyn Protocol) -> anyhow::Result<Option<Arc<ToolUse>>> {
    let r = &spec.request;
    let from_dataset = spec.load.has_tools();
    if r.tools.is_none() && !from_dataset {
        return match r.tool_choice {
            Some(_) => Err(Exit::usage(
                "--tool-choice needs tools to choose from: --tools FILE, or a --dataset whose entries carry `tools`".into(),
            )),
            None => Ok(None),
        };
    }
    if !api.tool_calls() {
        return Err(Exit::usage(format!(
            "{} has no tools (chat, Responses and Anthropic do): the requests would go without them",
            api.name()
        )));
    }
    if let (Some(tokenscope_load::tools::ToolChoice::Named(name)), Some(tools)) =
        (&r.tool_choice, &r.tools)
    {
        if !tools.iter().any(|t| t["function"]["name"] == name.as_str()) {
            return Err(Exit::usage(format!(
                "--tool-choice {name}: no tool of that name in --tools"
            )));
        }
    }
    Ok(Some(Arc::new(ToolUse {
        tools: r.tools.clone().unwrap_or_default(),
        choice: r.tool_choice.clone().unwrap_or_default(),
        check: Default::default(),
    })))
}

/// The scraper of the server's metrics and the GPUs, its baseline taken;
/// `None` when nothing is to be read.
async fn start_scraper(
    spec: &RunSpec,
    probed: &Probed,
    progress: &Arc<Progress>,
    out_dir: &Path,
) -> anyhow::Result<Option<Scraper>> {
    let m = &spec.metrics;
    let metrics_urls = match (m.no_metrics, m.metrics_urls.is_empty()) {
        (true, _) => Vec::new(),
        (false, true) => vec![format!("{}/metrics", probed.base)],
        (false, false) => m.metrics_urls.clone(),
    };
    if metrics_urls.is_empty() && probed.local_gpu.is_none() {
        return Ok(None);
    }
    // The target's headers also go to a metrics URL on its own origin.
    let config = ScrapeConfig {
        local_gpu: probed.local_gpu.clone(),
        endpoints: metrics_endpoints(
            &probed.base,
            &metrics_urls,
            &probed.headers,
            &m.metrics_headers,
        )?,
        interval: m.scrape_interval,
    };
    let progress = progress.clone();
    let in_flight = Arc::new(move || {
        progress
            .sent
            .load(Ordering::Relaxed)
            .saturating_sub(progress.finished.load(Ordering::Relaxed))
    });
    let path = out_dir.join(crate::run_dir::TIMESERIES);
    let scraper = Scraper::start(config, &path, in_flight)
        .await
        .with_context(|| format!("creating {}", path.display()))?;
    Ok(Some(scraper))
}

/// One connection per stream, opened before the clock starts: a burst is
/// then N writes on open sockets, not N connects on the client's thread.
async fn warm(spec: &RunSpec, probed: &Probed, target: &Target) -> anyhow::Result<Option<Warmed>> {
    if spec.client.cold_connections {
        return Ok(None);
    }
    let models_url =
        reqwest::Url::parse(&format!("{}/v1/models", probed.base)).context("models URL")?;
    let warmed = connections::warm(
        &target.http,
        models_url.path(),
        probed.streams as u64,
        probed.probe_timeout,
    )
    .await;
    Ok(Some(warmed))
}
