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

pub mod builtin;
pub mod cold_start;
pub mod collect;
pub mod drive;
pub mod finish;
pub mod prepare;
pub mod probe;
pub mod progress;
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
