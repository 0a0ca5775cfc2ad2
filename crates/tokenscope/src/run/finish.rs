//! Phase 5 of a run, and the end of every command that makes one: the run
//! directory's `results.json`, then `report.html` ([`write_run`]); then the
//! summary on the terminal, the results history and the exit code
//! ([`conclude`]). A sweep's points stop after `write_run`: the series is
//! concluded as a whole.

use crate::cli::OutputArgs;
use crate::exit::Exit;
use crate::output::to_stdout;
use std::path::{Path, PathBuf};
use tokenscope_core::metrics::Aggregator;
use tokenscope_core::record::ErrorKind;
use tokenscope_core::results::RunResults;
use tokenscope_core::slo::Verdict;
use tokenscope_history::Kind;

/// Writes `results.json` (a failure to write it is the run's error unless
/// its output had already failed, when the summary is all that is left),
/// then `report.html` from the figures at hand.
pub fn write_run(
    dir: &Path,
    results: RunResults,
    figures: Aggregator,
    quiet: bool,
) -> anyhow::Result<(RunResults, PathBuf)> {
    if let Err(e) = crate::run_dir::write_results(dir, &results) {
        if results.output_error.is_none() {
            return Err(anyhow::Error::new(Exit::OutputFailed).context(format!("{e:#}")));
        }
        eprintln!("tokenscope: error: {e:#}: results.json is missing; the summary below is all there is of the figures");
    }
    crate::run_dir::write_html_of(dir, results.clone(), figures, quiet);
    Ok((results, dir.to_path_buf()))
}

/// The end of a command that made one run: its summary (or `--json`
/// document), its entry in the history, and its exit code.
pub fn conclude(
    kind: Kind,
    results: &RunResults,
    dir: &Path,
    output: &OutputArgs,
) -> anyhow::Result<Exit> {
    print(results, output, dir)?;
    crate::recording::record_run(kind, results, dir, &output.history, output.json);
    Ok(exit_code(results))
}

/// The summary on stdout, or with `--json` the results document alone.
pub fn print(results: &RunResults, output: &OutputArgs, dir: &Path) -> anyhow::Result<()> {
    if output.json {
        to_stdout(&(serde_json::to_string_pretty(results)? + "\n"));
    } else {
        to_stdout(&tokenscope_report::terminal::summary(results));
        to_stdout(&format!("\nrun directory: {}\n", dir.display()));
    }
    if internal_failure(results) {
        eprintln!(
            "tokenscope: error: tokenscope itself failed during the run (see the `internal` errors in requests.jsonl and the diagnosis); the figures may be incomplete — please report it"
        );
    }
    if results.counts.requests == 0 && !results.partial {
        eprintln!(
            "tokenscope: error: no request was measured ({} warm-up, window {:.2} s): nothing to conclude; send more (--requests, --duration) or fewer --warmup",
            results.counts.warmup, results.window.duration_s
        );
    }
    Ok(())
}

/// tokenscope itself failed during the run (a panic caught in a request
/// task, or the arrival schedule broke off).
fn internal_failure(r: &RunResults) -> bool {
    r.counts
        .errors
        .contains_key(&ErrorKind::Internal.to_string())
        || r.diagnosis.iter().any(|f| f.rule == "internal_error")
}

/// A `--stop-on` rule stopped the run before any request ended: every one
/// was cancelled by the rule, none failed (a saturated server's first
/// answers may take longer than the rule needs to see its queue grow).
fn stopped_before_any(r: &RunResults) -> bool {
    let cancelled = ErrorKind::Cancelled.to_string();
    r.stopped.is_some() && r.counts.errors.keys().all(|k| k == &cancelled)
}

pub fn exit_code(r: &RunResults) -> Exit {
    let c = &r.counts;
    if r.output_error.is_some() {
        Exit::OutputFailed
    } else if internal_failure(r) {
        Exit::Error // a bug of ours: see `print`
    } else if r.partial {
        Exit::Interrupted
    } else if c.requests == 0 {
        Exit::Error // nothing measured: see `print`
    } else if c.failed > 0 && c.succeeded == 0 && !stopped_before_any(r) {
        // (Requests whose users all left, `--cancel 1`, failed nothing.)
        let all_connect = c
            .errors
            .keys()
            .all(|k| k == &ErrorKind::Connect.to_string());
        if all_connect {
            Exit::Unreachable
        } else {
            Exit::AllFailed
        }
    } else if r.slo.is_some() && r.stopped.as_ref().is_some_and(|t| t.rule == "saturation") {
        // Its queue grew: the load cannot hold any latency in steady state,
        // whatever the requests that finished before the stop read.
        Exit::SloNotMet
    } else if let Some(slo) = &r.slo {
        match slo.verdict {
            Some(Verdict::NotEnoughData) => Exit::SloNotJudged,
            _ if !slo.met => Exit::SloNotMet,
            _ => Exit::Success,
        }
    } else {
        Exit::Success
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_written_whole_and_the_reserve_is_given_back() {
        let dir = std::env::temp_dir().join(format!("ts-finish-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        crate::run_dir::reserve_output(&dir).unwrap();
        let results = crate::run::collect::tests::empty_results();
        let figures = Aggregator::new(None, None);
        let (kept, at) = write_run(&dir, results.clone(), figures, true).unwrap();
        assert_eq!(at, dir);
        let back: RunResults =
            serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap())
                .unwrap();
        assert_eq!(back.counts.requests, kept.counts.requests);
        assert_eq!(back.target.model, "m");
        assert!(dir.join("report.html").exists());
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with('.') || n.ends_with(".tmp"))
            .collect();
        assert!(
            left.is_empty(),
            "the reserve and the temporary file are gone: {left:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_exit_code_says_what_the_run_came_to() {
        let mut r = crate::run::collect::tests::empty_results();
        assert_eq!(exit_code(&r), Exit::Error, "nothing measured");
        r.counts.requests = 3;
        r.counts.failed = 3;
        r.counts.errors.insert(ErrorKind::Connect.to_string(), 3);
        assert_eq!(exit_code(&r), Exit::Unreachable);
        r.counts.errors.insert(ErrorKind::Timeout.to_string(), 1);
        assert_eq!(exit_code(&r), Exit::AllFailed);
        r.counts.succeeded = 1;
        assert_eq!(exit_code(&r), Exit::Success);
        r.partial = true;
        assert_eq!(exit_code(&r), Exit::Interrupted);
        r.output_error = Some("disk full".into());
        assert_eq!(exit_code(&r), Exit::OutputFailed);
    }
}
