//! A small generated set with known answers (`--dataset builtin:arithmetic`):
//! sums, differences and products of small numbers, each with its
//! `expected` answer, so graded runs (`--grade number`) work offline. The
//! set is the same on every machine (a fixed seed); `--dataset-sample`
//! draws from it with the run's seed.

use rand::{Rng, SeedableRng};

/// The name `--dataset` takes for it.
pub const NAME: &str = "builtin:arithmetic";

/// How many questions it holds.
pub const ENTRIES: usize = 500;

/// The set as JSONL: `prompt`, `expected`, and `max_tokens` (8: room for
/// the number and a few words).
pub fn jsonl() -> String {
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x6172_6974);
    let mut out = String::with_capacity(ENTRIES * 96);
    for _ in 0..ENTRIES {
        let (a, b, op) = match rng.random_range(0..3) {
            0 => (rng.random_range(0..500), rng.random_range(0..500), '+'),
            1 => {
                let a = rng.random_range(0..1000);
                (a, rng.random_range(0..=a), '-')
            }
            _ => (rng.random_range(0..32), rng.random_range(0..32), '*'),
        };
        let prompt = question(a, op, b);
        let expected = solve(a, op, b);
        out.push_str(
            &serde_json::json!({"prompt": prompt, "expected": expected.to_string(),
            "max_tokens": 8})
            .to_string(),
        );
        out.push('\n');
    }
    out
}

fn question(a: i64, op: char, b: i64) -> String {
    format!("What is {a} {op} {b}? Answer with the number only.")
}

fn solve(a: i64, op: char, b: i64) -> i64 {
    match op {
        '+' => a + b,
        '-' => a - b,
        _ => a * b,
    }
}

/// The answer to a question of this set found in `text` (the built-in
/// servers answer them right, or wrong on purpose).
pub fn answer(text: &str) -> Option<i64> {
    let at = text.rfind("What is ")?;
    let rest = &text[at + "What is ".len()..];
    let q = rest.split('?').next()?;
    let mut parts = q.split_whitespace();
    let a: i64 = parts.next()?.parse().ok()?;
    let op = parts.next()?.chars().next()?;
    let b: i64 = parts.next()?.parse().ok()?;
    matches!(op, '+' | '-' | '*').then(|| solve(a, op, b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_question_is_answered_by_its_expected_value() {
        let set = jsonl();
        assert_eq!(set.lines().count(), ENTRIES);
        for line in set.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let got = answer(v["prompt"].as_str().unwrap()).unwrap();
            assert_eq!(got.to_string(), v["expected"].as_str().unwrap());
            assert!((0..1000).contains(&got), "{got}");
        }
        assert_eq!(jsonl(), set, "the same on every call");
        assert_eq!(answer("no question"), None);
        assert_eq!(
            answer("Earlier. What is 3 * 4? Answer with the number only."),
            Some(12)
        );
    }
}
