//! `tokenscope selftest` and `bench --self-check`: the client run on this
//! machine against the built-in exact server at a given load, its TTFT and
//! TPOT compared per request with the server's own send times. The result is
//! the error floor of this machine's measurements at that load — what a
//! reader needs to know before trusting a difference of a few milliseconds.
//!
//! A self-check is itself a run through the pipeline, so it sits above
//! [`crate::run`]: [`then_run`] measures the floor a spec asks for, then
//! runs the spec with it.

use crate::cli::BenchArgs;
use crate::exit::Exit;
use crate::run::Site;
use crate::spec::RunSpec;
use anyhow::Context;
use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;
use tokenscope_core::results::RunResults;
use tokenscope_core::results::SelfCheck;
use tokenscope_sim::exact::{errors_against_server, ExactConfig, ExactServer};

/// A run as `bench` and a `sweep` point make it: with `--self-check`, the
/// error floor at its concurrency measured first (after the flags that can
/// be checked without the network are), then the run.
pub async fn then_run(spec: &RunSpec, site: &Site) -> anyhow::Result<(RunResults, PathBuf)> {
    let floor = match spec.client.self_check {
        false => None,
        true => {
            crate::run::probe::validate(spec, site)?;
            Some(before_run(spec, site.threads).await?)
        }
    };
    crate::run::run(spec, site, floor).await
}

/// `--self-check`: the error floor at this run's concurrency, measured
/// before the run (its client threads as the run's).
async fn before_run(spec: &RunSpec, threads: usize) -> anyhow::Result<SelfCheck> {
    let streams = crate::run::probe::streams_ahead(&spec.plan.pattern) as u64;
    let load = Load::for_bench(streams, Some(threads as u64));
    if !spec.output.quiet {
        eprintln!("tokenscope: self-check at {streams} streams against the built-in exact server…");
    }
    let check = Box::pin(measure(load)).await?;
    if !spec.output.quiet {
        eprintln!("tokenscope: self-check: {}", check.sentence());
    }
    Ok(check)
}

/// The load a self-check runs.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    pub streams: u64,
    pub requests: u64,
    pub ttft: Duration,
    pub itl: Duration,
    pub output_tokens: u64,
    pub client_threads: Option<u64>,
}

impl Load {
    /// What `bench --self-check` runs: one wave at the bench's own
    /// concurrency, short answers (64 tokens at 20 ms: 1.4 s).
    pub fn for_bench(streams: u64, client_threads: Option<u64>) -> Load {
        Load {
            streams,
            requests: streams,
            ttft: Duration::from_millis(100),
            itl: Duration::from_millis(20),
            output_tokens: 64,
            client_threads,
        }
    }
}

/// Runs the check on the current (client) runtime; the exact server gets a
/// runtime of its own (threads `srv-selftest`), as a built-in server does.
pub async fn measure(load: Load) -> anyhow::Result<SelfCheck> {
    let srv = tokio::runtime::Builder::new_multi_thread()
        .thread_name("srv-selftest")
        .enable_all()
        .build()?;
    let config = ExactConfig {
        ttft: load.ttft,
        itl: load.itl,
        ..ExactConfig::default()
    };
    let started = srv.spawn(ExactServer::start(([127, 0, 0, 1], 0).into(), config));
    let server = started
        .await?
        .context("starting the exact server on 127.0.0.1")?;
    let url = server.url();
    let dir = std::env::temp_dir().join(format!("tokenscope-selftest-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let args = bench_args(&url, &dir, &load)?;
    let site = Site {
        url: url.clone(),
        builtin: None,
        threads: crate::run::builtin::client_threads(load.client_threads),
    };
    let outcome = match RunSpec::build(args) {
        Ok(spec) => crate::run::run(&spec, &site, None).await,
        Err(e) => Err(e),
    };
    srv.shutdown_background();
    let (results, _) = outcome.context("the self-check's run")?;
    let records = crate::run_dir::Run::read_records(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    let records = records.context("reading the self-check's requests")?;
    let e = errors_against_server(&records, results.client.monotonic_origin_us);
    const MS: f64 = 1e-3;
    Ok(SelfCheck {
        streams: load.streams,
        requests: load.requests,
        server_ttft_ms: load.ttft.as_secs_f64() * 1e3,
        server_itl_ms: load.itl.as_secs_f64() * 1e3,
        output_tokens: load.output_tokens,
        ttft_error_ms: e.ttft.summary(MS),
        tpot_error_ms: e.tpot.summary(MS),
        first_read_delay_ms: e.first_read_delay.summary(MS),
        last_read_delay_ms: e.last_read_delay.summary(MS),
        server_queue_ms: e.server_queue.summary(MS),
        loop_delay_ms: results.client.loop_delay_ms,
        failed: results.counts.failed,
    })
}

/// The bench a self-check runs, as its command line would say it.
fn bench_args(url: &str, dir: &std::path::Path, load: &Load) -> anyhow::Result<BenchArgs> {
    #[derive(Parser)]
    struct Argv {
        #[command(flatten)]
        bench: BenchArgs,
    }
    let mut argv: Vec<String> = [
        "selftest",
        "--url",
        url,
        "--api",
        "openai-chat",
        "--model",
        "tokenscope-exact",
        "--no-metrics",
        "--quiet",
        "--input-tokens",
        "16",
    ]
    .map(String::from)
    .to_vec();
    argv.extend([
        "--concurrency".into(),
        load.streams.to_string(),
        "--requests".into(),
        load.requests.to_string(),
        "--output-tokens".into(),
        load.output_tokens.to_string(),
        "--out".into(),
        dir.display().to_string(),
    ]);
    if let Some(n) = load.client_threads {
        argv.extend(["--client-threads".into(), n.to_string()]);
    }
    Ok(Argv::try_parse_from(argv)
        .map_err(|e| Exit::usage(format!("the self-check's load: {e}")))?
        .bench)
}
