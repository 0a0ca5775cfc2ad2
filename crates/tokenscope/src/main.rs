//! The `tokenscope` binary: parses the command line and runs a command.

mod bench;
mod cli;
mod cold_start;
mod compare;
mod exit;
mod history;
mod live;
mod merge;
mod outcome;
mod plan;
mod report;
mod scenario;
mod selftest;
mod serve;
mod shard;
mod signals;
mod size;
mod sweep;
mod watch;

use clap::{CommandFactory, FromArgMatches};
use exit::Exit;
use std::process::ExitCode;

fn main() -> ExitCode {
    // `--config FILE.toml`'s flags go before the command line's, which win.
    let cmd = scenario::allow_overrides(cli::Cli::command());
    let argv = match scenario::expand(&cmd, std::env::args_os().collect()) {
        Ok(argv) => argv,
        Err(msg) => {
            eprintln!("tokenscope: error: {msg}");
            return Exit::Usage.into();
        }
    };
    let matches = cmd.clone().get_matches_from(argv);
    scenario::record(&cmd, &matches);
    let cli = cli::Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let result = run(cli);
    if let Err(e) = scenario::store() {
        eprintln!("tokenscope: warning: the run's config.toml could not be written: {e}");
    }
    match result {
        Ok(code) => code.into(),
        Err(e) => {
            // An error that carries its exit code has its message as context;
            // any other error prints its whole chain.
            match e.downcast_ref::<Exit>().copied() {
                Some(code) => {
                    eprintln!("tokenscope: error: {e}");
                    code.into()
                }
                None => {
                    eprintln!("tokenscope: error: {e:#}");
                    Exit::Error.into()
                }
            }
        }
    }
}

fn run(cli: cli::Cli) -> anyhow::Result<Exit> {
    match cli.command {
        cli::Command::Bench(args) => bench::run(*args),
        cli::Command::Sweep(args) => sweep::run(*args),
        cli::Command::Report(args) => report::run(*args),
        cli::Command::Compare(args) => compare::run(args),
        cli::Command::Watch(args) => watch::run(args),
        cli::Command::Selftest(args) => selftest::run(args),
        cli::Command::Merge(args) => merge::run(args),
        cli::Command::History(args) => history::run(args),
        cli::Command::Sim(cli::SimCommand::Exact(args)) => serve::exact(args),
        cli::Command::Sim(cli::SimCommand::Serve(args)) => serve::engine(*args),
        cli::Command::Sim(cli::SimCommand::Plan(args)) => plan::run(*args),
        cli::Command::Sim(cli::SimCommand::List(args)) => plan::list(args),
        cli::Command::Sim(cli::SimCommand::Size(args)) => size::run(*args),
        cli::Command::Sim(cli::SimCommand::Calibrate(args)) => plan::calibrate(*args),
    }
}
