//! A LoRA run's figures per adapter (`--lora`), as rows every format
//! shows the same way: the terminal, Markdown and HTML summaries.

use tokenscope_core::results::RunResults;
use tokenscope_core::stats::Summary;

/// The columns of [`rows`].
pub const HEADER: [&str; 8] = [
    "adapter",
    "requests",
    "failed",
    "TTFT p50 ms",
    "TTFT p99 ms",
    "TPOT p50 ms",
    "E2E p99 ms",
    "output tok/s",
];

/// One row per adapter, in name order; none when the run named none.
pub fn rows(r: &RunResults) -> Vec<[String; 8]> {
    group_rows(&r.adapters)
}

/// The columns of [`class_rows`]: a class's name, the adapter columns, its SLO.
pub fn class_header() -> Vec<String> {
    let mut header = HEADER.map(str::to_string).to_vec();
    header[0] = "class".into();
    header.push("SLO".into());
    header
}

/// One row per class of traffic (`--class`), its SLO's verdict last.
pub fn class_rows(r: &RunResults) -> Vec<[String; 9]> {
    group_rows(&r.classes)
        .into_iter()
        .zip(r.classes.values())
        .map(|(row, c)| {
            let verdict = c.slo.as_ref().map_or("—".to_string(), |s| {
                s.verdict
                    .map_or(if s.met { "met" } else { "not met" }.to_string(), |v| {
                        v.words().to_string()
                    })
            });
            let [a, b, c2, d, e, f, g, h] = row;
            [a, b, c2, d, e, f, g, h, verdict]
        })
        .collect()
}

/// A group's figures as a row (adapters', classes').
fn group_rows(
    groups: &std::collections::BTreeMap<String, tokenscope_core::results::AdapterFigures>,
) -> Vec<[String; 8]> {
    let ms = |s: &Option<Summary>, p99: bool| {
        s.map_or("—".to_string(), |s| {
            format!("{:.1}", if p99 { s.p99 } else { s.p50 })
        })
    };
    groups
        .iter()
        .map(|(name, a)| {
            [
                name.clone(),
                a.requests.to_string(),
                a.failed.to_string(),
                ms(&a.ttft_ms, false),
                ms(&a.ttft_ms, true),
                ms(&a.tpot_ms, false),
                ms(&a.e2e_ms, true),
                format!("{:.1}", a.output_tokens_per_s),
            ]
        })
        .collect()
}

/// How the requests were spread, from the run's settings (`round-robin`).
pub fn assignment(r: &RunResults) -> String {
    r.config["lora"]["assignment"]
        .as_str()
        .unwrap_or("—")
        .to_string()
}
