//! Exit codes (documented in the README and `--help`).

use std::fmt;
use std::process::ExitCode;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// The run finished (failed requests may be among its results).
    Success = 0,
    /// Anything else: I/O, an internal error.
    Error = 1,
    /// A bad flag or value (clap also uses 2).
    Usage = 2,
    /// The target could not be reached or answers no known API.
    Unreachable = 3,
    /// Every measured request failed.
    AllFailed = 4,
    /// `--slo` given and not met.
    SloNotMet = 5,
    /// `compare --fail-on-regression`: a metric got significantly worse.
    Regression = 6,
    /// `--slo` given but a statistic it names rests on too few requests to
    /// judge (a p99 of 32 requests): neither met nor not met.
    SloNotJudged = 7,
    /// The run's output could not be written (a full disk): the run stopped;
    /// what was kept is said on stderr and in results.json when it could be written.
    OutputFailed = 8,
    /// Interrupted by Ctrl-C; the run directory is complete and marked partial.
    Interrupted = 130,
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "exit code {}", *self as u8)
    }
}

impl std::error::Error for Exit {}

impl Exit {
    /// A bad-usage error whose message names the flag; `main` prints the message and exits 2.
    pub fn usage(msg: String) -> anyhow::Error {
        anyhow::Error::new(Exit::Usage).context(msg)
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e as u8)
    }
}
