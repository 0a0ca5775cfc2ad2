//! Every doubt a command raises about a measurement or its output, as one
//! type. Each warning says what is in doubt and what to do with the flags
//! at hand. They are printed from one place ([`Warning::say`])
//! and the ones about a run's set-up are kept in its `results.json`
//! (`warnings`), so a reader of the file sees what the terminal said.

use tokenscope_core::results::RunWarning;
use tokenscope_core::slo::thousands;

/// A doubt, with what it rests on.
#[derive(Debug, Clone, PartialEq)]
pub enum Warning {
    /// `--slo`'s objective needs more requests than the run sends to be
    /// judged on its own (a p99 needs ≈ 1,000).
    SloSampleSize {
        /// `ttft_p99`, …
        objective: String,
        needed: u64,
        /// Requests the run (or a series' smallest point) sends.
        sent: u64,
    },
    /// `report.html` could not be written; the run itself is whole.
    NoReportHtml { why: String },
    /// The run could not be recorded in the results history.
    HistoryNotRecorded { what: String },
    /// The run's `config.toml` could not be written.
    ConfigNotStored { why: String },
    /// `sim calibrate` fitted a run with too few measured requests.
    CalibrationFewRequests {
        dir: String,
        measured: u64,
        fewest: u64,
    },
    /// A `sim calibrate` run with failed requests: they are replayed as if
    /// served, so the fit is to a load the server did not carry whole.
    CalibrationFailedRequests {
        dir: String,
        failed: u64,
        requests: u64,
        top: String,
    },
    /// A `sim calibrate` fit's own doubt (a factor at its bound, a poor fit).
    CalibrationFit { why: String },
}

impl Warning {
    /// Its kind, as `results.json` names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Warning::SloSampleSize { .. } => "slo_sample_size",
            Warning::NoReportHtml { .. } => "no_report_html",
            Warning::HistoryNotRecorded { .. } => "history_not_recorded",
            Warning::ConfigNotStored { .. } => "config_not_stored",
            Warning::CalibrationFewRequests { .. } => "calibration_few_requests",
            Warning::CalibrationFailedRequests { .. } => "calibration_failed_requests",
            Warning::CalibrationFit { .. } => "calibration_fit",
        }
    }

    /// What is in doubt, and what to do about it with the flags at hand.
    pub fn message(&self) -> String {
        match self {
            Warning::SloSampleSize {
                objective,
                needed,
                sent,
            } => format!(
                "--slo {objective} needs ≈ {} requests to be judged on its own; {sent} will be sent (pass --requests {needed}; fewer are judged only where the data already decides)",
                thousands(*needed)
            ),
            Warning::NoReportHtml { why } => format!("no report.html: {why}"),
            Warning::HistoryNotRecorded { what } => format!("history {what}"),
            Warning::ConfigNotStored { why } => {
                format!("the run's config.toml could not be written: {why}")
            }
            Warning::CalibrationFewRequests {
                dir,
                measured,
                fewest,
            } => format!(
                "{dir} has {measured} measured requests; the fit matches TTFT p90, which with fewer than {fewest} rests on one or two of them, so one stall moves the whole fit"
            ),
            Warning::CalibrationFailedRequests {
                dir,
                failed,
                requests,
                top,
            } => format!(
                "{dir}: {failed} of its {requests} requests failed (most often: {top}); the simulator replays them as if served, so the fit is to a load the server did not carry: fit to a run without errors (less load, or a longer --timeout)"
            ),
            Warning::CalibrationFit { why } => why.clone(),
        }
    }

    /// Prints it on stderr under `who` (`tokenscope`, `tokenscope sweep`),
    /// unless `quiet`.
    pub fn say_as(&self, who: &str, quiet: bool) {
        if !quiet {
            eprintln!("{who}: warning: {}", self.message());
        }
    }

    /// Prints it on stderr, unless `quiet`.
    pub fn say(&self, quiet: bool) {
        self.say_as("tokenscope", quiet)
    }

    /// As `results.json` keeps it.
    pub fn record(&self) -> RunWarning {
        RunWarning {
            kind: self.kind().into(),
            message: self.message(),
        }
    }
}

/// The SLO's sample-size doubt for a run of `sent` requests, if it has one.
pub fn slo_sample_size(slo: &tokenscope_core::slo::Slo, sent: u64) -> Option<Warning> {
    let (needed, objective) = slo.requests_needed()?;
    (sent < needed).then_some(Warning::SloSampleSize {
        objective,
        needed,
        sent,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_few_requests_for_the_slo_are_said_with_the_count_to_send() {
        let slo = tokenscope_core::slo::Slo::parse("ttft_p50=1s,e2e_p99=10s").unwrap();
        let w = slo_sample_size(&slo, 200).expect("a p99 from 200 requests");
        let said = w.message();
        assert!(said.contains("e2e_p99 needs ≈ 1,000 requests"), "{said}");
        assert!(
            said.contains("200 will be sent") && said.contains("--requests 1000"),
            "{said}"
        );
        assert_eq!(w.kind(), "slo_sample_size");
        assert!(slo_sample_size(&slo, 1000).is_none());
    }

    #[test]
    fn a_warning_is_kept_as_it_is_said() {
        let w = Warning::NoReportHtml {
            why: "disk full".into(),
        };
        let kept = w.record();
        assert_eq!(kept.kind, "no_report_html");
        assert_eq!(kept.message, w.message());
        assert!(kept.message.contains("disk full"));
    }
}
