//! Findings on what the answers said, apart from how fast they came: the
//! structured outputs that were not the format asked for, the tool calls
//! whose arguments were broken, the answers that should have called a tool
//! and did not. Each states its count, interval and most frequent reason.

use serde_json::json;
use tokenscope_core::metrics::Measured;
use tokenscope_core::results::{Finding, FormatFailure};

/// Every finding the answers support.
pub fn findings(m: &Measured, config: &serde_json::Value) -> Vec<Finding> {
    [
        invalid_structured_output(m, config),
        invalid_tool_calls(m),
        missing_tool_calls(m, config),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// `; most often ×N REASON`, when there is a reason.
fn worst(failures: &[FormatFailure]) -> String {
    failures
        .first()
        .map(|f| format!("; most often ×{} {}", f.count, f.reason))
        .unwrap_or_default()
}

/// `N % valid, 95 % interval A–B %`.
fn share(share: f64, ci: (f64, f64)) -> String {
    format!(
        "{:.1} % valid, 95 % interval {:.1}–{:.1} %",
        share * 100.0,
        ci.0 * 100.0,
        ci.1 * 100.0
    )
}

/// A finding on a share of items that were not valid: `bad` of `checked`
/// `what` (`answers were not valid json`), with the share's interval and
/// the most frequent reason.
fn invalid_share(
    rule: &str,
    (checked, valid, what): (u64, u64, String),
    (valid_share, ci): (f64, (f64, f64)),
    failures: &[FormatFailure],
) -> Finding {
    Finding {
        rule: rule.into(),
        severity: "warning".into(),
        message: format!(
            "{} of {checked} {what} ({}){}",
            checked - valid,
            share(valid_share, ci),
            worst(failures)
        ),
        evidence: [
            ("checked".to_string(), json!(checked)),
            ("valid".to_string(), json!(valid)),
            ("valid_share_ci95".to_string(), json!(ci)),
        ]
        .into_iter()
        .collect(),
    }
}

/// `--response-format`: a finding when any answer was not the format asked
/// for, with its count, interval and most frequent reason.
fn invalid_structured_output(m: &Measured, config: &serde_json::Value) -> Option<Finding> {
    let s = m
        .structured_output
        .as_ref()
        .filter(|s| s.valid < s.checked)?;
    let label = config["response_format"]
        .as_str()
        .unwrap_or("the asked format");
    Some(invalid_share(
        "invalid_structured_output",
        (
            s.checked,
            s.valid,
            format!("answers were not valid {label}"),
        ),
        (s.valid_share, s.valid_share_ci95),
        &s.failures,
    ))
}

/// `--tools`: a finding when any call's arguments were not valid.
fn invalid_tool_calls(m: &Measured) -> Option<Finding> {
    let t = m.tool_calls.as_ref().filter(|t| t.valid < t.calls)?;
    Some(invalid_share(
        "invalid_tool_calls",
        (t.calls, t.valid, "tool calls had invalid arguments".into()),
        (t.valid_share, t.valid_share_ci95),
        &t.failures,
    ))
}

/// `--tool-choice required` (or a named tool): a finding when answers made
/// no call although one was required.
fn missing_tool_calls(m: &Measured, config: &serde_json::Value) -> Option<Finding> {
    let choice = config["tools"]["choice"].as_str()?;
    if matches!(choice, "auto" | "none") {
        return None;
    }
    let t = m
        .tool_calls
        .as_ref()
        .filter(|t| t.requests_with_calls < t.requests)?;
    let missing = t.requests - t.requests_with_calls;
    Some(Finding {
        rule: "tool_calls_missing".into(),
        severity: "warning".into(),
        message: format!(
            "{missing} of {} answers made no tool call although --tool-choice {choice} requires one",
            t.requests
        ),
        evidence: [
            ("requests".to_string(), json!(t.requests)),
            ("without_call".to_string(), json!(missing)),
        ]
        .into_iter()
        .collect(),
    })
}
