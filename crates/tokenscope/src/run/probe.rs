//! Phase 1 of a run: everything checked before a request is sent — the
//! target's URL and credentials, the price, the run directory, a server
//! started cold, the GPUs, the open-file limit, TLS, and the model and API
//! the server serves. A problem here is a usage error or an unreachable
//! server, and the run directory is left as it was.

use super::cold_start::{self, Started};
use super::target::{base_url, proxy_note, target_headers};
use super::Site;
use crate::cli::GpuSource;
use crate::exit::Exit;
use crate::spec::RunSpec;
use anyhow::Context;
use reqwest::header::HeaderMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokenscope_core::results::{Finding, SelfCheck};
use tokenscope_load::connections::FileLimit;
use tokenscope_load::probe::{self, ProbeError};
use tokenscope_load::protocol::{self, Protocol};
use tokenscope_telemetry::gpu::LocalGpu;
use tokenscope_workload::arrival::LoadPattern;

/// What the probe found and opened.
pub struct Probed {
    /// `scheme://host:port` the endpoints hang off.
    pub base: String,
    /// The target's headers: `--header`s and the API key.
    pub headers: HeaderMap,
    pub out_dir: PathBuf,
    pub self_check: Option<SelfCheck>,
    /// The server `--cold-start` started, ready.
    pub cold: Option<Started>,
    /// Findings about the set-up (no GPU could be read, …).
    pub notes: Vec<Finding>,
    pub local_gpu: Option<Arc<LocalGpu>>,
    pub file_limit: Option<FileLimit>,
    /// Connections to open ahead of the load.
    pub streams: usize,
    pub ca_pem: Option<Vec<u8>>,
    /// The probes' client, kept to ask the server's version at the end.
    pub client: reqwest::Client,
    pub model: String,
    pub api: &'static dyn Protocol,
    /// The probes' and the warm-up connections' time limit.
    pub probe_timeout: Duration,
}

/// What can be checked without the network: the URL, the credentials'
/// headers and the price. Returns the base URL, the API a full endpoint URL
/// names, and the headers.
pub fn validate(
    spec: &RunSpec,
    site: &Site,
) -> anyhow::Result<(String, Option<&'static dyn Protocol>, HeaderMap)> {
    let (base, endpoint_api) = base_url(&site.url)?;
    let headers = target_headers(spec.request.api_key_env.as_deref(), &spec.request.headers)?;
    crate::spec::pricing::check_output(&spec.output)?;
    Ok((base, endpoint_api, headers))
}

/// The probe, `self_check` being the error floor measured before it.
pub async fn probe(
    spec: &RunSpec,
    site: &Site,
    self_check: Option<SelfCheck>,
) -> anyhow::Result<Probed> {
    let (base, endpoint_api, headers) = validate(spec, site)?;
    let out_dir = spec
        .output
        .out
        .clone()
        .unwrap_or_else(crate::run_dir::default_out_dir);
    crate::run_dir::claim_out_dir(&out_dir, spec.output.force)?;
    let cold = start_cold(spec, &base, &out_dir).await?;
    let mut notes = Vec::new();
    let local_gpu = open_gpu(spec.metrics.gpu, &mut notes);
    let file_limit = check_file_limit(&spec.plan.pattern)?;
    let streams = streams_ahead(&spec.plan.pattern);
    let ca_pem = match &spec.request.ca_cert {
        None => None,
        Some(path) => Some(
            std::fs::read(path)
                .map_err(|e| Exit::usage(format!("--ca-cert {}: {e}", path.display())))?,
        ),
    };
    let client = probe_client(ca_pem.as_deref(), &spec.plan.pattern, streams)?;
    // The probes wait no longer than a request of the run would.
    let probe_timeout = spec.request.timeout.min(spec.request.idle_timeout);
    let ask = Ask {
        client: &client,
        base: &base,
        headers: &headers,
        timeout: probe_timeout,
    };
    let model = match &spec.target.model {
        Some(m) => m.clone(),
        None => ask.first_model().await?,
    };
    let api = match (spec.target.api.protocol(), endpoint_api) {
        (Some(api), _) => api,
        // A URL naming its endpoint chooses the API unless --api did.
        (None, Some(api)) => api,
        // A probe would be a cold server's first generation.
        (None, None) if cold.is_some() => &protocol::openai_chat::OpenaiChat,
        (None, None) => ask.api(&model).await?,
    };
    Ok(Probed {
        base,
        headers: api.headers(headers),
        out_dir,
        self_check,
        cold,
        notes,
        local_gpu,
        file_limit,
        streams,
        ca_pem,
        client,
        model,
        api,
        probe_timeout,
    })
}

/// `--cold-start`: the server started and timed to its first `/health`.
async fn start_cold(
    spec: &RunSpec,
    base: &str,
    out_dir: &PathBuf,
) -> anyhow::Result<Option<Started>> {
    let Some(command) = &spec.client.cold_start else {
        return Ok(None);
    };
    std::fs::create_dir_all(out_dir)
        .with_context(|| format!("creating the run directory {}", out_dir.display()))?;
    let log = out_dir.join("server.log");
    let started = cold_start::start(
        "--cold-start",
        command,
        base,
        &log,
        spec.client.ready_timeout,
    )
    .await?;
    if !spec.output.quiet {
        eprintln!(
            "tokenscope: `{}` answered /health after {:.2} s; the load starts now",
            started.program,
            started.ready_after.as_secs_f64()
        );
    }
    Ok(Some(started))
}

/// `--gpu local`: this machine's GPUs through NVML; when they cannot be
/// read, a finding says why and the run goes on without them.
fn open_gpu(source: GpuSource, notes: &mut Vec<Finding>) -> Option<Arc<LocalGpu>> {
    match source {
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
    }
}

/// The open-file limit raised as far as it goes; a load that needs more
/// sockets than it allows is refused, naming the flag to lower.
fn check_file_limit(pattern: &LoadPattern) -> anyhow::Result<Option<FileLimit>> {
    let file_limit = FileLimit::raise();
    if let (Some(limit), Some(n)) = (file_limit, pattern.max_in_flight()) {
        let flag = match pattern {
            LoadPattern::Closed { .. } => "--concurrency",
            LoadPattern::Open { .. } => "--max-concurrency",
        };
        if let Some(why) = limit.refuse(n as u64, flag) {
            return Err(Exit::usage(why));
        }
    }
    Ok(file_limit)
}

/// Connections to open before the load: one per stream a closed loop (or a
/// capped open loop) can have in flight; an uncapped open loop gets one per
/// request its first second sends, at most 1,024 (more are opened as needed).
pub fn streams_ahead(pattern: &LoadPattern) -> usize {
    match *pattern {
        LoadPattern::Open {
            rate,
            max_concurrency: None,
            ..
        } => (rate.ceil() as usize).clamp(1, 1024),
        _ => pattern.max_in_flight().unwrap_or(1),
    }
}

/// The HTTP client of the probes (`/v1/models`, the API probe, the server's
/// version): direct, HTTP/1, trusting `--ca-cert`.
fn probe_client(
    ca_pem: Option<&[u8]>,
    pattern: &LoadPattern,
    streams: usize,
) -> anyhow::Result<reqwest::Client> {
    let mut probes = reqwest::Client::builder();
    if let Some(pem) = ca_pem {
        for cert in reqwest::Certificate::from_pem_bundle(pem)
            .map_err(|e| Exit::usage(format!("--ca-cert: {e}")))?
        {
            probes = probes.add_root_certificate(cert);
        }
    }
    probes
        .http1_only()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(pattern.max_in_flight().unwrap_or(1024).max(streams))
        .connect_timeout(Duration::from_secs(10))
        // A redirect is reported, not followed (a POST would become a GET).
        .redirect(reqwest::redirect::Policy::none())
        // Direct, as the measured requests go: a proxy's latency would be
        // measured as the server's.
        .no_proxy()
        .build()
        .context("building the HTTP client")
}

/// The probes' questions to the server.
struct Ask<'a> {
    client: &'a reqwest::Client,
    base: &'a str,
    headers: &'a HeaderMap,
    timeout: Duration,
}

impl Ask<'_> {
    /// The first model `/v1/models` lists.
    async fn first_model(&self) -> anyhow::Result<String> {
        probe::list_models(self.client, self.base, self.headers, self.timeout)
            .await
            .map_err(probe_err)?
            .into_iter()
            .next()
            .ok_or_else(|| {
                anyhow::Error::new(Exit::Unreachable).context(format!(
                    "{}/v1/models lists no model; pass --model",
                    self.base
                ))
            })
    }

    /// `--api auto`: the API the server answers for `model`.
    async fn api(&self, model: &str) -> anyhow::Result<&'static dyn Protocol> {
        match probe::detect_api(self.client, self.base, self.headers, model, self.timeout).await {
            Ok(api) => Ok(api),
            Err(ProbeError::Refused(why)) => {
                // The usual cause is a model the server does not serve: name those it does.
                let listed = probe::list_models(self.client, self.base, self.headers, self.timeout)
                    .await
                    .ok()
                    .filter(|m| !m.is_empty() && !m.iter().any(|x| x == model))
                    .map(|m| format!("; the server serves {} (pass one as --model)", m.join(", ")))
                    .unwrap_or_default();
                Err(anyhow::Error::new(Exit::Unreachable).context(format!("{why}{listed}")))
            }
            Err(e) => Err(probe_err(e)),
        }
    }
}

/// A probe's failure as the run's error: the server could not be reached
/// (with a note when a proxy is configured), or it refused.
fn probe_err(e: ProbeError) -> anyhow::Error {
    match e {
        ProbeError::Unreachable { .. } => {
            anyhow::Error::new(Exit::Unreachable).context(format!("{e}{}", proxy_note()))
        }
        ProbeError::Refused(_) => anyhow::Error::new(Exit::Unreachable).context(e.to_string()),
    }
}
