//! The run pipeline: one load test from its [`RunSpec`] to its run
//! directory, in five phases, each a module short enough to read whole:
//!
//! 1. [`probe`]: the target checked — its URL, credentials, model and API —
//!    and the run directory claimed, before anything is sent;
//! 2. [`prepare`]: everything opened before the clock starts — the records
//!    file, the metrics scraper's baseline, one connection per stream, the
//!    shard's shared start instant;
//! 3. [`drive`]: the load sent and watched (dashboard or progress line,
//!    Ctrl-C), then every part stopped in order;
//! 4. [`collect`]: the records, the scrapes and the client's own costs
//!    assembled into `results.json`'s document;
//! 5. [`finish`]: `results.json` and `report.html` written, then (for a
//!    command that ends with this run) the summary, the history and the
//!    exit code.
//!
//! `bench`, every `sweep` point, `selftest` and `bench --self-check` all run
//! through [`run`] (`crate::self_check` measures the error floor a spec
//! asks for first); [`builtin`] starts the client runtime (and a built-in
//! server when there is no `--url`) they run on.

pub mod answers;
pub mod builtin;
pub mod cold_start;
pub mod collect;
pub mod drive;
pub mod finish;
pub mod prepare;
pub mod probe;
pub mod progress;
pub mod queue_watch;
pub mod target;

use crate::spec::RunSpec;
use anyhow::Context;
use std::path::PathBuf;
use tokenscope_core::results::{RunResults, SelfCheck};

/// Where a run is sent from and to: the target URL (`--url`, or the built-in
/// server's), the built-in server's description, and the client's threads.
#[derive(Debug, Clone)]
pub struct Site {
    pub url: String,
    pub builtin: Option<String>,
    pub threads: usize,
}

/// One run: probe, prepare, drive, collect, and write its directory, with
/// the error floor measured before it (`--self-check`), if any. Returns the
/// results and the directory; saying them is the caller's.
pub async fn run(
    spec: &RunSpec,
    site: &Site,
    self_check: Option<SelfCheck>,
) -> anyhow::Result<(RunResults, PathBuf)> {
    // Listening from the start: a Ctrl-C or SIGTERM during the probe or the
    // first metrics scrape still ends in a complete, partial run directory.
    let stop = crate::signals::Stop::listen().context("installing the signal handlers")?;
    let probed = probe::probe(spec, site, self_check).await?;
    let prepared = prepare::prepare(spec, probed).await?;
    let driven = drive::drive(spec, prepared, stop).await;
    let (results, figures, dir) = collect::collect(spec, site, driven).await?;
    finish::write_run(&dir, results, figures, spec.quiet())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::Exit;
    use crate::spec::tests::bench_args;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ts-pipeline-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// Runs `body` on a client runtime with the built-in exact server as its site.
    fn at_exact_server<F, Fut>(spec: &RunSpec, body: F) -> Exit
    where
        F: FnOnce(Site) -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<Exit>>,
    {
        builtin::with_runtime(&spec.target, spec.builtin, &spec.client, body).unwrap()
    }

    #[test]
    fn a_run_goes_through_every_phase_into_its_directory() {
        let dir = scratch("whole");
        let flags = format!(
            "--builtin exact --concurrency 2 --requests 6 --input-tokens 8 --output-tokens 4 \
             --client-threads 1 --quiet --no-history --out {}",
            dir.display()
        );
        let spec = RunSpec::build(bench_args(&flags)).unwrap();
        let (spec, d) = (&spec, dir.clone());
        let exit = at_exact_server(spec, |site| async move {
            let (results, out) = run(spec, &site, None).await?;
            assert_eq!(out, d);
            assert_eq!((results.counts.requests, results.counts.succeeded), (6, 6));
            assert_eq!(results.target.api, "openai-chat", "--api auto probed chat");
            assert_eq!(results.target.model, "tokenscope-exact");
            assert!(results.target.builtin.as_deref().unwrap().contains("exact"));
            assert_eq!(results.tokens.output_total, 24);
            // The exact server's TTFT is 100 ms; the client cannot see less.
            assert!(results.latency.ttft_ms.unwrap().p50 >= 100.0);
            Ok(finish::exit_code(&results))
        });
        assert_eq!(exit, Exit::Success);
        for file in ["results.json", "requests.jsonl", "report.html"] {
            assert!(dir.join(file).exists(), "{file}");
        }
        let lines = std::fs::read_to_string(dir.join("requests.jsonl")).unwrap();
        assert_eq!(lines.lines().count(), 6);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_probe_finds_the_model_and_the_api_and_claims_the_directory() {
        let dir = scratch("probe");
        let flags = format!(
            "--builtin exact --api auto --client-threads 1 --quiet --out {}",
            dir.display()
        );
        let spec = RunSpec::build(bench_args(&flags)).unwrap();
        let (spec, d) = (&spec, dir.clone());
        let exit = at_exact_server(spec, |site| async move {
            let probed = probe::probe(spec, &site, None).await?;
            assert_eq!(probed.model, "tokenscope-exact");
            assert_eq!(probed.api.name(), "openai-chat");
            assert_eq!(probed.out_dir, d);
            assert_eq!(
                probed.streams, 10,
                "one connection per stream of the default loop"
            );
            Ok(Exit::Success)
        });
        assert_eq!(exit, Exit::Success);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_unreachable_target_fails_the_probe_with_its_exit_code() {
        // A port nothing listens on: bound, then closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let flags = format!(
            "--url http://127.0.0.1:{port} --api openai-chat --client-threads 1 --quiet --out {}",
            scratch("unreachable").display()
        );
        let spec = RunSpec::build(bench_args(&flags)).unwrap();
        let site = Site {
            url: format!("http://127.0.0.1:{port}"),
            builtin: None,
            threads: 1,
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let err = rt
            .block_on(run(&spec, &site, None))
            .expect_err("nothing listens there");
        assert_eq!(
            err.downcast_ref::<Exit>(),
            Some(&Exit::Unreachable),
            "{err:#}"
        );
    }
}
