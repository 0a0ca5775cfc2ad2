//! One module per command. A command reads its flags, calls the services of
//! this library (the run pipeline, the run directory, the series analysis,
//! the history) and chooses the exit code; it never calls another command.

pub mod bench;
pub mod compare;
pub mod history;
pub mod merge;
pub mod report;
pub mod selftest;
pub mod shell;
pub mod sim_calibrate;
pub mod sim_list;
pub mod sim_plan;
pub mod sim_serve;
pub mod sim_size;
pub mod sweep;
pub mod tune;
pub mod watch;

use crate::cli::{Command, SimCommand};
use crate::exit::Exit;

/// Runs the command the command line names.
pub fn run(command: Command) -> anyhow::Result<Exit> {
    match command {
        Command::Bench(args) => bench::run(*args),
        Command::Sweep(args) => sweep::run(*args),
        Command::Report(args) => report::run(*args),
        Command::Compare(args) => compare::run(args),
        Command::Watch(args) => watch::run(args),
        Command::Selftest(args) => selftest::run(args),
        Command::Merge(args) => merge::run(args),
        Command::History(args) => history::run(args),
        Command::Tune(args) => tune::run(*args),
        Command::Completions(args) => shell::completions(args.shell),
        Command::Man => shell::man(),
        Command::Sim(SimCommand::Exact(args)) => sim_serve::exact(*args),
        Command::Sim(SimCommand::Serve(args)) => sim_serve::engine(*args),
        Command::Sim(SimCommand::Plan(args)) => sim_plan::run(*args),
        Command::Sim(SimCommand::List(args)) => sim_list::run(args),
        Command::Sim(SimCommand::Size(args)) => sim_size::run(*args),
        Command::Sim(SimCommand::Calibrate(args)) => sim_calibrate::run(*args),
    }
}
