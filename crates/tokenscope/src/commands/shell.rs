//! `tokenscope completions SHELL` and `tokenscope man`: the command line
//! described for a shell's completion and for `man`, from the same
//! definitions clap parses with, so they cannot fall behind the flags.

use crate::cli::Cli;
use crate::exit::Exit;
use clap::CommandFactory;

/// The completion script for `shell`, on stdout.
pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<Exit> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "tokenscope", &mut out);
    crate::output::to_stdout(&String::from_utf8_lossy(&out));
    Ok(Exit::Success)
}

/// The manual page: the top level, then each command's page after it.
pub fn man() -> anyhow::Result<Exit> {
    let mut out = Vec::new();
    let cmd = Cli::command();
    clap_mangen::Man::new(cmd.clone()).render(&mut out)?;
    for sub in cmd.get_subcommands() {
        let name = format!("tokenscope-{}", sub.get_name());
        let page = sub.clone().name(name);
        clap_mangen::Man::new(page).render(&mut out)?;
    }
    crate::output::to_stdout(&String::from_utf8_lossy(&out));
    Ok(Exit::Success)
}
