//! The tokenscope application: everything the `tokenscope` binary does,
//! as a library its `main.rs` calls and its tests reach without spawning it.
//!
//! Read it top-down, in the order a run flows:
//! - [`cli`]: the command line (clap), and [`config_file`]: `--config FILE.toml`;
//! - [`spec`]: the run specification, built once from the flags: the plan
//!   (load, workload, dataset, tokenizer), pricing and the shard;
//! - [`run`]: the run pipeline in phases — probe → prepare → drive →
//!   collect → finish — shared by `bench`, every `sweep` point, `selftest`
//!   and `bench --self-check`; [`self_check`]: the client's error floor,
//!   itself a run, measured before a run that asks for it;
//! - [`run_dir`]: the one owner of a run directory: claiming and reserving
//!   it, `results.json`, `report.html`, and reading a run or a series back;
//! - [`series`]: a series of runs analysed (sweep points, `sim plan --sweep`,
//!   merged sweeps); [`recording`]: runs recorded in the results history;
//!   [`engine`]: the simulated engine configured from the flags;
//! - [`commands`]: one module per command; commands call the services
//!   above and never each other;
//! - [`warnings`]: every doubt a run raises, typed, printed from one place;
//!   [`output`], [`live`], [`signals`], [`exit`]: the edges to the terminal
//!   and the process.
//!
//! `docs/architecture.md` draws the crates and the path of a run.

pub mod answers;
pub mod between;
pub mod calibration;
pub mod cli;
pub mod commands;
pub mod config_file;
pub mod engine;
pub mod exit;
pub mod find;
pub mod live;
pub mod live_metrics;
pub mod otlp;
pub mod otlp_push;
pub mod otlp_traces;
pub mod output;
pub mod peer_results;
pub mod plan_search;
pub mod points;
pub mod recording;
pub mod run;
pub mod run_dir;
pub mod self_check;
pub mod series;
pub mod signals;
pub mod spec;
pub mod tuning;
pub mod warnings;

use clap::{CommandFactory, FromArgMatches};
use exit::Exit;
use std::ffi::OsString;
use std::process::ExitCode;

/// The whole process: `--config` expanded, the command line parsed, the
/// command run, `config.toml` stored in the run directory, and any error
/// said on one line with its exit code.
pub fn main(argv: Vec<OsString>) -> ExitCode {
    // `--config FILE.toml`'s flags go before the command line's, which win.
    let cmd = cli::short_help(config_file::allow_overrides(cli::Cli::command()));
    let argv = match config_file::expand(&cmd, argv) {
        Ok(argv) => argv,
        Err(msg) => {
            eprintln!("tokenscope: error: {msg}");
            return Exit::Usage.into();
        }
    };
    let matches = cmd.clone().get_matches_from(argv);
    config_file::record(&cmd, &matches);
    let cli = cli::Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let result = commands::run(cli.command);
    if let Err(e) = run_dir::store_config() {
        warnings::Warning::ConfigNotStored { why: e.to_string() }.say(false);
    }
    match result {
        Ok(code) => code.into(),
        // An error that carries its exit code has its message as context;
        // any other error prints its whole chain.
        Err(e) => match e.downcast_ref::<Exit>().copied() {
            Some(code) => {
                eprintln!("tokenscope: error: {e}");
                code.into()
            }
            None => {
                eprintln!("tokenscope: error: {e:#}");
                Exit::Error.into()
            }
        },
    }
}
