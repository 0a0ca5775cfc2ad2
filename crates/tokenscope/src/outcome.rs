//! What `bench` and `sim plan` share: turning load flags into a plan, the
//! records into `results.json`, and the results into output and an exit code.

use crate::cli::{LoadArgs, OutputArgs};
use crate::exit::Exit;
use anyhow::Context;
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;
use tokenscope_core::cost::GpuPrice;
use tokenscope_core::diagnosis::{diagnose, Asked};
use tokenscope_core::metrics::{Aggregator, Measured};
use tokenscope_core::record::ErrorKind;
use tokenscope_core::results::{self, ClientUsage, Efficiency, Finding, RunResults, Server, Tool};
use tokenscope_core::slo::Verdict;
use tokenscope_load::runner::RunPlan;
use tokenscope_telemetry::scraper::ScrapeLog;
use tokenscope_telemetry::window::{summarize, ServerSummary};
use tokenscope_workload::arrival::{LoadPattern, Process};
use tokenscope_workload::workload::Workload;

pub fn pattern(load: &LoadArgs) -> LoadPattern {
    if let Some(d) = load.dataset_loaded.as_ref().filter(|_| load.replay) {
        // The rate the replay averages, for the summary and the plans.
        let span = d.offsets_s().and_then(|o| o.last().copied()).unwrap_or(0.0);
        let rate = (d.len() as f64 / (span / load.replay_speed)).clamp(1.0 / 3600.0, 1e6);
        return LoadPattern::Open {
            rate: if span > 0.0 { rate } else { 1e6 },
            process: Process::Replay {
                speed: load.replay_speed,
            },
            max_concurrency: load.max_concurrency.map(|n| n as usize),
        };
    }
    match load.rate.first().copied() {
        Some(rate) => LoadPattern::Open {
            rate,
            process: load.arrival,
            max_concurrency: load.max_concurrency.map(|n| n as usize),
        },
        None => LoadPattern::Closed {
            concurrency: load.concurrency.first().copied().unwrap_or(10) as usize,
        },
    }
}

/// The plan the flags describe (100 requests when neither a count nor a duration is given).
pub fn plan(load: &LoadArgs) -> RunPlan {
    RunPlan {
        pattern: pattern(load),
        requests: match (load.requests, load.duration, sessions(load)) {
            // A dataset's sessions alone: each once, whatever their turns.
            (None, None, Some(_)) => None,
            // A dataset alone: every entry once.
            (None, None, None) => {
                Some(load.dataset_loaded.as_ref().map_or(100, |d| d.len() as u64))
            }
            (n, _, _) => n,
        },
        sessions: sessions(load),
        duration: load.duration,
        warmup: load.warmup,
        ramp_up: load.ramp_up,
        workload: Workload {
            input: load.input_tokens,
            output: Some(load.output_tokens),
            seed: load.seed,
            shared_prefix: load.shared_prefix,
            dataset: load.dataset_loaded.clone(),
            prefix_groups: load.prefix_groups,
            prefix_zipf: load.prefix_zipf,
            multi_turn: load
                .multi_turn
                .then_some(tokenscope_workload::session::MultiTurn {
                    turns: load.turns,
                    think_time: load.think_time,
                }),
        },
        seed: load.seed,
    }
}

/// Multi-turn over a dataset: its sessions, each once (unless --requests or
/// --duration bound the run instead).
fn sessions(load: &LoadArgs) -> Option<u64> {
    let d = load.dataset_loaded.as_ref().filter(|_| load.multi_turn)?;
    (load.requests.is_none() && load.duration.is_none()).then_some(d.sessions.len() as u64)
}

/// Reads the workload's files once, before any load: `--tokenizer` first
/// (a dataset's prompts are counted with it), then `--dataset`.
pub fn load_workload_files(load: &mut LoadArgs, quiet: bool) -> anyhow::Result<()> {
    load_tokenizer(load, quiet)?;
    load_dataset(load, quiet)
}

/// `--tokenizer FILE`: the model's tokenizer counts tokens and gives the
/// synthetic prompts their words; a sample of prompts is counted with it
/// at once, so the summary can say whether their lengths are exact.
fn load_tokenizer(load: &mut LoadArgs, quiet: bool) -> anyhow::Result<()> {
    use tokenscope_workload::tokenizer::{self, ModelTokenizer};
    let Some(path) = &load.tokenizer else {
        return Ok(());
    };
    let model = match tokenizer::model() {
        Some(m) => m, // a sweep's points share the one loaded
        None => tokenizer::use_model(ModelTokenizer::load(path).map_err(Exit::usage)?)
            .map_err(Exit::usage)?,
    };
    let sample = Workload::new(load.input_tokens, None, load.seed);
    let (mut asked, mut counted) = (0u64, 0u64);
    for id in 0..SAMPLE_PROMPTS {
        let p = sample.request(id);
        asked += p.input_tokens;
        counted += model.count(&p.prompt).unwrap_or(0);
    }
    let exact = asked == counted;
    load.tokenizer_check = Some(json!({
        "path": path.display().to_string(),
        "words": model.words.len(),
        "sample_prompts": SAMPLE_PROMPTS,
        "asked_tokens": asked,
        "counted_tokens": counted,
        "exact": exact,
    }));
    if !quiet {
        let verdict = match exact {
            true => "synthetic prompts are exact in it".to_string(),
            false => format!(
                "synthetic prompts are NOT exact in it: {SAMPLE_PROMPTS} sample prompts of {asked} tokens count {counted}"
            ),
        };
        eprintln!(
            "tokenscope: tokenizer {}: {} one-token words; {verdict}",
            path.display(),
            model.words.len()
        );
    }
    Ok(())
}

/// Synthetic prompts counted with `--tokenizer` to check their lengths.
const SAMPLE_PROMPTS: u64 = 20;

/// Reads `--dataset` once, before any load; a bad file is a usage error
/// naming the line. Says how many entries it holds and what a
/// `--requests` past its end does.
pub fn load_dataset(load: &mut LoadArgs, quiet: bool) -> anyhow::Result<()> {
    use tokenscope_workload::dataset::{Dataset, Load};
    let Some(path) = &load.dataset else {
        return Ok(());
    };
    let format = match load.dataset_format.as_str() {
        "auto" => None,
        f => Some(
            f.parse()
                .map_err(|e: String| Exit::usage(format!("--dataset-format: {e}")))?,
        ),
    };
    let how = Load {
        format,
        sample: load.dataset_sample.map(|n| n as usize),
        seed: load.seed,
        max_input_tokens: load.max_input_tokens,
        max_output_tokens: load.max_output_tokens,
        replay: load.replay.then(|| {
            load.replay_window.map_or((0.0, f64::INFINITY), |(a, b)| {
                (a.as_secs_f64(), b.as_secs_f64())
            })
        }),
        multi_turn: load.multi_turn,
    };
    let d = Dataset::load(path, &how).map_err(|e| Exit::usage(e.to_string()))?;
    if !quiet {
        let skipped = match d.skipped {
            0 => String::new(),
            n => format!(" ({n} without a prompt left out)"),
        };
        let sessions = match d.sessions.len() {
            0 => String::new(),
            n => format!(" in {n} sessions"),
        };
        eprintln!(
            "tokenscope: dataset {}: {} entries{sessions}, {} format{skipped}",
            path.display(),
            d.len(),
            d.format.name()
        );
        if let Some(n) = load.requests.filter(|&n| n > d.len() as u64) {
            eprintln!(
                "tokenscope: --requests {n} is more than the dataset's {} entries: it is sent {:.1} times over, in order",
                d.len(),
                n as f64 / d.len() as f64
            );
        }
    }
    load.dataset_loaded = Some(std::sync::Arc::new(d));
    Ok(())
}

/// The load and output settings as written into `config`.
pub fn config_json(load: &LoadArgs, plan: &RunPlan, output: &OutputArgs) -> serde_json::Value {
    let mode = match plan.pattern {
        LoadPattern::Closed { concurrency } => {
            json!({"mode": "closed", "concurrency": concurrency})
        }
        LoadPattern::Open {
            rate,
            process,
            max_concurrency,
        } => json!({
            "mode": "open", "rate": rate, "arrival": process.to_string(),
            "max_concurrency": max_concurrency,
        }),
    };
    json!({
        "load": mode,
        "requests": plan.requests,
        "duration_s": plan.duration.map(|d| d.as_secs_f64()),
        "warmup": plan.warmup,
        "ramp_up_s": plan.ramp_up.map(|d| d.as_secs_f64()),
        "input_tokens": load.input_tokens.to_string(),
        "output_tokens": load.output_tokens.to_string(),
        "shared_prefix": load.shared_prefix,
        "tokenizer": load.tokenizer_check.clone().unwrap_or_else(|| json!({"name": tokenscope_workload::tokenizer::name()})),
        "prefix_groups": (load.prefix_groups > 1).then(|| json!({"groups": load.prefix_groups, "zipf": load.prefix_zipf})),
        "multi_turn": load.multi_turn.then(|| json!({
            "turns": load.dataset_loaded.as_ref().filter(|d| !d.sessions.is_empty())
                .map_or(load.turns.to_string(), |_| "from the dataset".into()),
            "think_time": load.think_time.to_string(),
            "sessions": plan.sessions,
        })),
        "dataset": load.dataset_loaded.as_ref().map(|d| json!({
            "path": d.path.display().to_string(),
            "format": d.format.name(),
            "entries": d.len(),
            "sample": load.dataset_sample,
            "max_input_tokens": load.max_input_tokens,
            "max_output_tokens": load.max_output_tokens,
            "replay_speed": load.replay.then_some(load.replay_speed),
            "replay_window_s": load.replay_window.map(|(a, b)| [a.as_secs_f64(), b.as_secs_f64()]),
        })),
        "seed": load.seed,
        "slo": output.slo,
        "gpu_price_usd_per_hour": output.gpu_price,
        "gpu_type": output.gpu_type,
        "gpus": output.gpus,
        "gpu_price_source": price_source(output),
    })
}

/// Adds `extra`'s fields to the object `base`.
pub fn merge(mut base: serde_json::Value, extra: serde_json::Value) -> serde_json::Value {
    if let (Some(b), serde_json::Value::Object(e)) = (base.as_object_mut(), extra) {
        b.extend(e);
    }
    base
}

/// `runs/<UTC time>`, with `-2`, `-3`… when a run of the same second has it.
pub fn default_out_dir() -> PathBuf {
    let stamp = humantime::format_rfc3339_seconds(SystemTime::now())
        .to_string()
        .replace(':', "-");
    let base = PathBuf::from("runs").join(&stamp);
    (1..)
        .map(|i| match i {
            1 => base.clone(),
            i => PathBuf::from("runs").join(format!("{stamp}-{i}")),
        })
        .find(|d| !d.exists())
        .expect("a free name")
}

/// What a run or sweep directory may hold; `--force` clears only these.
fn is_run_file(name: &str) -> bool {
    matches!(
        name,
        "results.json"
            | "results.json.tmp"
            | "requests.jsonl"
            | "timeseries.jsonl"
            | "report.html"
            | "sweep.json"
            | "sweep.csv"
            | "requests.csv"
            | "profile.json"
            | "config.toml"
            | ".results.reserve"
    ) || (name.starts_with("point-") && name[6..].chars().all(|c| c.is_ascii_digit()))
}

/// A run directory must be new or empty, so an earlier run is never
/// overwritten (a `compare` baseline) nor mixed with the new one (its
/// timeseries drawn beside new records). `--force` clears an earlier run
/// first — only a directory that holds nothing but a run's files.
pub fn claim_out_dir(dir: &Path, force: bool) -> anyhow::Result<()> {
    claim(dir, force)?;
    // Only a directory this run may write gets its config.toml.
    crate::scenario::claimed(dir);
    Ok(())
}

fn claim(dir: &Path, force: bool) -> anyhow::Result<()> {
    let entries: Vec<String> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) if dir.is_file() => {
            return Err(Exit::usage(format!(
                "--out {}: a file, not a directory ({e})",
                dir.display()
            )))
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    if entries.is_empty() {
        return Ok(());
    }
    let mut shown: Vec<&str> = entries.iter().map(String::as_str).collect();
    shown.sort_unstable();
    shown.truncate(4);
    if !force {
        return Err(Exit::usage(format!(
            "--out {} already holds a run ({}…): pass --force to replace it, or choose another --out",
            dir.display(),
            shown.join(", ")
        )));
    }
    let foreign: Vec<&String> = entries.iter().filter(|n| !is_run_file(n)).collect();
    if !foreign.is_empty() {
        return Err(Exit::usage(format!(
            "--out {} holds files that are not a tokenscope run ({}); --force clears only a run directory",
            dir.display(),
            foreign.iter().take(4).map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        )));
    }
    for name in &entries {
        let path = dir.join(name);
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.with_context(|| format!("--force: removing {}", path.display()))?;
    }
    Ok(())
}

pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// Everything about a run besides its records.
pub struct RunFacts {
    pub started_at: String,
    pub partial: bool,
    pub target: results::Target,
    pub config: serde_json::Value,
    pub server: Server,
    pub kv_cache: Option<serde_json::Value>,
    /// Client CPU: (seconds, threads, the wall seconds the client worked:
    /// from the run's start until every request was settled), when measured.
    pub client_cpu: Option<(f64, usize, f64)>,
    /// What else the client measured of itself (loop delay, connections);
    /// the CPU fields are filled from `client_cpu`.
    pub client: ClientUsage,
    pub extra_findings: Vec<Finding>,
    pub simulated: Option<serde_json::Value>,
    /// What the server's own metrics said, when they were read.
    pub telemetry: Option<Telemetry>,
}

/// The server's metrics over the run.
pub struct Telemetry {
    pub summary: ServerSummary,
    pub kind: Option<String>,
    pub sources: Vec<(String, String)>,
    pub errors: u64,
    pub first_error: Option<String>,
    /// Per metrics URL: attempts, failures, first error.
    pub endpoints:
        std::collections::BTreeMap<String, tokenscope_telemetry::scraper::EndpointHealth>,
}

impl Telemetry {
    /// `load_end_s`: the last send, on the run's clock.
    pub fn from_log(log: &ScrapeLog, load_end_s: Option<f64>) -> Telemetry {
        Telemetry {
            summary: summarize(&log.scrapes, load_end_s),
            kind: log.server_kind().map(|k| k.name().to_string()),
            sources: log
                .sources
                .iter()
                .map(|(u, k)| (u.clone(), k.name().to_string()))
                .collect(),
            errors: log.errors,
            first_error: log.first_error.clone(),
            endpoints: log.endpoints.clone(),
        }
    }
}

/// A simulated engine knows its GPU: without `--gpu-price`/`--gpu-type` it
/// is priced at that GPU's default price (when the table has one).
pub fn price_known_gpu(output: &mut OutputArgs, gpu: &str, gpus: u32) {
    if output.gpu_price.is_none()
        && output.gpu_type.is_none()
        && tokenscope_core::prices::price(gpu).is_ok()
    {
        output.gpu_type = Some(gpu.to_string());
        output.gpus = gpus;
        output.gpu_known = Some(gpu.to_string());
    }
}

/// Where the price came from, for `config.gpu_price_source` and the summary.
pub fn price_source(output: &OutputArgs) -> Option<String> {
    if output.gpu_price.is_some() {
        return Some("--gpu-price".into());
    }
    let t = output.gpu_type.as_deref()?;
    let (_, source) = tokenscope_core::prices::price(t).ok()?;
    let why = match &output.gpu_known {
        Some(_) => "the simulated GPU's default price",
        None => "--gpu-type default price",
    };
    Some(format!("{why} for {t} ({source})"))
}

/// Checks `--gpu-type` before any load is sent.
pub fn check_output(output: &OutputArgs) -> anyhow::Result<()> {
    if let (None, Some(t)) = (output.gpu_price, &output.gpu_type) {
        tokenscope_core::prices::price(t).map_err(|e| Exit::usage(format!("--gpu-type: {e}")))?;
    }
    Ok(())
}

/// What the run's GPUs cost, from `--gpu-price` or `--gpu-type`'s default.
pub fn price(output: &OutputArgs) -> Option<GpuPrice> {
    output
        .gpu_price
        .or_else(|| {
            output
                .gpu_type
                .as_deref()
                .and_then(|t| tokenscope_core::prices::price(t).ok())
                .map(|p| p.0)
        })
        .map(|p| GpuPrice {
            usd_per_gpu_hour: p,
            gpus: output.gpus,
        })
}

/// Takes a run's records one at a time into its figures, judged against
/// the run's `--slo` and costed at its price.
pub fn aggregator(output: &OutputArgs) -> Aggregator {
    Aggregator::new(output.slo.clone(), price(output))
}

/// Assembles `results.json` from the run's figures and facts.
pub fn assemble(m: Measured, facts: RunFacts) -> RunResults {
    let client = match facts.client_cpu {
        // Over the client's own working time, not the requests' window: token
        // counting after a request's end is client work too.
        Some((cpu, threads, wall_s)) => ClientUsage {
            cpu_seconds: Some(cpu),
            cpu_cores: (wall_s > 0.0).then(|| cpu / wall_s),
            cpu_us_per_output_token: (m.tokens.output_total > 0)
                .then(|| cpu * 1e6 / m.tokens.output_total as f64),
            threads: Some(threads),
            ..facts.client
        },
        None => facts.client,
    };
    let asked = Asked {
        ignore_eos: facts.config["ignore_eos"].as_bool().unwrap_or(false),
        open_loop: facts.config["load"]["mode"] == "open",
        unique_prompts: facts.config["shared_prefix"] == 0
            && facts.config["dataset"].is_null()
            && facts.config["multi_turn"].is_null(),
    };
    let mut diagnosis = diagnose(&m.counts, &m.latency, &m.tokens, &client, asked);
    diagnosis.extend(facts.extra_findings);
    let (mut server, mut kv_cache, mut gpu) = (facts.server, facts.kv_cache, None);
    if let Some(t) = &facts.telemetry {
        diagnosis.extend(tokenscope_telemetry::diagnose::diagnose(
            &t.summary, &m.latency,
        ));
        // Each endpoint that failed is named, also when others answered.
        for (url, h) in t.endpoints.iter().filter(|(_, h)| h.failures > 0) {
            diagnosis.push(Finding {
                rule: "metrics_endpoint_failed".into(),
                severity: "warning".into(),
                message: format!(
                    "metrics endpoint {url}: {} of {} scrapes failed ({}); its figures are missing, not zero",
                    h.failures,
                    h.attempts,
                    h.first_error.as_deref().unwrap_or("no answer")
                ),
                evidence: [
                    ("url".to_string(), json!(url)),
                    ("failures".to_string(), json!(h.failures)),
                    ("attempts".to_string(), json!(h.attempts)),
                ]
                .into_iter()
                .collect(),
            });
        }
        if t.sources.is_empty() && t.errors > 0 {
            diagnosis.push(Finding {
                rule: "metrics_unavailable".into(),
                severity: "info".into(),
                message: format!(
                    "the server's metrics could not be read ({}): server-side figures are unavailable, not zero",
                    t.first_error.as_deref().unwrap_or("no answer")
                ),
                evidence: [("scrape_errors".to_string(), json!(t.errors))].into_iter().collect(),
            });
        }
        server.kind = t.kind.clone().or(server.kind);
        let mut metrics = serde_json::to_value(&t.summary).unwrap_or_default();
        if let Some(obj) = metrics.as_object_mut() {
            obj.insert(
                "sources".into(),
                json!(t
                    .sources
                    .iter()
                    .map(|(u, k)| json!({"url": u, "kind": k}))
                    .collect::<Vec<_>>()),
            );
            obj.insert("scrape_errors".into(), json!(t.errors));
            obj.insert("endpoints".into(), json!(t.endpoints));
            obj.insert("first_scrape_error".into(), json!(t.first_error));
        }
        server.metrics = Some(metrics);
        kv_cache = kv_cache.or_else(|| tokenscope_telemetry::diagnose::kv_cache(&t.summary));
        gpu = tokenscope_telemetry::diagnose::gpu(&t.summary, m.tokens.output_total);
    }
    RunResults {
        output_error: None,
        schema: results::SCHEMA.into(),
        tool: Tool {
            name: "tokenscope".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
        started_at: facts.started_at,
        partial: facts.partial,
        simulated: facts.simulated,
        target: facts.target,
        config: facts.config,
        window: m.window,
        latency: m.latency,
        throughput: m.throughput,
        counts: m.counts,
        tokens: m.tokens,
        workload: m.fidelity,
        slo: m.slo,
        efficiency: Efficiency {
            cost: m.cost,
            gpu,
            kv_cache,
        },
        server,
        client,
        diagnosis,
        shard: None,
        merged: None,
        cold_start: None,
    }
}

/// Space held from the start of a run for its `results.json`, so a disk
/// that fills during the run still takes the results (a run's is ~6 KB).
const RESERVE: &str = ".results.reserve";
const RESERVE_BYTES: u64 = 256 * 1024;

/// Refuses a run directory on a nearly full filesystem (before any load),
/// then holds [`RESERVE_BYTES`] for the results.
pub fn reserve_output(dir: &Path) -> anyhow::Result<()> {
    if let Some(free) = free_bytes(dir) {
        if free < 2 * RESERVE_BYTES {
            return Err(anyhow::Error::new(Exit::OutputFailed).context(format!(
                "--out {}: only {} KiB free on its filesystem; a run needs room for its records (free some space or choose another --out)",
                dir.display(),
                free / 1024
            )));
        }
    }
    std::fs::write(dir.join(RESERVE), vec![0u8; RESERVE_BYTES as usize])
        .with_context(|| format!("reserving space in {}", dir.display()))
        .map_err(|e| anyhow::Error::new(Exit::OutputFailed).context(format!("{e:#}")))
}

/// Bytes free to this user on the filesystem holding `dir`.
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid NUL-terminated path and a zeroed out-struct.
    let rc = unsafe { libc::statvfs(path.as_ptr(), &mut st) };
    (rc == 0).then(|| st.f_bavail as u64 * st.f_frsize as u64)
}

/// Writes `results.json` atomically (temporary file, then rename); on a full
/// disk, gives back the space held by [`reserve_output`] and tries again.
pub fn write_results(dir: &Path, results: &RunResults) -> anyhow::Result<()> {
    let path = dir.join("results.json");
    let tmp = dir.join("results.json.tmp");
    let text = serde_json::to_string_pretty(results)? + "\n";
    let write = || -> std::io::Result<()> {
        std::fs::write(&tmp, &text)?;
        std::fs::rename(&tmp, &path)
    };
    let reserve = dir.join(RESERVE);
    let outcome = write().or_else(|e| {
        let _ = std::fs::remove_file(&tmp);
        if std::fs::remove_file(&reserve).is_ok() {
            write()
        } else {
            Err(e)
        }
    });
    let _ = std::fs::remove_file(&reserve);
    outcome.with_context(|| format!("writing {}", path.display()))
}

/// Writes to stdout; a reader that went away (`… | head`, `… | true`) ends
/// the output quietly, and the command keeps its own exit code.
pub fn to_stdout(text: &str) {
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// The summary on stdout, or with `--json` the results document alone.
pub fn print(results: &RunResults, output: &OutputArgs, dir: &Path) -> anyhow::Result<()> {
    if output.json {
        to_stdout(&(serde_json::to_string_pretty(results)? + "\n"));
    } else {
        to_stdout(&tokenscope_report::terminal::summary(results));
        to_stdout(&format!("\nrun directory: {}\n", dir.display()));
    }
    if internal_failure(results) {
        eprintln!(
            "tokenscope: error: tokenscope itself failed during the run (see the `internal` errors in requests.jsonl and the diagnosis); the figures may be incomplete — please report it"
        );
    }
    if results.counts.requests == 0 && !results.partial {
        eprintln!(
            "tokenscope: error: no request was measured ({} warm-up, window {:.2} s): nothing to conclude; send more (--requests, --duration) or fewer --warmup",
            results.counts.warmup, results.window.duration_s
        );
    }
    Ok(())
}

/// tokenscope itself failed during the run (a panic caught in a request
/// task, or the arrival schedule broke off).
fn internal_failure(r: &RunResults) -> bool {
    r.counts
        .errors
        .contains_key(&ErrorKind::Internal.to_string())
        || r.diagnosis.iter().any(|f| f.rule == "internal_error")
}

pub fn exit_code(r: &RunResults) -> Exit {
    let c = &r.counts;
    if r.output_error.is_some() {
        Exit::OutputFailed
    } else if internal_failure(r) {
        Exit::Error // a bug of ours: see `print`
    } else if r.partial {
        Exit::Interrupted
    } else if c.requests == 0 {
        Exit::Error // nothing measured: see `print`
    } else if c.requests > 0 && c.succeeded == 0 {
        let all_connect = c
            .errors
            .keys()
            .all(|k| k == &ErrorKind::Connect.to_string());
        if all_connect {
            Exit::Unreachable
        } else {
            Exit::AllFailed
        }
    } else if let Some(slo) = &r.slo {
        match slo.verdict {
            Some(Verdict::NotEnoughData) => Exit::SloNotJudged,
            _ if !slo.met => Exit::SloNotMet,
            _ => Exit::Success,
        }
    } else {
        Exit::Success
    }
}
