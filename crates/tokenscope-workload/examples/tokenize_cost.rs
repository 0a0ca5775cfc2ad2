//! How long a front end's tokeniser takes per prompt token, on one core:
//! the simulator's serial front-end cost (docs/simulator.md) rests on it.
//! The prompts are the ones `bench --input-tokens N` sends.
//!
//!     cargo run --release -p tokenscope-workload --example tokenize_cost
use std::time::Instant;
use tokenscope_workload::tokenizer::count_tokens;
use tokenscope_workload::workload::{LengthSpec, Workload};

fn main() {
    let _ = count_tokens("warm up");
    for tokens in [200u64, 1_000, 5_000] {
        let workload = Workload::new(LengthSpec::Fixed(tokens), None, 7);
        let prompts: Vec<String> = (0..200).map(|id| workload.request(id).prompt).collect();
        let start = Instant::now();
        let counted: u64 = prompts.iter().map(|p| count_tokens(p).unwrap_or(0)).sum();
        let s = start.elapsed().as_secs_f64();
        println!(
            "{tokens:>5}-token prompts: {:.2} µs per token, {:.3} ms per prompt",
            s / counted as f64 * 1e6,
            s / prompts.len() as f64 * 1e3
        );
    }
}
