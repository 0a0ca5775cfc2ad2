//! How long a front end's tokeniser takes per prompt token, on one core:
//! the simulator's serial front-end cost (docs/simulator.md) rests on it.
//!
//!     cargo run --release -p tokenscope-workload --example tokenize_cost
use std::time::Instant;

fn main() {
    // English-like text: words of varied length, punctuation, numbers.
    let words = [
        "the",
        "server",
        "streams",
        "tokens",
        "to",
        "each",
        "client,",
        "and",
        "measures",
        "latency",
        "of",
        "1024",
        "requests",
        "while",
        "prefill",
        "computes",
        "attention.",
        "Benchmarks",
        "report",
        "percentiles;",
        "throughput",
        "grows",
        "with",
        "batch",
        "size",
    ];
    let mut text = String::new();
    let mut x: u64 = 7;
    while text.len() < 400_000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        text.push_str(words[(x >> 33) as usize % words.len()]);
        text.push(' ');
    }
    let _ = tokenscope_workload::tokenizer::count_tokens("warm up");
    for prompt_chars in [1_000usize, 4_000, 20_000] {
        let prompts: Vec<&str> = (0..200)
            .map(|i| &text[i * 1000..i * 1000 + prompt_chars])
            .collect();
        let start = Instant::now();
        let tokens: u64 = prompts
            .iter()
            .map(|p| tokenscope_workload::tokenizer::count_tokens(p).unwrap_or(0))
            .sum();
        let s = start.elapsed().as_secs_f64();
        println!(
            "{prompt_chars:>6}-char prompts: {:.0} tokens each, {:.2} µs per token, {:.3} ms per prompt",
            tokens as f64 / prompts.len() as f64,
            s / tokens as f64 * 1e6,
            s / prompts.len() as f64 * 1e3
        );
    }
}
