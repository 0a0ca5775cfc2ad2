//! Fault injection shared by the built-in servers: a share of requests is
//! answered with an error status, cut mid-stream, sent a malformed chunk or
//! stalled. Which request gets which fault is a seeded hash of its arrival
//! index, so a run's mix is reproducible.

/// Per-request fault probabilities (each 0..=1; their sum at most 1).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Faults {
    pub http_429: f64,
    pub http_500: f64,
    pub http_503: f64,
    /// The connection is cut halfway through the stream.
    pub disconnect: f64,
    /// A chunk halfway through the stream is not JSON.
    pub malformed: f64,
    /// The stream stops sending halfway for `stall` before going on.
    pub stall: f64,
    /// Of the answers asked for as JSON, the share whose JSON is broken
    /// (cut before its end). Drawn apart from the faults above.
    pub bad_json: f64,
    /// Of the answers that call a tool, the share whose arguments are
    /// broken (cut before their end). Drawn apart.
    pub bad_tool_args: f64,
    /// Of the questions with a known answer (`builtin:arithmetic`), the
    /// share answered wrong (off by one). Drawn apart.
    pub wrong_answers: f64,
    /// Above this many requests in flight (at a request's arrival, itself
    /// counted), `diverge` of the answers change one word: the ground
    /// truth of answers that change with load.
    pub diverge_above: Option<u64>,
    pub diverge: f64,
}

impl Faults {
    /// The fault for the `n`-th request under `seed`.
    pub fn for_request(&self, seed: u64, n: u64) -> Fault {
        pick_fault(self, uniform(seed, n))
    }

    /// The shares' sum, which must not exceed 1.
    pub fn total(&self) -> f64 {
        self.http_429
            + self.http_500
            + self.http_503
            + self.disconnect
            + self.malformed
            + self.stall
    }
}

impl Faults {
    /// Whether request `n`'s JSON answer is broken under `seed`.
    pub fn breaks_json(&self, seed: u64, n: u64) -> bool {
        uniform(seed ^ 0x6a73_6f6e, n) < self.bad_json
    }

    /// Whether request `n`'s tool-call arguments are broken.
    pub fn breaks_tool_args(&self, seed: u64, n: u64) -> bool {
        uniform(seed ^ 0x746f_6f6c, n) < self.bad_tool_args
    }

    /// Whether request `n`'s known answer is given wrong.
    pub fn answers_wrong(&self, seed: u64, n: u64) -> bool {
        uniform(seed ^ 0x7772_6f6e, n) < self.wrong_answers
    }

    /// Whether request `n`, arriving with `in_flight` requests in flight
    /// (itself counted), changes its answer. Drawn on its prompt's hash,
    /// not its arrival: the same prompt diverges at every load above the
    /// threshold, as a batch-variance bug would.
    pub fn diverges(&self, seed: u64, prompt_hash: u64, in_flight: u64) -> bool {
        self.diverge_above.is_some_and(|k| in_flight > k)
            && uniform(seed ^ 0x6469_7665, prompt_hash) < self.diverge
    }
}

/// splitmix64 → a uniform number in [0, 1) for request `n`.
pub fn uniform(seed: u64, n: u64) -> f64 {
    let mut z = seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
}

/// The fault drawn for one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fault {
    None,
    Status(u16),
    Disconnect,
    Malformed,
    Stall,
}

/// The fault for a uniform draw `u`: the shares are stacked in a fixed order.
pub fn pick_fault(f: &Faults, u: f64) -> Fault {
    let table = [
        (f.http_429, Fault::Status(429)),
        (f.http_500, Fault::Status(500)),
        (f.http_503, Fault::Status(503)),
        (f.disconnect, Fault::Disconnect),
        (f.malformed, Fault::Malformed),
        (f.stall, Fault::Stall),
    ];
    let mut acc = 0.0;
    for (p, fault) in table {
        acc += p;
        if u < acc {
            return fault;
        }
    }
    Fault::None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_follow_their_rates() {
        let f = Faults {
            http_429: 0.1,
            http_500: 0.1,
            disconnect: 0.2,
            ..Default::default()
        };
        let n = 100_000;
        let mut counts = [0u32; 4];
        for i in 0..n {
            match pick_fault(&f, uniform(7, i)) {
                Fault::Status(429) => counts[0] += 1,
                Fault::Status(500) => counts[1] += 1,
                Fault::Disconnect => counts[2] += 1,
                Fault::None => counts[3] += 1,
                _ => unreachable!(),
            }
        }
        let share = |c: u32| c as f64 / n as f64;
        assert!((share(counts[0]) - 0.1).abs() < 0.005);
        assert!((share(counts[1]) - 0.1).abs() < 0.005);
        assert!((share(counts[2]) - 0.2).abs() < 0.005);
        assert!((share(counts[3]) - 0.6).abs() < 0.005);
    }
}
