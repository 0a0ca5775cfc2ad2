//! `tokenscope bench`: probe the target, run the load, write the run
//! directory, print the summary, choose the exit code.

use crate::cli::{ApiChoice, BenchArgs, BuiltinChoice, GpuSource};
use crate::cold_start;
use crate::exit::Exit;
use crate::outcome::{self, RunFacts};
use anyhow::Context;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION};
use serde_json::json;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokenscope_core::clock::Clock;
use tokenscope_core::results::Finding;
use tokenscope_core::results::{self, ClientUsage, RunResults, Server};
use tokenscope_history::Kind;
use tokenscope_load::connections::{self, FileLimit};
use tokenscope_load::cpu::thread_cpu;
use tokenscope_load::http1;
use tokenscope_load::loop_delay;
use tokenscope_load::openai::Api;
use tokenscope_load::probe::{self, ProbeError};
use tokenscope_load::recorder::Recorder;
use tokenscope_load::request::Target;
use tokenscope_load::runner::{Progress, Runner};
use tokenscope_load::runtime;
use tokenscope_sim::engine::catalogue::Catalogue;
use tokenscope_sim::engine::EngineConfig;
use tokenscope_sim::exact::{ExactConfig, ExactServer};
use tokenscope_sim::serve::{EngineServer, ServeOptions};
use tokenscope_telemetry::gpu::LocalGpu;
use tokenscope_telemetry::scraper::{Endpoint, ScrapeConfig, Scraper};
use tokenscope_workload::arrival::LoadPattern;
use tokio_util::sync::CancellationToken;

/// Client threads are named with this prefix so their CPU time can be told
/// apart from a built-in server's in the same process.
const CLIENT_THREADS: &str = "ts-";

/// The GPU the built-in engine models (Llama-3.1-8B on one H100 SXM).
const BUILTIN_GPU: &str = "h100-sxm";

/// The built-in engine knows its GPU: price it unless told otherwise.
pub(crate) fn price_builtin(args: &mut BenchArgs) {
    if args.url.is_none() && matches!(args.builtin, BuiltinChoice::Engine) {
        outcome::price_known_gpu(&mut args.output, BUILTIN_GPU, 1);
    }
}

pub fn run(mut args: BenchArgs) -> anyhow::Result<Exit> {
    price_builtin(&mut args);
    if args.load.concurrency.len() > 1 || args.load.rate.len() > 1 {
        return Err(Exit::usage(
            "--concurrency and --rate take one value in bench; `tokenscope sweep` runs a series"
                .into(),
        ));
    }
    if let Some(slo) = args.output.slo.as_ref().filter(|_| args.no_stream) {
        use tokenscope_core::slo::SloMetric;
        if let Some(o) = slo.objectives.iter().find(|o| o.metric != SloMetric::E2e) {
            return Err(Exit::usage(format!(
                "--slo {}_{}: --no-stream answers come whole, so only e2e can be judged",
                o.metric.name(),
                o.stat
            )));
        }
    }
    outcome::load_workload_files(&mut args.load, args.output.quiet || args.output.json)?;
    take_shard(&mut args)?;
    let planned = outcome::plan(&args.load).requests;
    if let (Some(slo), Some(n), false) = (&args.output.slo, planned, args.output.quiet) {
        if let Some(warning) = slo.sample_warning(n) {
            eprintln!("tokenscope: warning: {warning}");
        }
    }
    let setup = args.clone();
    with_runtime(&setup, |url, builtin, threads| async move {
        let (results, dir) = bench(args.clone(), url, builtin, threads).await?;
        outcome::print(&results, &args.output, &dir)?;
        let history = &args.output.history;
        crate::history::record_run(Kind::Bench, &results, &dir, history, args.output.json);
        Ok(outcome::exit_code(&results))
    })
}

/// Starts the built-in server when there is no `--url`, builds the client
/// runtime, and runs `body` on it with the target URL.
pub(crate) fn with_runtime<F, Fut>(args: &BenchArgs, body: F) -> anyhow::Result<Exit>
where
    F: FnOnce(String, Option<String>, usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Exit>>,
{
    let threads = client_threads(args.client_threads);
    // The built-in server gets a runtime of its own (threads `srv-…`).
    let builtin = match &args.url {
        Some(_) => None,
        None => Some(Builtin::start(args.builtin)?),
    };
    let url = args
        .url
        .clone()
        .or_else(|| builtin.as_ref().map(|b| b.url.clone()))
        .unwrap_or_default();
    // Kernel stamping on before the first connection, held for the run.
    let stamps = runtime::kernel_stamps(&url);
    let _stamping = stamps
        .then(|| tokenscope_load::rx_stamp::wait_until_on(STAMPING_WAIT))
        .flatten();
    let rt = runtime::client(threads, args.wake_batch.resolve(stamps))?;
    let result = rt.block_on(body(
        url,
        builtin.as_ref().map(|b| b.description.clone()),
        threads,
    ));
    rt.shutdown_timeout(Duration::from_secs(1));
    if let Some(b) = builtin {
        b.rt.shutdown_background();
    }
    result
}

/// The most a run waits for the kernel to switch read stamping on (a few
/// ms when it was off; at once when it is on).
pub(crate) const STAMPING_WAIT: Duration = Duration::from_millis(500);

/// How long an idle client thread gathers wake-ups against `url` (`--wake-batch`).
pub(crate) fn wake_batch(args: &BenchArgs, url: &str) -> Duration {
    args.wake_batch.resolve(runtime::kernel_stamps(url))
}

/// Client worker threads: as asked, else one per core.
pub(crate) fn client_threads(asked: Option<u64>) -> usize {
    asked
        .map(|n| n as usize)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
}

/// The exact server started when no `--url` is given.
struct Builtin {
    rt: tokio::runtime::Runtime,
    url: String,
    description: String,
}

impl Builtin {
    fn start(choice: BuiltinChoice) -> anyhow::Result<Builtin> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .thread_name("srv-builtin")
            .enable_all()
            .build()?;
        let addr: std::net::SocketAddr = ([127, 0, 0, 1], 0).into();
        let (url, description) = match choice {
            BuiltinChoice::Exact => {
                let config = ExactConfig::default();
                let server = rt
                    .block_on(ExactServer::start(addr, config.clone()))
                    .context("starting the built-in server on 127.0.0.1")?;
                let url = server.url();
                std::mem::forget(server); // lives as long as its runtime
                let description = format!(
                    "built-in exact server: TTFT {} ms, ITL {} ms, {} token/chunk",
                    config.ttft.as_millis(),
                    config.itl.as_millis(),
                    config.tokens_per_chunk
                );
                (url, description)
            }
            BuiltinChoice::Engine => {
                let cat = Catalogue::builtin();
                let config = EngineConfig::new(
                    cat.model("llama-3.1-8b").expect("in the catalogue"),
                    cat.gpu(BUILTIN_GPU).expect("in the catalogue"),
                );
                let description = format!("built-in simulated engine: {}", config.describe());
                let options = ServeOptions::for_config(&config);
                let server = rt
                    .block_on(EngineServer::start(addr, config, options))
                    .map_err(anyhow::Error::msg)
                    .context("starting the built-in server on 127.0.0.1")?;
                let url = server.url();
                std::mem::forget(server); // lives as long as its runtime
                (url, description)
            }
        };
        Ok(Builtin {
            rt,
            url,
            description,
        })
    }
}

/// `http://host:port[/v1][/]` → `http://host:port`; a full endpoint URL
/// (`…/v1/chat/completions`, `…/v1/completions`) is accepted and names its
/// API. A URL without a scheme is refused with the fix.
fn base_url(url: &str) -> anyhow::Result<(String, Option<ApiChoice>)> {
    if !url.contains("://") {
        return Err(Exit::usage(format!(
            "--url `{url}` has no scheme: add http:// (--url http://{url})"
        )));
    }
    let parsed =
        reqwest::Url::parse(url).map_err(|e| Exit::usage(format!("--url `{url}`: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(Exit::usage(format!(
            "--url `{url}`: only http and https are supported"
        )));
    }
    let trimmed = url.trim_end_matches('/');
    for (endpoint, api) in [
        ("/v1/chat/completions", ApiChoice::OpenaiChat),
        ("/v1/completions", ApiChoice::OpenaiCompletions),
    ] {
        if let Some(base) = trimmed.strip_suffix(endpoint) {
            return Ok((base.to_string(), Some(api)));
        }
    }
    Ok((
        trimmed.strip_suffix("/v1").unwrap_or(trimmed).to_string(),
        None,
    ))
}

fn request_headers(args: &BenchArgs) -> anyhow::Result<HeaderMap> {
    target_headers(args.api_key_env.as_deref(), &args.headers)
}

/// `scheme://host:port` of a URL, for the same-origin rule.
fn origin(url: &str) -> Option<String> {
    let u = reqwest::Url::parse(url).ok()?;
    Some(format!(
        "{}://{}:{}",
        u.scheme(),
        u.host_str()?,
        u.port_or_known_default()?
    ))
}

/// Each metrics URL with the headers it may get: the target's own (API key,
/// `--header`) only on the target's origin, `--metrics-header` everywhere.
/// Credentials never travel to an exporter on another host or port.
pub(crate) fn metrics_endpoints(
    target: &str,
    urls: &[String],
    target_headers: &HeaderMap,
    own: &[(String, String)],
) -> anyhow::Result<Vec<Endpoint>> {
    let own = header_map(own, "--metrics-header")?;
    let home = origin(target);
    urls.iter()
        .map(|url| {
            let Some(at) = origin(url) else {
                return Err(Exit::usage(format!(
                    "--metrics-url `{url}`: not an http(s) URL (e.g. http://gpu-node:9400/metrics)"
                )));
            };
            let mut headers = if Some(at) == home {
                target_headers.clone()
            } else {
                HeaderMap::new()
            };
            headers.extend(own.clone());
            Ok(Endpoint {
                url: url.clone(),
                headers,
            })
        })
        .collect()
}

/// `NAME: VALUE` pairs as sensitive headers; `flag` names them in errors.
fn header_map(pairs: &[(String, String)], flag: &str) -> anyhow::Result<HeaderMap> {
    let mut headers = HeaderMap::new();
    for (k, v) in pairs {
        let name = HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| Exit::usage(format!("{flag}: `{k}` is not a header name")))?;
        let mut value = HeaderValue::from_str(v)
            .map_err(|_| Exit::usage(format!("{flag} {k}: the value is not valid in a header")))?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    Ok(headers)
}

/// `--header`s and the API key (from `--api-key-env`, else OPENAI_API_KEY),
/// all marked sensitive so they never appear in debug output.
pub(crate) fn target_headers(
    api_key_env: Option<&str>,
    extra: &[(String, String)],
) -> anyhow::Result<HeaderMap> {
    let mut headers = header_map(extra, "--header")?;
    let key =
        match api_key_env {
            Some(var) => Some(std::env::var(var).map_err(|_| {
                Exit::usage(format!("--api-key-env: the variable {var} is not set"))
            })?),
            None => std::env::var("OPENAI_API_KEY")
                .ok()
                .filter(|k| !k.is_empty()),
        };
    if let Some(key) = key {
        let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
            Exit::usage("the API key contains characters not allowed in a header".into())
        })?;
        value.set_sensitive(true);
        headers.insert(AUTHORIZATION, value);
    }
    Ok(headers)
}

/// One run: probe, load, scrape, write the run directory. Returns the results
/// and the directory; printing is the caller's.
pub(crate) async fn bench(
    args: BenchArgs,
    url: String,
    builtin: Option<String>,
    threads: usize,
) -> anyhow::Result<(RunResults, PathBuf)> {
    let (base, endpoint_api) = base_url(&url)?;
    // Listening from the start: a Ctrl-C or SIGTERM during the probe or the
    // first metrics scrape still ends in a complete, partial run directory.
    let mut stop = crate::signals::Stop::listen().context("installing the signal handlers")?;
    let headers = request_headers(&args)?;
    outcome::check_output(&args.output)?;
    let self_check = match args.self_check {
        false => None,
        true => Some(run_self_check(&args, threads).await?),
    };
    let out_dir = args
        .output
        .out
        .clone()
        .unwrap_or_else(outcome::default_out_dir);
    outcome::claim_out_dir(&out_dir, args.output.force)?;
    let mut cold = match &args.cold_start {
        None => None,
        Some(command) => {
            std::fs::create_dir_all(&out_dir)
                .with_context(|| format!("creating the run directory {}", out_dir.display()))?;
            let log = out_dir.join("server.log");
            let started = cold_start::start(command, &base, &log, args.ready_timeout).await?;
            if !args.output.quiet {
                eprintln!(
                    "tokenscope: `{}` answered /health after {:.2} s; the load starts now",
                    started.program,
                    started.ready_after.as_secs_f64()
                );
            }
            Some(started)
        }
    };
    let mut notes = Vec::new();
    let local_gpu = match args.gpu {
        GpuSource::None => None,
        GpuSource::Local => match LocalGpu::open() {
            Ok(g) => Some(Arc::new(g)),
            Err(why) => {
                notes.push(Finding {
                    rule: "gpu_unavailable".into(),
                    severity: "info".into(),
                    message: why,
                    evidence: Default::default(),
                });
                None
            }
        },
    };
    // The target's headers also go to a metrics URL on its own origin.
    let target_headers = headers.clone();
    let plan = outcome::plan(&args.load);
    let file_limit = FileLimit::raise();
    if let (Some(limit), Some(n)) = (file_limit, plan.pattern.max_in_flight()) {
        let flag = match plan.pattern {
            LoadPattern::Closed { .. } => "--concurrency",
            LoadPattern::Open { .. } => "--max-concurrency",
        };
        if let Some(why) = limit.refuse(n as u64, flag) {
            return Err(Exit::usage(why));
        }
    }
    let streams = streams_ahead(&plan.pattern);
    let ca_pem = match &args.ca_cert {
        None => None,
        Some(path) => Some(
            std::fs::read(path)
                .map_err(|e| Exit::usage(format!("--ca-cert {}: {e}", path.display())))?,
        ),
    };
    let mut probes = reqwest::Client::builder();
    if let Some(pem) = &ca_pem {
        for cert in reqwest::Certificate::from_pem_bundle(pem)
            .map_err(|e| Exit::usage(format!("--ca-cert: {e}")))?
        {
            probes = probes.add_root_certificate(cert);
        }
    }
    let client = probes
        .http1_only()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(plan.pattern.max_in_flight().unwrap_or(1024).max(streams))
        .connect_timeout(Duration::from_secs(10))
        // A redirect is reported, not followed (a POST would become a GET).
        .redirect(reqwest::redirect::Policy::none())
        // Direct, as the measured requests go: a proxy's latency would be
        // measured as the server's.
        .no_proxy()
        .build()
        .context("building the HTTP client")?;

    let probe_err = |e: ProbeError| match e {
        ProbeError::Unreachable { .. } => {
            anyhow::Error::new(Exit::Unreachable).context(format!("{e}{}", proxy_note()))
        }
        ProbeError::Refused(_) => anyhow::Error::new(Exit::Unreachable).context(e.to_string()),
    };
    // The probes wait no longer than a request of the run would.
    let probe_timeout = args.timeout.min(args.idle_timeout);
    let model = match &args.model {
        Some(m) => m.clone(),
        None => probe::list_models(&client, &base, &headers, probe_timeout)
            .await
            .map_err(probe_err)?
            .into_iter()
            .next()
            .ok_or_else(|| {
                anyhow::Error::new(Exit::Unreachable)
                    .context(format!("{base}/v1/models lists no model; pass --model"))
            })?,
    };
    // A URL naming its endpoint chooses the API unless --api did.
    let choice = match (args.api, endpoint_api) {
        (ApiChoice::Auto, Some(api)) => api,
        (choice, _) => choice,
    };
    let api = match choice {
        ApiChoice::OpenaiChat => Api::Chat,
        ApiChoice::OpenaiCompletions => Api::Completions,
        // A probe would be a cold server's first generation.
        ApiChoice::Auto if cold.is_some() => Api::Chat,
        ApiChoice::Auto => match probe::detect_api(&client, &base, &headers, &model, probe_timeout)
            .await
        {
            Ok(api) => api,
            Err(ProbeError::Refused(why)) => {
                // The usual cause is a model the server does not serve: name those it does.
                let listed = probe::list_models(&client, &base, &headers, probe_timeout)
                    .await
                    .ok()
                    .filter(|m| !m.is_empty() && !m.contains(&model))
                    .map(|m| format!("; the server serves {} (pass one as --model)", m.join(", ")))
                    .unwrap_or_default();
                return Err(anyhow::Error::new(Exit::Unreachable).context(format!("{why}{listed}")));
            }
            Err(e) => return Err(probe_err(e)),
        },
    };

    std::fs::create_dir_all(&out_dir)
        .with_context(|| format!("creating the run directory {}", out_dir.display()))?;
    outcome::reserve_output(&out_dir)?;
    let cancel = CancellationToken::new();
    let interrupted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // A failed write stops the run: no request is sent that cannot be kept.
    let recorder = Recorder::create(
        &out_dir.join("requests.jsonl"),
        cancel.clone(),
        outcome::aggregator(&args.output),
    )?;
    let endpoint = reqwest::Url::parse(&format!("{base}{}", api.path())).context("endpoint URL")?;
    let models_url = reqwest::Url::parse(&format!("{base}/v1/models")).context("models URL")?;
    let http = http1::Client::new(
        &endpoint,
        &headers,
        Duration::from_secs(10),
        ca_pem.as_deref(),
    )
    .map_err(|why| Exit::usage(format!("--url `{base}`: {why}")))?;
    let target = Target {
        http: Arc::new(http),
        api,
        model: model.clone(),
        ignore_eos: args.ignore_eos,
        stream: !args.no_stream,
        shape: tokenscope_load::openai::Shape {
            system_prompt: args.system_prompt.clone(),
            temperature: args.temperature,
            extra: args.extra_body.clone().unwrap_or_default(),
        },
        timeout: args.timeout,
        idle_timeout: args.idle_timeout,
    };
    let started_at = outcome::now_rfc3339();
    let progress = Arc::new(Progress::default());
    let metrics_urls = match (args.no_metrics, args.metrics_urls.is_empty()) {
        (true, _) => Vec::new(),
        (false, true) => vec![format!("{base}/metrics")],
        (false, false) => args.metrics_urls.clone(),
    };
    // The baseline scrape comes before the clock starts: a slow metrics
    // endpoint never eats into the load's time or bunches its schedule.
    let mut scraper = if metrics_urls.is_empty() && local_gpu.is_none() {
        None
    } else {
        let config = ScrapeConfig {
            local_gpu: local_gpu.clone(),
            endpoints: metrics_endpoints(
                &base,
                &metrics_urls,
                &target_headers,
                &args.metrics_headers,
            )?,
            interval: args.scrape_interval,
        };
        let progress = progress.clone();
        let in_flight = Arc::new(move || {
            progress
                .sent
                .load(Ordering::Relaxed)
                .saturating_sub(progress.finished.load(Ordering::Relaxed))
        });
        Some(
            Scraper::start(config, &out_dir.join("timeseries.jsonl"), in_flight)
                .await
                .with_context(|| {
                    format!("creating {}", out_dir.join("timeseries.jsonl").display())
                })?,
        )
    };
    // A shared start instant: connections are opened just before it, as
    // servers close idle ones within seconds (vLLM's after 5 s).
    if let Some(at) = &args.shard.start_at {
        crate::shard::wait_until(at, crate::shard::CONNECT_AHEAD).await;
    }
    // One connection per stream, opened before the clock starts: a burst
    // is then N writes on open sockets, not N connects on the client's thread.
    let warmed = match args.cold_connections {
        true => None,
        false => Some(
            connections::warm(
                &target.http,
                models_url.path(),
                streams as u64,
                probe_timeout,
            )
            .await,
        ),
    };
    // Every shard starts its load at the same instant, connections already open.
    let late = match &args.shard.start_at {
        Some(at) => Some(crate::shard::wait_until(at, Duration::ZERO).await),
        None => None,
    };
    let clock = Clock::start();
    let origin_unix_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    if let Some(s) = &mut scraper {
        s.run_from(clock.origin());
    }
    let loop_probe = loop_delay::Probe::start(clock);
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

    let on_ctrl_c = {
        let (cancel, interrupted) = (cancel.clone(), interrupted.clone());
        tokio::spawn(async move {
            stop.recv().await;
            interrupted.store(true, Ordering::SeqCst);
            cancel.cancel();
        })
    };
    if !args.output.quiet {
        eprintln!(
            "tokenscope: {} · {} · model {model} · results in {}",
            base,
            api.name(),
            out_dir.display()
        );
    }
    // A terminal on stdout gets the dashboard; otherwise a progress line on
    // stderr; --quiet (and --json) neither.
    let total = plan.requests.map(|n| n + plan.warmup);
    let show = !args.output.quiet && !args.output.json;
    let dashboard = (show && std::io::stdout().is_terminal())
        .then(|| {
            let title = format!("tokenscope · {base} · {model} · {}", out_dir.display());
            let latest = scraper.as_ref().map(|s| s.latest());
            let mut source = LiveSource {
                progress: progress.clone(),
                clock,
                total,
                planned_s: plan.duration.map(|d| d.as_secs_f64()),
                latest,
                title,
                rate: crate::live::Rate::new(),
                slo: args.output.slo.clone(),
            };
            crate::live::Dashboard::start(move || source.view())
        })
        .flatten();
    let reporter = (show && dashboard.is_none())
        .then(|| tokio::spawn(report_progress(progress.clone(), clock, total)));

    runner.clone().run(&plan).await;
    let client_wall_s = clock.now_us() as f64 / 1e6;
    let loop_delay = loop_probe.finish().await;
    on_ctrl_c.abort();
    if let Some(d) = dashboard {
        d.stop();
    }
    if let Some(r) = reporter {
        r.abort();
        if std::io::stderr().is_terminal() {
            eprintln!();
        }
    }
    drop(runner);
    let telemetry = match scraper {
        Some(s) => Some(s.finish().await),
        None => None,
    };
    if progress.arrival_failed.load(Ordering::SeqCst) {
        notes.push(Finding {
            rule: "internal_error".into(),
            severity: "critical".into(),
            message: "the arrival schedule broke off (an internal error in tokenscope): fewer requests were sent than planned".into(),
            evidence: Default::default(),
        });
    }
    let recorded = recorder.finish();
    let mut figures = recorded.figures;
    let cold_start = match cold.as_mut() {
        None => None,
        Some(server) => {
            let stop_s = server.stop().as_secs_f64();
            Some(cold_start::waves(&out_dir, server, stop_s)?)
        }
    };
    let cpu = thread_cpu(CLIENT_THREADS);

    let config = run_config(&args, &args.load);
    let stamped = runtime::kernel_stamps(&base);
    let version = probe::server_version(&client, &base, &headers).await;
    let facts = RunFacts {
        started_at,
        partial: interrupted.load(Ordering::SeqCst),
        target: results::Target {
            url: base.clone(),
            api: api.name().into(),
            model,
            builtin,
        },
        config,
        server: Server {
            version,
            ..Server::default()
        },
        kv_cache: None,
        client_cpu: cpu.map(|(d, _)| (d.as_secs_f64(), threads, client_wall_s)),
        client: ClientUsage {
            self_check,
            peak_rss_mb: tokenscope_load::cpu::peak_rss_bytes().map(|b| b as f64 / 1e6),
            monotonic_origin_us: tokenscope_core::clock::monotonic_us(clock.origin()),
            kernel_read_stamps: Some(stamped),
            unstamped_reads: stamped.then(|| http.unstamped_reads()),
            wake_batch_us: Some(wake_batch(&args, &base).as_micros() as u64),
            ..client_side(&loop_delay, warmed.as_ref(), file_limit)
        },
        extra_findings: notes,
        simulated: None,
        telemetry: telemetry.as_ref().map(|log| {
            let last_sent = figures.spans().map(|(sent, _)| sent).max();
            outcome::Telemetry::from_log(log, last_sent.map(|us| us as f64 / 1e6))
        }),
    };
    let mut results = outcome::assemble(figures.finish(), facts);
    results.cold_start = cold_start;
    results.shard = args.shard.resolved.as_ref().map(|r| results::ShardInfo {
        index: r.shard.index,
        count: r.shard.count,
        start_at: args.shard.start_at.as_ref().map(|s| s.text.clone()),
        origin_unix_us,
        late_ms: late.map(|d| d.as_secs_f64() * 1e3),
        whole: r.whole.clone(),
        host: crate::shard::host(),
        clock: crate::shard::clock_sync(),
    });
    if let Some(e) = &recorded.error {
        let said = format!(
            "output failed: {e}; the run stopped there: the first {} of {} finished requests are whole lines of requests.jsonl, the rest were counted in memory",
            recorded.on_disk,
            recorded.total
        );
        results.output_error = Some(said.clone());
        eprintln!("tokenscope: error: {said}");
    }
    if let Err(e) = outcome::write_results(&out_dir, &results) {
        if results.output_error.is_none() {
            return Err(anyhow::Error::new(Exit::OutputFailed).context(format!("{e:#}")));
        }
        eprintln!("tokenscope: error: {e:#}: results.json is missing; the summary below is all there is of the figures");
    }
    let quiet = args.output.quiet || args.output.json;
    crate::report::write_html_of(&out_dir, results.clone(), figures, quiet);
    Ok((results, out_dir))
}

/// Said when the server cannot be reached and a proxy is configured:
/// tokenscope connects directly (a proxy would be measured as the server).
fn proxy_note() -> String {
    ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"]
        .iter()
        .find(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()))
        .map(|v| format!(" ({v} is set, but tokenscope connects directly: a proxy's latency would be measured as the server's; run it where the server is reachable)"))
        .unwrap_or_default()
}

/// The settings a run records: its load (this shard's part, for a shard)
/// and how it asked.
fn run_config(args: &BenchArgs, load: &crate::cli::LoadArgs) -> serde_json::Value {
    outcome::merge(
        outcome::config_json(load, &outcome::plan(load), &args.output),
        json!({
            "ignore_eos": args.ignore_eos,
            "stream": !args.no_stream,
            "system_prompt": args.system_prompt,
            "temperature": args.temperature,
            "extra_body_keys": args.extra_body.as_ref().map(|m| m.keys().cloned().collect::<Vec<_>>()),
            "headers": args.headers.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
            "api_key_env": args.api_key_env,
            "timeout_s": args.timeout.as_secs_f64(),
            "idle_timeout_s": args.idle_timeout.as_secs_f64(),
        }),
    )
}

/// `--shard`/`--shards`: this process's part of the whole load. The whole
/// run's settings are kept for the merge; shards past 0 leave the server's
/// metrics and the GPUs to shard 0, so the server is not scraped N times.
pub(crate) fn take_shard(args: &mut BenchArgs) -> anyhow::Result<()> {
    let Some(shard) = args.shard.resolve().map_err(Exit::usage)? else {
        return Ok(());
    };
    let whole = run_config(args, &args.load);
    let poisson = matches!(
        args.load.arrival,
        tokenscope_workload::arrival::Process::Poisson
    );
    if !args.load.rate.is_empty() && !poisson && !args.output.quiet {
        eprintln!(
            "tokenscope: warning: --arrival {} split over {} shards is not that process at the whole rate (only Poisson processes superpose to one): constant shards started together send in step",
            args.load.arrival, shard.count
        );
    }
    shard.apply(&mut args.load).map_err(Exit::usage)?;
    if shard.index > 0 {
        args.no_metrics = true;
        args.metrics_urls.clear();
        args.gpu = GpuSource::None;
    }
    args.shard.resolved = Some(crate::shard::Resolved { shard, whole });
    Ok(())
}

/// `--self-check`: the error floor at this run's concurrency, measured first.
async fn run_self_check(args: &BenchArgs, threads: usize) -> anyhow::Result<results::SelfCheck> {
    let streams = streams_ahead(&outcome::plan(&args.load).pattern) as u64;
    let load = crate::selftest::Load::for_bench(streams, Some(threads as u64));
    if !args.output.quiet {
        eprintln!("tokenscope: self-check at {streams} streams against the built-in exact server…");
    }
    let check = Box::pin(crate::selftest::measure(load)).await?;
    if !args.output.quiet {
        eprintln!("tokenscope: self-check: {}", check.sentence());
    }
    Ok(check)
}

/// Connections to open before the load: one per stream a closed loop (or a
/// capped open loop) can have in flight; an uncapped open loop gets one per
/// request its first second sends, at most 1,024 (more are opened as needed).
fn streams_ahead(pattern: &LoadPattern) -> usize {
    match *pattern {
        LoadPattern::Open {
            rate,
            max_concurrency: None,
            ..
        } => (rate.ceil() as usize).clamp(1, 1024),
        _ => pattern.max_in_flight().unwrap_or(1),
    }
}

/// The client's own measurements besides its CPU: loop delay, connections
/// opened ahead, the open-file limit.
fn client_side(
    delay: &loop_delay::LoopDelay,
    warmed: Option<&connections::Warmed>,
    limit: Option<FileLimit>,
) -> ClientUsage {
    const MS: f64 = 1e-3;
    ClientUsage {
        loop_delay_ms: delay.all_us.summary(MS),
        loop_delay_per_s: delay
            .per_second
            .iter()
            .map(|&(s, us)| (s, us as f64 * MS))
            .collect(),
        connections: warmed.map(|w| results::Connections {
            opened: w.opened,
            failed: w.failed,
            connect_ms: w.connect_us.summary(MS),
            took_ms: w.took.as_secs_f64() * 1e3,
        }),
        open_file_limit: limit.map(|l| l.soft),
        ..ClientUsage::default()
    }
}

/// What the dashboard reads during a run.
struct LiveSource {
    progress: Arc<Progress>,
    clock: Clock,
    total: Option<u64>,
    planned_s: Option<f64>,
    latest: Option<tokenscope_telemetry::scraper::Latest>,
    title: String,
    rate: crate::live::Rate,
    slo: Option<tokenscope_core::slo::Slo>,
}

impl LiveSource {
    fn view(&mut self) -> tokenscope_report::dashboard::View {
        use tokenscope_report::dashboard::{ServerView, View};
        let p = &self.progress;
        let (sent, done, failed, tokens) = (
            p.sent.load(Ordering::Relaxed),
            p.finished.load(Ordering::Relaxed),
            p.failed.load(Ordering::Relaxed),
            p.live_output_tokens(),
        );
        let elapsed_s = self.clock.now_us() as f64 / 1e6;
        self.rate.feed(elapsed_s, tokens);
        let ms = |h: &hdrhistogram::Histogram<u64>, q: f64| {
            (!h.is_empty()).then(|| h.value_at_quantile(q) as f64 / 1e3)
        };
        let (latency, errors, slo) = match p.live.lock() {
            Ok(live) => (
                vec![
                    (
                        "TTFT".to_string(),
                        ms(&live.ttft_us, 0.5),
                        ms(&live.ttft_us, 0.99),
                    ),
                    (
                        "TPOT".to_string(),
                        ms(&live.tpot_us, 0.5),
                        ms(&live.tpot_us, 0.99),
                    ),
                ],
                live.errors.iter().map(|(k, v)| (k.clone(), *v)).collect(),
                self.slo
                    .as_ref()
                    .map_or(Vec::new(), |s| live_slo(s, &live.ttft_us, &live.tpot_us)),
            ),
            Err(_) => (Vec::new(), Vec::new(), Vec::new()),
        };
        let sample = self
            .latest
            .as_ref()
            .and_then(|l| l.lock().ok().and_then(|s| s.clone()));
        let server = match (&self.latest, sample) {
            (None, _) => ServerView {
                missing: Some("not sampled (--no-metrics)".into()),
                ..Default::default()
            },
            (Some(_), None) => ServerView {
                missing: Some("no sample yet".into()),
                ..Default::default()
            },
            (Some(_), Some(s)) => ServerView {
                kind: None,
                running: s.running,
                waiting: s.waiting,
                kv_usage: s.kv_usage,
                preemptions: s.preemptions_total,
                queue_time_ms: s.queue_time_mean_ms,
                gpu_util_pct: s.gpu_util_time_pct,
                gpu_power_w: s.gpu_power_w,
                missing: s.error.clone(),
            },
        };
        View {
            title: self.title.clone(),
            progress: self.total.map(|t| (done, t)),
            elapsed_s,
            planned_s: self.planned_s,
            latency,
            tokens_per_s: self.rate.history.clone(),
            requests_per_s: (elapsed_s > 0.0).then(|| done as f64 / elapsed_s),
            done,
            failed,
            in_flight: Some(sent.saturating_sub(done)),
            errors,
            server,
            findings: Vec::new(),
            slo,
            footer: "Ctrl-C stops the run: requests in flight are recorded as cancelled".into(),
        }
    }
}

/// `--slo` while the run goes: each TTFT/TPOT objective's figure so far, red
/// once past its limit, amber while too few requests can judge it.
fn live_slo(
    slo: &tokenscope_core::slo::Slo,
    ttft_us: &hdrhistogram::Histogram<u64>,
    tpot_us: &hdrhistogram::Histogram<u64>,
) -> Vec<(String, String, tokenscope_report::health::Health)> {
    use tokenscope_core::slo::{quantile_of, SloMetric};
    use tokenscope_report::health::Health;
    slo.objectives
        .iter()
        .filter_map(|o| {
            let h = match o.metric {
                SloMetric::Ttft => ttft_us,
                SloMetric::Tpot => tpot_us,
                _ => return None,
            };
            let label = format!("{}≤{}ms", o.key(), o.limit_ms);
            if h.is_empty() {
                return Some((label, "—".into(), Health::Unknown));
            }
            let us = match (quantile_of(&o.stat), o.stat.as_str()) {
                (Some(q), _) => h.value_at_quantile(q) as f64,
                (None, "mean") => h.mean(),
                _ => h.max() as f64,
            };
            let (ms, n, needed) = (us / 1e3, h.len(), o.samples_needed());
            let (word, health) = if ms > o.limit_ms {
                ("over".to_string(), Health::Bad)
            } else if n < needed {
                (format!("n={n}/{needed}"), Health::Warn)
            } else {
                ("ok".to_string(), Health::Good)
            };
            Some((label, format!("{ms:.0} ms {word}"), health))
        })
        .collect()
}

/// A progress line on stderr: redrawn in place on a terminal, every 10 s otherwise.
async fn report_progress(p: Arc<Progress>, clock: Clock, total: Option<u64>) {
    let tty = std::io::stderr().is_terminal();
    let period = if tty {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(10)
    };
    let mut last_tokens = 0;
    loop {
        tokio::time::sleep(period).await;
        let (sent, done, failed, tokens) = (
            p.sent.load(Ordering::Relaxed),
            p.finished.load(Ordering::Relaxed),
            p.failed.load(Ordering::Relaxed),
            p.live_output_tokens(),
        );
        let rate = (tokens - last_tokens) as f64 / period.as_secs_f64();
        last_tokens = tokens;
        let of = total.map(|t| format!("/{t}")).unwrap_or_default();
        let line = format!(
            "[{:>6.1}s] {done}{of} done · {failed} failed · {} in flight · {rate:.0} tok/s",
            clock.now_us() as f64 / 1e6,
            sent - done
        );
        if tty {
            eprint!("\r\x1b[2K{line}");
        } else {
            eprintln!("{line}");
        }
    }
}
