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

/// The manual: a page for the tool, then one for every command and
/// subcommand (`tokenscope-sim-plan(1)`, its synopsis `tokenscope sim
/// plan`), hidden ones aside.
pub fn man() -> anyhow::Result<Exit> {
    let mut out = Vec::new();
    let mut cmd = without_help_command(Cli::command());
    cmd.build();
    render(&cmd, "tokenscope", &mut out)?;
    crate::output::to_stdout(&String::from_utf8_lossy(&out));
    Ok(Exit::Success)
}

/// No `help` command at any level: it would be listed with no page.
fn without_help_command(cmd: clap::Command) -> clap::Command {
    cmd.disable_help_subcommand(true)
        .mut_subcommands(without_help_command)
}

/// `cmd`'s page as `words` (`tokenscope sim plan`), then its commands'.
fn render(cmd: &clap::Command, words: &str, out: &mut Vec<u8>) -> std::io::Result<()> {
    let page = cmd
        .clone()
        .name(words.replace(' ', "-"))
        .bin_name(words.to_string());
    clap_mangen::Man::new(page).render(out)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        render(sub, &format!("{words} {}", sub.get_name()), out)?;
    }
    Ok(())
}
