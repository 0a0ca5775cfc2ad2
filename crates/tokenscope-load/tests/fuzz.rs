//! The SSE framer and every API's stream-event parser driven with mutated streams
//! from `fuzz/corpus/sse` (cargo-fuzz needs nightly, which this machine
//! cannot fetch): no panic, and no input slow enough (a second for ≤ 64 KiB; the slowest of ten million took 6 ms) to suggest super-linear
//! work. A CI-sized run here (`FUZZ_INPUTS`, default 20,000);
//! `scripts/fuzz.sh` runs ten million and prints the count.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokenscope_core::mutate::{corpus, inputs, mutate, Rng};
use tokenscope_load::http1::decode_reads;
use tokenscope_load::protocol::{Piece, Reasoner, ALL};
use tokenscope_load::sse::SseParser;

/// A stream event, and a whole answer, through every API's parser (each
/// must survive it).
fn parse_chunk(data: &str, text: &mut String) {
    for &api in ALL {
        for parser in ["auto", "none"] {
            let mut reasoner = Reasoner::new(parser.parse().expect("a parser"));
            let _ = Piece::of_event(api, data, text, &mut reasoner);
            // The same bytes as a whole answer (the pooling APIs' only kind).
            let _ = Piece::of_whole(api, data, text, &mut reasoner);
        }
    }
}

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
                parse_chunk(ev.data, &mut text);
            });
            rest = &rest[k..];
        }
        parser.finish(|ev| {
            events += 1;
            parse_chunk(ev.data, &mut text);
        });
        // The chunk parser on the raw input too.
        parse_chunk(&String::from_utf8_lossy(&input), &mut text);
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

/// Splits `input` into reads of random sizes, as a socket would hand it over.
fn random_reads<'a>(input: &'a [u8], rng: &mut Rng) -> Vec<&'a [u8]> {
    let mut reads = Vec::new();
    let mut rest = input;
    while !rest.is_empty() {
        let k = 1 + rng.below(rest.len().min(64));
        reads.push(&rest[..k]);
        rest = &rest[k..];
    }
    reads
}

#[test]
fn http_response_decoder_survives_mutated_responses() {
    let corpus = corpus(&corpus_dir("http")).expect("fuzz/corpus/http");
    let mut rng = Rng(2);
    // The seeds themselves decode whole, however they are split.
    for seed in &corpus {
        for _ in 0..50 {
            let reads = random_reads(seed, &mut rng);
            let decoded = decode_reads(&reads).expect("a seed is valid HTTP");
            assert!(decoded.is_some(), "{}", String::from_utf8_lossy(seed));
        }
    }
    let n = inputs(20_000);
    let (mut whole, mut slowest) = (0u64, Duration::ZERO);
    for _ in 0..n {
        let base = &corpus[rng.below(corpus.len())];
        let input = mutate(base, &corpus, &mut rng);
        let t = Instant::now();
        let reads = random_reads(&input, &mut rng);
        if let Ok(Some(_)) = decode_reads(&reads) {
            whole += 1;
        }
        slowest = slowest.max(t.elapsed());
    }
    eprintln!("fuzz http: {n} inputs, {whole} decoded whole, slowest input {slowest:?}");
    assert!(
        slowest < Duration::from_secs(1),
        "an input took {slowest:?}"
    );
}

/// Any payload, chunked at any sizes and read in any pieces, decodes to itself.
#[test]
fn chunked_payloads_round_trip_at_any_split() {
    let mut rng = Rng(3);
    for _ in 0..2_000 {
        let payload: Vec<u8> = (0..rng.below(3_000))
            .map(|_| rng.below(256) as u8)
            .collect();
        let mut wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        let mut rest = &payload[..];
        while !rest.is_empty() {
            let k = 1 + rng.below(rest.len().min(700));
            wire.extend_from_slice(format!("{k:x}\r\n").as_bytes());
            wire.extend_from_slice(&rest[..k]);
            wire.extend_from_slice(b"\r\n");
            rest = &rest[k..];
        }
        wire.extend_from_slice(b"0\r\n\r\n");
        let reads = random_reads(&wire, &mut rng);
        let (head, body) = decode_reads(&reads).unwrap().expect("complete");
        assert_eq!(head.status, 200);
        assert_eq!(body, payload);
    }
}

/// The parsers' state across events, not each event alone: every corpus
/// stream's events replayed in a random order, some twice and some
/// dropped, through one reasoner, one answer text and one list of tool
/// calls (as a request folds them), and the counts split over its chunks.
/// Whatever the order: no panic, the answer and reasoning bytes never pass
/// the generated bytes, the answer's text is the answer's bytes, and the
/// chunks' tokens sum to the total they were split from.
#[test]
fn parser_state_survives_events_out_of_order_and_duplicated() {
    use tokenscope_core::record::Chunk;
    use tokenscope_load::counts::split_tokens;
    use tokenscope_load::tools::merge;
    let corpus = corpus(&corpus_dir("sse")).expect("fuzz/corpus/sse");
    let n = inputs(20_000) / 4;
    let mut rng = Rng(4);
    let mut events: Vec<String> = Vec::new();
    for _ in 0..n {
        let base = &corpus[rng.below(corpus.len())];
        events.clear();
        let mut p = SseParser::new();
        p.feed(base, |ev| events.push(ev.data.to_owned()));
        p.finish(|ev| events.push(ev.data.to_owned()));
        // Shuffle, duplicate and drop: the server's order is not to be trusted.
        let mut order: Vec<usize> = (0..events.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i + 1));
        }
        order.retain(|_| rng.below(8) != 0);
        let dup: Vec<usize> = order
            .iter()
            .copied()
            .filter(|_| rng.below(4) == 0)
            .collect();
        order.extend(dup);
        for &api in ALL {
            let mut reasoner = Reasoner::new("auto".parse().expect("a parser"));
            let (mut text, mut calls, mut chunks) = (String::new(), Vec::new(), Vec::new());
            let (mut generated, mut sorted) = (0usize, 0usize);
            for (at, &i) in order.iter().enumerate() {
                let Ok(piece) = Piece::of_event(api, &events[i], &mut text, &mut reasoner) else {
                    continue;
                };
                generated += piece.text_bytes;
                sorted += piece.reasoning_bytes + piece.answer_bytes;
                piece.calls.into_iter().for_each(|c| {
                    let _ = merge(&mut calls, c);
                });
                if piece.text_bytes > 0 {
                    chunks.push(Chunk(at as u64, piece.text_bytes as u32));
                }
            }
            let rest = reasoner.finish(&mut text);
            sorted += rest.reasoning + rest.answer;
            assert!(
                sorted <= generated,
                "{sorted} sorted of {generated} generated"
            );
            assert!(
                text.len() <= generated,
                "the answer's text outgrew what came"
            );
            let running: Vec<u64> = (0..chunks.len()).map(|_| rng.below(64) as u64).collect();
            let total = rng.below(4 * chunks.len() + 1) as u64;
            split_tokens(&mut chunks, &running, total);
            let sum: u64 = chunks.iter().map(|c| c.1 as u64).sum();
            let whole = total.max(chunks.len() as u64);
            assert!(sum == whole || sum + 1 == total, "{sum} of {whole}");
        }
    }
    eprintln!("fuzz event order: {n} streams, every API");
}
