//! Phase 4 of a run: everything measured — the records' figures, the
//! server's scrapes, the client's own costs, the shard's start — assembled
//! into the `results.json` document. [`assemble`] is the one place a
//! document is built from figures and facts: `sim plan`, `merge` and a
//! killed run's `report` build theirs with it too.

use super::drive::Driven;
use super::Site;
use crate::spec::RunSpec;
use serde_json::json;
use tokenscope_core::diagnosis::{diagnose, Asked};
use tokenscope_core::metrics::{Aggregator, Measured};
use tokenscope_core::results::{
    self, ClientUsage, Efficiency, Finding, RunResults, Server, ShardInfo, Tool,
};
use tokenscope_load::connections::{self, FileLimit};
use tokenscope_load::{loop_delay, probe, runtime};
use tokenscope_telemetry::scraper::ScrapeLog;
use tokenscope_telemetry::window::{summarize, ServerSummary};

/// The run's document, the figures of its requests (for `report.html`) and
/// its directory.
pub async fn collect(
    spec: &RunSpec,
    site: &Site,
    d: Driven,
) -> anyhow::Result<(RunResults, Aggregator, std::path::PathBuf)> {
    let cold_start = d.cold_start.transpose()?;
    let mut figures = d.recorded.figures;
    let p = &d.probed;
    let stamped = runtime::kernel_stamps(&p.base);
    let version = probe::server_version(&p.client, &p.base, &p.headers).await;
    let wake_batch = spec.client.wake_batch.resolve(stamped);
    let facts = RunFacts {
        started_at: d.started_at,
        partial: d.interrupted,
        target: results::Target {
            url: p.base.clone(),
            api: p.api.name().into(),
            model: p.model.clone(),
            builtin: site.builtin.clone(),
        },
        config: spec.config.clone(),
        server: Server {
            version,
            ..Server::default()
        },
        kv_cache: None,
        client_cpu: d
            .cpu
            .map(|(cpu, _)| (cpu.as_secs_f64(), site.threads, d.client_wall_s)),
        client: ClientUsage {
            self_check: p.self_check.clone(),
            peak_rss_mb: tokenscope_load::cpu::peak_rss_bytes().map(|b| b as f64 / 1e6),
            monotonic_origin_us: tokenscope_core::clock::monotonic_us(d.clock.origin()),
            kernel_read_stamps: Some(stamped),
            unstamped_reads: stamped.then(|| d.http.unstamped_reads()),
            wake_batch_us: Some(wake_batch.as_micros() as u64),
            ..client_side(&d.loop_delay, d.warmed.as_ref(), p.file_limit)
        },
        extra_findings: p
            .notes
            .iter()
            .cloned()
            .chain(rotation_findings(&d.recorded.rotated))
            .collect(),
        simulated: None,
        telemetry: d.telemetry.as_ref().map(|log| {
            let last_sent = figures.last_sent_us();
            Telemetry::from_log(log, last_sent.map(|us| us as f64 / 1e6))
        }),
    };
    let mut results = assemble(figures.finish(), facts);
    results.cold_start = cold_start;
    results.shard = spec.shard.as_ref().map(|s| ShardInfo {
        index: s.shard.index,
        count: s.shard.count,
        start_at: s.start_at.as_ref().map(|a| a.text.clone()),
        origin_unix_us: d.origin_unix_us,
        late_ms: d.late.map(|l| l.as_secs_f64() * 1e3),
        whole: s.whole.clone(),
        host: crate::spec::shard::host(),
        clock: crate::spec::shard::clock_sync(),
    });
    results.warnings = spec.warnings().iter().map(|w| w.record()).collect();
    results.records = segments_of(&d.recorded.rotated);
    // Two rules may trip before the load winds down: the first stopped it.
    let watched = d.queue_grew.as_ref();
    let stopped = [
        d.recorded.stopped.as_ref(),
        watched.filter(|g| g.stopped).map(|g| &g.tripped),
    ]
    .into_iter()
    .flatten()
    .min_by(|a, b| a.at_s.total_cmp(&b.at_s));
    if let Some(g) = watched.filter(|g| !g.stopped) {
        results.diagnosis.push(queue_finding(&g.tripped));
    }
    if let Some(t) = stopped {
        results.diagnosis.push(stopped_finding(t));
        results.stopped = Some(t.clone());
    }
    if let Some(e) = &d.recorded.error {
        let said = format!(
            "output failed: {e}; the run stopped there: the first {} of {} finished requests are whole lines of requests.jsonl, the rest were counted in memory",
            d.recorded.on_disk,
            d.recorded.total
        );
        results.output_error = Some(said.clone());
        eprintln!("tokenscope: error: {said}");
    }
    Ok((results, figures, p.out_dir.clone()))
}

/// The run stopped early by a `--stop-on` rule: what its figures are of.
/// Monitor mode: the queue grew, and the run went on.
fn queue_finding(t: &tokenscope_core::breaker::Tripped) -> Finding {
    tokenscope_core::diagnosis::finding(
        "waiting_grew",
        "warning",
        format!(
            "from {:.1} s into the run, {}. The figures after it measure a queue growing with the run's length, not a steady state: measure below that rate, or give --stop-on saturation to stop there",
            t.at_s,
            t.why.trim_start_matches("the queue was growing: ")
        ),
        &[("at_s", serde_json::json!(t.at_s))],
    )
}

fn stopped_finding(t: &tokenscope_core::breaker::Tripped) -> Finding {
    tokenscope_core::diagnosis::finding(
        "stopped_early",
        "critical",
        format!(
            "--stop-on {} stopped the run {:.1} s in: {}. The figures are of the requests that finished by then; those in flight were cancelled",
            t.rule, t.at_s, t.why
        ),
        &[
            ("stop_rule", serde_json::json!(t.rule)),
            ("at_s", serde_json::json!(t.at_s)),
        ],
    )
}

/// `results.json`'s `records`, when the run rotated any.
pub fn segments_of(r: &tokenscope_load::recorder::Rotated) -> Option<results::RecordSegments> {
    (r.segments > 0).then_some(results::RecordSegments {
        segments: r.segments,
        removed_segments: r.removed_segments,
        removed_records: r.removed_records,
    })
}

/// What rotating the records did that a reader must know: records removed
/// under `--keep-records`, a segment that could not be compressed.
pub fn rotation_findings(r: &tokenscope_load::recorder::Rotated) -> Vec<Finding> {
    let mut out = Vec::new();
    if r.removed_records > 0 {
        out.push(Finding {
            rule: "records_removed".into(),
            severity: "info".into(),
            message: format!(
                "the oldest {} of the run's records ({} of its {} rotated segments) were removed to keep the directory under --keep-records; results.json and windows.jsonl still count them, but report, compare and merge read only the records kept",
                r.removed_records, r.removed_segments, r.segments
            ),
            evidence: Default::default(),
        });
    }
    if let Some(e) = &r.error {
        out.push(Finding {
            rule: "records_rotation_failed".into(),
            severity: "warning".into(),
            message: format!(
                "rotating the records: {e}; every record is still on disk, in the plain segment"
            ),
            evidence: Default::default(),
        });
    }
    out
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
    /// Each metrics endpoint that failed, named also when others answered;
    /// and metrics that could not be read at all: missing, not zero.
    fn findings(&self) -> Vec<Finding> {
        let mut out = Vec::new();
        for (url, h) in self.endpoints.iter().filter(|(_, h)| h.failures > 0) {
            out.push(Finding {
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
        if self.sources.is_empty() && self.errors > 0 {
            out.push(Finding {
                rule: "metrics_unavailable".into(),
                severity: "info".into(),
                message: format!(
                    "the server's metrics could not be read ({}): server-side figures are unavailable, not zero",
                    self.first_error.as_deref().unwrap_or("no answer")
                ),
                evidence: [("scrape_errors".to_string(), json!(self.errors))].into_iter().collect(),
            });
        }
        out
    }

    /// `results.json`'s `server.metrics`: the summary, where it came from and
    /// how the scrapes went.
    fn metrics(&self) -> serde_json::Value {
        let mut metrics = serde_json::to_value(&self.summary).unwrap_or_default();
        if let Some(obj) = metrics.as_object_mut() {
            let sources: Vec<_> = self
                .sources
                .iter()
                .map(|(u, k)| json!({"url": u, "kind": k}))
                .collect();
            obj.insert("sources".into(), json!(sources));
            obj.insert("scrape_errors".into(), json!(self.errors));
            obj.insert("endpoints".into(), json!(self.endpoints));
            obj.insert("first_scrape_error".into(), json!(self.first_error));
        }
        metrics
    }

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

/// The run's load in words (`concurrency 8`, `4 requests/s`), as a
/// finding names it.
fn load_phrase(load: &serde_json::Value) -> String {
    match (load["concurrency"].as_f64(), load["rate"].as_f64()) {
        (Some(c), _) => format!("concurrency {c}"),
        (_, Some(r)) => format!("{r} requests/s"),
        _ => "this run's load".into(),
    }
}

/// Assembles `results.json` from the run's figures and facts.
pub fn assemble(m: Measured, facts: RunFacts) -> RunResults {
    let client = client_usage(facts.client_cpu, facts.client, m.tokens.output_total);
    let asked = asked_of(&facts.config, facts.simulated.is_some());
    let accuracy = m
        .grades
        .finish(facts.config["grade"].as_str().unwrap_or(""));
    let mut diagnosis = diagnose(&m.counts, &m.latency, &m.tokens, &client, asked);
    // A closed loop's queue is bounded by its users: only arrivals outrun.
    let growing = m.queue_growth.as_ref().filter(|_| asked.open_loop);
    diagnosis.extend(growing.and_then(|g| g.finding()));
    diagnosis.extend(facts.extra_findings);
    diagnosis.extend(super::answers::findings(&m, &facts.config));
    diagnosis.extend(tokenscope_core::diagnosis::class_tradeoff(&m.classes));
    diagnosis.extend(m.workflow_findings.iter().cloned());
    diagnosis.extend(m.speech_tally.findings(&load_phrase(&facts.config["load"])));
    let (mut server, mut kv_cache, mut gpu) = (facts.server, facts.kv_cache, None);
    if let Some(t) = &facts.telemetry {
        diagnosis.extend(tokenscope_telemetry::diagnose::diagnose(
            &t.summary, &m.latency,
        ));
        diagnosis.extend(tokenscope_telemetry::diagnose::abandoned(
            &t.summary,
            m.counts.abandoned,
        ));
        diagnosis.extend(t.findings());
        server.kind = t.kind.clone().or(server.kind);
        server.metrics = Some(t.metrics());
        kv_cache = kv_cache.or_else(|| tokenscope_telemetry::diagnose::kv_cache(&t.summary));
        gpu = tokenscope_telemetry::diagnose::gpu(&t.summary, m.tokens.output_total);
    }
    RunResults {
        output_error: None,
        stopped: None,
        records: None,
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
        adapters: m.adapters,
        classes: m.classes,
        media: m.media,
        structured_output: m.structured_output,
        tool_calls: m.tool_calls,
        sessions: m.sessions,
        workflows: m.workflows,
        steps: m.steps,
        speech: m.speech,
        accuracy,
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
        warnings: Vec::new(),
    }
}

/// The client's usage, its CPU figures over the client's own working time,
/// not the requests' window: token counting after a request's end is client
/// work too. `cpu`: (CPU seconds, threads, wall seconds).
fn client_usage(
    cpu: Option<(f64, usize, f64)>,
    client: ClientUsage,
    output_total: u64,
) -> ClientUsage {
    match cpu {
        Some((cpu, threads, wall_s)) => ClientUsage {
            cpu_seconds: Some(cpu),
            cpu_cores: (wall_s > 0.0).then(|| cpu / wall_s),
            cpu_us_per_output_token: (output_total > 0).then(|| cpu * 1e6 / output_total as f64),
            threads: Some(threads),
            ..client
        },
        None => client,
    }
}

/// What the run asked for, as the diagnosis's rules read it from the config.
fn asked_of(c: &serde_json::Value, simulated: bool) -> Asked {
    let one_length = |key: &str| c[key].as_str().is_some_and(|s| s.parse::<u64>().is_ok());
    Asked {
        ignore_eos: c["ignore_eos"].as_bool().unwrap_or(false),
        open_loop: c["load"]["mode"] == "open",
        unique_prompts: c["shared_prefix"] == 0
            && c["dataset"].is_null()
            && c["multi_turn"].is_null()
            && c["workflows"].is_null(),
        // A plan simulates both starts instead (`tokenscope_sim::phase`).
        fixed_length_users: (!simulated
            && c["load"]["mode"] == "closed"
            && one_length("output_tokens")
            && (c["reasoning_tokens"].is_null() || one_length("reasoning_tokens"))
            && c["dataset"].is_null()
            && c["multi_turn"].is_null()
            && c["workflows"].is_null())
        .then(|| c["load"]["concurrency"].as_u64())
        .flatten(),
        ramped: c["ramp_up_s"].as_f64().is_some_and(|r| r > 0.0),
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The document of a run that measured nothing.
    pub(crate) fn empty_results() -> RunResults {
        let facts = RunFacts {
            started_at: "2026-12-04T00:00:00Z".into(),
            partial: false,
            target: results::Target {
                url: "http://127.0.0.1:1".into(),
                api: "openai-chat".into(),
                model: "m".into(),
                builtin: None,
            },
            config: json!({"load": {"mode": "closed", "concurrency": 1}}),
            server: Server::default(),
            kv_cache: None,
            client_cpu: Some((0.5, 2, 10.0)),
            client: ClientUsage::default(),
            extra_findings: Vec::new(),
            simulated: None,
            telemetry: None,
        };
        assemble(Aggregator::new(None, None).finish(), facts)
    }

    #[test]
    fn a_document_is_assembled_from_figures_and_facts() {
        let r = empty_results();
        assert_eq!(r.schema, results::SCHEMA);
        assert_eq!(r.counts.requests, 0);
        assert_eq!(
            r.client.cpu_cores,
            Some(0.05),
            "CPU over the client's own wall time"
        );
        assert_eq!(r.client.threads, Some(2));
        assert!(r.warnings.is_empty());
    }
}
