//! Input mutation for the parsers' fuzz harnesses (`tests/fuzz.rs` in the
//! load and telemetry crates, `scripts/fuzz.sh`): deterministic, seeded byte
//! mutations of corpus inputs — the stable toolchain here has no cargo-fuzz,
//! so this drives the parsers with millions of inputs instead.

/// A small, fast generator (splitmix64).
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Bytes the parsers care about, so mutations reach their branches.
const INTERESTING: &[&[u8]] = &[
    b"\n",
    b"\r\n",
    b"\r",
    b"\n\n",
    b"data:",
    b"data: ",
    b": ",
    b"[DONE]",
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b"\\",
    b",",
    b":",
    b"null",
    b"1e308",
    b"-1",
    b"18446744073709551616",
    b"NaN",
    b"+Inf",
    b"# TYPE ",
    b"# HELP ",
    b"{le=\"",
    b"\"}",
    b"_bucket",
    b"_total",
    b"# EOF",
    b"\xff",
    b"\xe2\x82",
    b"\xc3\xa9",
    b"\0",
];

/// One mutated copy of `input`: 1–4 edits (flip, insert, delete, duplicate
/// a span, splice an interesting token, or splice another corpus input).
pub fn mutate(input: &[u8], corpus: &[Vec<u8>], rng: &mut Rng) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = if out.is_empty() {
            0
        } else {
            rng.below(out.len() + 1)
        };
        match rng.below(6) {
            0 if !out.is_empty() => {
                let i = at.min(out.len() - 1);
                out[i] ^= 1 << rng.below(8);
            }
            1 => out.insert(at, rng.next_u64() as u8),
            2 if !out.is_empty() => {
                let end = (at + 1 + rng.below(16)).min(out.len());
                out.drain(at.min(end)..end);
            }
            3 if !out.is_empty() => {
                let start = rng.below(out.len());
                let end = (start + 1 + rng.below(64)).min(out.len());
                let span = out[start..end].to_vec();
                out.splice(
                    at..at,
                    span.iter()
                        .copied()
                        .cycle()
                        .take(span.len() * (1 + rng.below(8))),
                );
            }
            4 => {
                let token = INTERESTING[rng.below(INTERESTING.len())];
                out.splice(at..at, token.iter().copied());
            }
            _ if !corpus.is_empty() => {
                let other = &corpus[rng.below(corpus.len())];
                let start = rng.below(other.len() + 1);
                let end = (start + rng.below(256)).min(other.len());
                out.splice(at..at, other[start..end].iter().copied());
            }
            _ => {}
        }
    }
    out.truncate(1 << 16);
    out
}

/// The corpus files of `dir` (one input each).
pub fn corpus(dir: &std::path::Path) -> std::io::Result<Vec<Vec<u8>>> {
    let mut files: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    files.iter().map(std::fs::read).collect()
}

/// How many inputs a harness runs: `FUZZ_INPUTS`, else `default`.
pub fn inputs(default: u64) -> u64 {
    std::env::var("FUZZ_INPUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_are_deterministic_and_bounded() {
        let corpus = vec![b"data: {\"a\":1}\n\n".to_vec()];
        let (mut a, mut b) = (Rng(7), Rng(7));
        for _ in 0..1000 {
            let x = mutate(&corpus[0], &corpus, &mut a);
            assert_eq!(x, mutate(&corpus[0], &corpus, &mut b));
            assert!(x.len() <= 1 << 16);
        }
    }
}
