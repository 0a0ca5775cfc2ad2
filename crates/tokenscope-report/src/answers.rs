//! What the answers said, as titled sections every format shows the same
//! way: the structured outputs that were the format asked for
//! (`--response-format`), the tool calls and their valid arguments
//! (`--tools`), and the answers graded right (`--grade`) — each share with
//! its 95 % interval and count, never a bare percentage.

use tokenscope_core::consistency::AcrossLoads;
use tokenscope_core::results::{FormatFailure, RunResults};

/// `(title, lines)` per section the run has; none when it asked for none.
pub fn sections(r: &RunResults) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    if let Some(s) = &r.structured_output {
        let label = r.config["response_format"].as_str().unwrap_or("—");
        let mut lines = vec![share_line(
            "valid",
            (s.valid, s.checked, "answers"),
            s.valid_share,
            s.valid_share_ci95,
        )];
        lines.extend(reasons(&s.failures));
        out.push((format!("Structured output ({label})"), lines));
    }
    if let Some(t) = &r.tool_calls {
        let choice = r.config["tools"]["choice"].as_str().unwrap_or("auto");
        let mut lines = vec![format!(
            "{} calls in {} answers ({:.2} a request; {} answers made none)",
            t.calls,
            t.requests,
            t.calls_per_request,
            t.requests - t.requests_with_calls
        )];
        if t.calls > 0 {
            let counts = (t.valid, t.calls, "calls");
            lines.push(share_line(
                "arguments valid",
                counts,
                t.valid_share,
                t.valid_share_ci95,
            ));
        }
        if let Some(s) = &t.time_to_first_call_ms {
            lines.push(format!(
                "time to first tool-call token p50 {:.2} ms, p99 {:.2} ms",
                s.p50, s.p99
            ));
        }
        lines.extend(reasons(&t.failures));
        out.push((format!("Tool calls (--tool-choice {choice})"), lines));
    }
    if let Some(s) = &r.sessions {
        let mut lines = vec![format!(
            "{} sessions, {:.2} requests each ({:.2} after tool results)",
            s.sessions, s.requests_per_session, s.tool_rounds_per_session
        )];
        if let Some(e) = &s.e2e_ms {
            lines.push(format!(
                "session end to end p50 {:.1} ms, p99 {:.1} ms",
                e.p50, e.p99
            ));
        }
        lines.push(format!(
            "time in the server {:.1} %, in tools {:.1} %, elsewhere (think time, the client) {:.1} %",
            s.server_share * 100.0,
            s.tool_share * 100.0,
            s.other_share * 100.0
        ));
        out.push(("Sessions".to_string(), lines));
    }
    if let Some(w) = &r.workflows {
        out.push(("Workflows".to_string(), workflow_lines(r, w)));
    }
    if let Some(sp) = &r.speech {
        out.push(("Speech".to_string(), speech_lines(r, sp)));
    }
    if let Some(a) = &r.accuracy {
        let counts = (a.correct, a.graded, "answers");
        let line = share_line("right", counts, a.share, a.share_ci95);
        out.push((format!("Accuracy (--grade {})", a.rule), vec![line]));
    }
    out
}

/// A run's speech figures: RTFx and its inverse, the transcript's pace,
/// text to speech's output, a realtime session's lag behind the speaker.
fn speech_lines(r: &RunResults, s: &tokenscope_core::results::SpeechFigures) -> Vec<String> {
    let mut lines = Vec::new();
    let audio = match (s.audio_in_s > 0.0, s.audio_out_s > 0.0) {
        (true, false) => format!("{:.1} s of audio transcribed", s.audio_in_s),
        (false, true) => format!("{:.1} s of audio produced", s.audio_out_s),
        _ => format!(
            "{:.1} s of audio in, {:.1} s out",
            s.audio_in_s, s.audio_out_s
        ),
    };
    lines.push(format!("{} requests, {audio}", s.requests));
    if let Some(x) = &s.rtfx {
        lines.push(format!(
            "RTFx (audio seconds per second, send to end) p50 {:.2}, slowest request {:.2}; real-time factor at the median {:.3}{}",
            x.p50,
            x.min.max(0.0),
            s.rtf_p50.unwrap_or(f64::NAN),
            s.run_rtfx.map(|v| format!("; over the run {v:.2} audio seconds a second")).unwrap_or_default()
        ));
    }
    if let Some(w) = s.words_per_s {
        lines.push(format!(
            "transcript {w:.1} words a second (first delta to end)"
        ));
    }
    if let Some(l) = &s.lag_ms {
        let pace = match r.config["audio_pace"].as_str() {
            Some("fast") => "sent as fast as possible: the lag is not the speaker's",
            _ => "sent at the speaker's pace",
        };
        lines.push(format!(
            "realtime lag behind the audio p50 {:.0} ms, p90 {:.0} ms, p99 {:.0} ms, max {:.0} ms over {} deltas of {} sessions ({pace})",
            l.p50, l.p90, l.p99, l.max, l.count, s.sessions
        ));
    }
    if let Some(f) = &s.final_to_done_ms {
        lines.push(format!(
            "last audio to transcription.done p50 {:.0} ms, p99 {:.0} ms",
            f.p50, f.p99
        ));
    }
    if s.sessions_judged > 0 {
        lines.push(format!(
            "lag grew along {} of {} sessions judged (≥ 8 deltas each)",
            s.sessions_lag_grew, s.sessions_judged
        ));
    }
    lines
}

/// A run's workflows: how many, their makespan, their critical paths'
/// shares, their calls in flight, then each step's TTFT, TPOT and E2E.
fn workflow_lines(r: &RunResults, w: &tokenscope_core::results::WorkflowFigures) -> Vec<String> {
    let mut lines = vec![format!(
        "{} workflows ({} complete), {:.2} calls each; at most {} calls of one in flight (mean peak {:.2})",
        w.workflows, w.complete, w.calls_per_workflow, w.peak_in_flight_max, w.peak_in_flight_mean
    )];
    if let Some(m) = &w.makespan_ms {
        lines.push(format!(
            "makespan p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms (complete workflows, arrival to last step)",
            m.p50, m.p90, m.p99
        ));
    }
    lines.push(format!(
        "critical path: model calls {:.1} %, tools {:.1} %, the rest (ready, not yet sent; a trace's gaps) {:.1} %; within them, joins waiting for their slowest branch {:.1} %",
        w.path_llm_share * 100.0,
        w.path_tool_share * 100.0,
        w.path_other_share * 100.0,
        w.path_join_wait_share * 100.0
    ));
    let ms = |s: &Option<tokenscope_core::stats::Summary>| {
        s.as_ref()
            .map_or("—".to_string(), |s| format!("{:.1}", s.p50))
    };
    for (name, f) in &r.steps {
        lines.push(format!(
            "step {name}: {} calls ({} failed), TTFT p50 {} ms, TPOT p50 {} ms, E2E p50 {} ms",
            f.requests,
            f.failed,
            ms(&f.ttft_ms),
            ms(&f.tpot_ms),
            ms(&f.e2e_ms)
        ));
    }
    lines
}

/// `LABEL 75.0 % (k of n WHAT; 95 % interval a–b %)`.
fn share_line(label: &str, (k, n, what): (u64, u64, &str), share: f64, ci: (f64, f64)) -> String {
    format!(
        "{label} {:.1} % ({k} of {n} {what}; 95 % interval {:.1}–{:.1} %)",
        share * 100.0,
        ci.0 * 100.0,
        ci.1 * 100.0
    )
}

/// The three most frequent reasons, `×N reason`.
fn reasons(failures: &[FormatFailure]) -> impl Iterator<Item = String> + '_ {
    failures
        .iter()
        .take(3)
        .map(|f| format!("×{} {}", f.count, f.reason))
}

/// A series' answers across its loads: a heading, a line per point (the
/// share identical to the baseline's, the accuracy), then the findings.
pub fn across_loads(a: &AcrossLoads) -> Vec<String> {
    let mut out = vec![format!(
        "\nAnswers across loads (compared with {})",
        a.baseline
    )];
    for p in &a.points {
        let mut parts = Vec::new();
        if let Some(c) = &p.consistency {
            let at = c
                .first_divergence_token
                .map(|s| format!(", first difference at token p50 {:.0}", s.p50))
                .unwrap_or_default();
            parts.push(format!(
                "identical {:.1} % ({} of {}; 95 % interval {:.1}–{:.1} %{at})",
                c.share * 100.0,
                c.identical,
                c.compared,
                c.share_ci95.0 * 100.0,
                c.share_ci95.1 * 100.0
            ));
        }
        if let Some(acc) = &p.accuracy {
            let counts = (acc.correct, acc.graded, "graded");
            parts.push(share_line("right", counts, acc.share, acc.share_ci95));
        }
        out.push(format!("  {:<16} {}", p.point, parts.join(" · ")));
    }
    out.extend(
        a.findings
            .iter()
            .map(|f| format!("  [{}] {}", f.severity, f.message)),
    );
    out
}

/// A sweep's speculative decoding, a line per load (as the servers counted
/// it), then its finding when acceptance fell with load.
pub fn spec_across_loads(a: &tokenscope_core::spec_decode::SpecAcrossLoads) -> Vec<String> {
    let mut out = vec!["\nSpeculative decoding across loads (the server's counters)".to_string()];
    for p in &a.points {
        let length = p
            .mean_accepted_length
            .map_or(String::new(), |l| format!(" · {l:.2} tokens a step"));
        let drafted = p
            .draft_tokens
            .map_or(String::new(), |n| format!(" ({n:.0} draft tokens)"));
        out.push(format!(
            "  {:<16} acceptance {:.1} %{drafted}{length}",
            p.point,
            p.acceptance_rate * 100.0
        ));
    }
    out.extend(
        a.findings
            .iter()
            .map(|f| format!("  [{}] {}", f.severity, f.message)),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenscope_core::spec_decode::{across, SpecAtLoad};

    #[test]
    fn a_sweeps_speculation_is_a_line_a_load_and_its_warning() {
        let at = |load: f64, rate: f64| SpecAtLoad {
            point: format!("c{load}"),
            load,
            acceptance_rate: rate,
            mean_accepted_length: Some(1.0 + 4.0 * rate),
            draft_tokens: Some(40_000.0),
        };
        let a = across(vec![at(1.0, 0.72), at(32.0, 0.55)]).unwrap();
        let lines = spec_across_loads(&a);
        assert!(
            lines[1].contains("c1")
                && lines[1].contains("acceptance 72.0 % (40000 draft tokens) · 3.88 tokens a step"),
            "{lines:?}"
        );
        assert!(
            lines[3].starts_with("  [warning] speculative decoding's acceptance fell with load"),
            "{lines:?}"
        );
    }
}
