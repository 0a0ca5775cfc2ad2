//! The streaming figures (`metrics::Aggregator`, which keeps no record)
//! against the definitions of docs/metrics.md computed the plain way, over
//! every record at once, on random runs: failures, warm-up, multi-token
//! chunks, overlapping requests. And the figures do not depend on the order
//! the records come in (the recorder gets them in finishing order, roughly).

use proptest::prelude::*;
use tokenscope_core::compare::{interval, RunValues, Settings};
use tokenscope_core::metrics::{measure, GRID_US};
use tokenscope_core::record::{Chunk, ErrorKind, RequestRecord, TokenSource};

/// (sent ms, ttft ms, gap ms, chunks, tokens per chunk, failed, warm-up)
type Spec = (u64, u64, u64, u64, u32, bool, bool);

fn record(id: u64, (sent, ttft, gap, n, k, failed, warmup): Spec) -> RequestRecord {
    let sent_us = sent * 1000 + id % 997; // not all on the grid
    let chunks: Vec<Chunk> = (0..n)
        .map(|i| Chunk(sent_us + (ttft + i * gap) * 1000 + i * 13, k))
        .collect();
    let mut r = RequestRecord::sent(id, sent_us, sent_us);
    r.warmup = warmup;
    r.first_token_at_us = chunks.first().map(Chunk::at_us);
    r.done_at_us = chunks.last().map_or(sent_us + 1000, |c| c.at_us() + 500);
    r.output_tokens = chunks.iter().map(|c| c.1 as u64).sum();
    r.output_token_source = Some(TokenSource::ServerUsage);
    r.input_tokens = Some(10);
    r.finish_reason = Some("length".into());
    r.chunks = chunks;
    if failed {
        r.error_kind = Some(ErrorKind::Stream);
        r.error = Some("cut".into());
    }
    r
}

fn specs() -> impl Strategy<Value = Vec<Spec>> {
    prop::collection::vec(
        (
            0u64..5_000,
            1u64..500,
            1u64..80,
            0u64..40,
            1u32..4,
            prop::bool::weighted(0.1),
            prop::bool::weighted(0.05),
        ),
        1..120,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn streaming_figures_match_the_definitions(specs in specs(), seed in any::<u64>()) {
        let records: Vec<RequestRecord> =
            specs.iter().enumerate().map(|(i, s)| record(i as u64, *s)).collect();
        let m = measure(&records, None, None);
        let measured: Vec<&RequestRecord> = records.iter().filter(|r| !r.warmup).collect();
        let ok: Vec<&RequestRecord> = measured.iter().copied().filter(|r| r.succeeded()).collect();

        // Counts and tokens.
        prop_assert_eq!(m.counts.requests, measured.len() as u64);
        prop_assert_eq!(m.counts.succeeded, ok.len() as u64);
        prop_assert_eq!(m.counts.warmup, (records.len() - measured.len()) as u64);
        let out: u64 = ok.iter().map(|r| r.output_tokens).sum();
        prop_assert_eq!(m.tokens.output_total, out);
        if measured.is_empty() {
            return Ok(());
        }
        // Window: first send → last end.
        let start = measured.iter().map(|r| r.sent_at_us).min().unwrap();
        let end = measured.iter().map(|r| r.done_at_us).max().unwrap();
        prop_assert!((m.window.start_s - start as f64 * 1e-6).abs() < 1e-9);
        prop_assert!((m.window.end_s - end as f64 * 1e-6).abs() < 1e-9);
        // Concurrency: sweep the instants one by one.
        let (mut max, mut area) = (0u64, 0f64);
        let mut instants: Vec<u64> = measured.iter().flat_map(|r| [r.sent_at_us, r.done_at_us]).collect();
        instants.sort_unstable();
        instants.dedup();
        for w in instants.windows(2) {
            let level = measured.iter().filter(|r| r.sent_at_us <= w[0] && r.done_at_us > w[0]).count() as u64;
            max = max.max(level);
            area += level as f64 * (w[1] - w[0]) as f64;
        }
        prop_assert_eq!(m.throughput.concurrency.max, max);
        if end > start {
            let mean = area / (end - start) as f64;
            prop_assert!((m.throughput.concurrency.mean - mean).abs() < 1e-6 * mean.max(1.0));
        }
        // Steady state: first completion → last send, rounded inward to the
        // 10 ms grid; tokens whose chunk arrived inside it.
        let first_done = measured.iter().map(|r| r.done_at_us).min().unwrap();
        let last_sent = measured.iter().map(|r| r.sent_at_us).max().unwrap();
        let (from, to) = (first_done.div_ceil(GRID_US) * GRID_US, last_sent / GRID_US * GRID_US);
        match m.window.steady {
            None => prop_assert!(to <= from),
            Some(s) => {
                prop_assert!(to > from);
                let tokens: u64 = ok
                    .iter()
                    .flat_map(|r| r.chunks.iter())
                    .filter(|c| c.at_us() >= from && c.at_us() < to)
                    .map(|c| c.1 as u64)
                    .sum();
                let span = (to - from) as f64 * 1e-6;
                prop_assert!((s.output_tokens_per_s - tokens as f64 / span).abs() < 1e-6);
                prop_assert!((s.start_s - from as f64 * 1e-6).abs() < 1e-9);
            }
        }
        // TTFT: count and mean exact (HDR keeps the count and sum apart).
        let ttfts: Vec<u64> = ok.iter().filter_map(|r| r.ttft_us()).collect();
        if let Some(t) = m.latency.ttft_ms {
            prop_assert_eq!(t.count, ttfts.len() as u64);
            let mean = ttfts.iter().sum::<u64>() as f64 / ttfts.len() as f64 / 1e3;
            prop_assert!((t.mean - mean).abs() < 1e-6);
        }

        // The same records in another order give the same figures.
        let mut shuffled = records.clone();
        let mut x = seed | 1;
        for i in (1..shuffled.len()).rev() {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            shuffled.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let again = measure(&shuffled, None, None);
        prop_assert_eq!(
            serde_json::to_string(&again.window).unwrap(),
            serde_json::to_string(&m.window).unwrap()
        );
        prop_assert_eq!(again.throughput.concurrency.max, m.throughput.concurrency.max);
        prop_assert_eq!(again.latency.ttft_ms.map(|t| t.p99), m.latency.ttft_ms.map(|t| t.p99));
    }

    /// The rate's interval results.json carries (from per-10 ms token totals)
    /// is the one `compare` bootstraps from the records themselves, up to
    /// where a 10 ms slot falls among the window's 20 slices.
    #[test]
    fn the_rate_interval_from_slots_is_compares_from_records(specs in specs()) {
        let records: Vec<RequestRecord> =
            specs.iter().enumerate().map(|(i, s)| record(i as u64, *s)).collect();
        let m = measure(&records, None, None);
        let ok = records.iter().filter(|r| !r.warmup && r.succeeded()).count();
        prop_assume!(ok >= 20 && m.tokens.output_total > 0);
        let (lo, hi) = m.throughput.output_tokens_per_s_ci95.expect("an interval");
        let plain = RunValues::of(&records);
        let (plo, phi) = interval(&plain, "output_tokens_per_s", &Settings::default()).unwrap();
        let rate = m.throughput.output_tokens_per_s;
        prop_assert!(lo <= hi);
        prop_assert!((lo - plo).abs() <= 0.05 * rate && (hi - phi).abs() <= 0.05 * rate,
            "slots [{lo:.1}, {hi:.1}] vs records [{plo:.1}, {phi:.1}] at {rate:.1}");
    }
}
