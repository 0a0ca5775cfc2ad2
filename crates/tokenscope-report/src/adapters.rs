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
    let ms = |s: &Option<Summary>, p99: bool| {
        s.map_or("—".to_string(), |s| {
            format!("{:.1}", if p99 { s.p99 } else { s.p50 })
        })
    };
    r.adapters
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
