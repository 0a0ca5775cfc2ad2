//! The workload's fidelity as table rows — what was asked, what was
//! delivered — shared by the HTML report and Markdown.

use tokenscope_core::results::RunResults;
use tokenscope_core::stats::Summary;

/// `(what, asked, delivered)` rows; empty when the run has none of it.
pub fn rows(r: &RunResults) -> Vec<[String; 3]> {
    let w = &r.workload;
    let dist = |s: &Option<Summary>| {
        s.as_ref().map_or("—".to_string(), |s| {
            format!(
                "mean {:.0}, p50 {:.0}, p99 {:.0} (n = {})",
                s.mean, s.p50, s.p99, s.count
            )
        })
    };
    let mut rows = Vec::new();
    if w.input_tokens_asked.is_some() {
        rows.push([
            "input tokens (built → server-counted)".into(),
            dist(&w.input_tokens_asked),
            dist(&w.input_tokens_served),
        ]);
    }
    if w.output_tokens_delivered.is_some() {
        rows.push([
            "output tokens (max_tokens → written)".into(),
            dist(&w.output_tokens_asked),
            dist(&w.output_tokens_delivered),
        ]);
        rows.push([
            "stopped before max_tokens".into(),
            String::new(),
            w.early_stops.to_string(),
        ]);
    }
    if let Some(a) = &w.arrivals {
        let disp = |d: Option<f64>| d.map_or("—".to_string(), |d| format!("{d:.2}"));
        rows.push([
            "arrivals per s (intended → sent)".into(),
            format!("{:.3}", a.intended_per_s),
            format!("{:.3}", a.sent_per_s),
        ]);
        rows.push([
            "gap CV² (1 Poisson, 0 constant)".into(),
            format!("{:.2}", a.intended_gap_cv2),
            format!("{:.2}", a.sent_gap_cv2),
        ]);
        rows.push([
            "index of dispersion, 1 s windows".into(),
            disp(a.intended_dispersion_1s),
            disp(a.sent_dispersion_1s),
        ]);
    }
    if let Some(c) = &r.tokens.prefix_cache {
        rows.push([
            "prompt tokens from the prefix cache".into(),
            String::new(),
            format!("{:.1} % ({} requests said)", c.hit_rate * 100.0, c.requests),
        ]);
    }
    rows
}
