//! `--response-format`: the share of answers that were what was asked
//! for, as lines every format shows the same way.

use tokenscope_core::results::RunResults;

/// One line each; none when no answer was checked.
pub fn lines(r: &RunResults) -> Vec<String> {
    let Some(s) = &r.structured_output else {
        return Vec::new();
    };
    let (lo, hi) = s.valid_share_ci95;
    let mut out = vec![format!(
        "valid {:.1} % ({} of {} answers; 95 % interval {:.1}–{:.1} %)",
        s.valid_share * 100.0,
        s.valid,
        s.checked,
        lo * 100.0,
        hi * 100.0
    )];
    out.extend(
        s.failures
            .iter()
            .take(3)
            .map(|f| format!("×{} {}", f.count, f.reason)),
    );
    out
}

/// The format asked for, from the run's settings (`schema:answer`).
pub fn label(r: &RunResults) -> String {
    r.config["response_format"]
        .as_str()
        .unwrap_or("—")
        .to_string()
}
