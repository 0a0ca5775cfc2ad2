//! The `tokenscope` binary: parses the command line and runs a command.

mod bench;
mod cli;
mod exit;
mod serve;

use clap::Parser;
use exit::Exit;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let result = match cli.command {
        cli::Command::Bench(args) => bench::run(*args),
        cli::Command::Sim(cli::SimCommand::Exact(args)) => serve::exact(args),
    };
    match result {
        Ok(code) => code.into(),
        Err(e) => {
            let code = e.downcast_ref::<Exit>().copied().unwrap_or(Exit::Error);
            eprintln!("tokenscope: error: {e:#}");
            code.into()
        }
    }
}
