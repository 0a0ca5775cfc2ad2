//! The load `sim plan` simulates, in the same notions as `bench`, and the
//! keys its events are kept under: whole microseconds of virtual time and
//! request ids. The planner ([`crate::plan`]) and the traffic it is fed
//! ([`crate::traffic`]) both read these.

use tokenscope_workload::arrival::LoadPattern;
use tokenscope_workload::workload::Workload;

/// The load to simulate (the same notions as `bench`).
#[derive(Debug, Clone)]
pub struct PlanLoad {
    pub pattern: LoadPattern,
    /// Measured requests (`None`: until `duration_s`).
    pub requests: Option<u64>,
    pub duration_s: Option<f64>,
    pub warmup: u64,
    /// Closed loop: spread the clients' first requests over this long.
    pub ramp_up_s: Option<f64>,
    pub workload: Workload,
    pub seed: u64,
    /// One-way network delay between client and server (request and every
    /// token). A closed-loop client's next request therefore reaches the
    /// engine after its next step has begun, and waits for it, as in real life.
    pub network_delay_s: f64,
    /// Multi-turn: start at most this many sessions (a dataset's, each once).
    pub sessions: Option<u64>,
    /// Engine replicas behind one endpoint and how requests are routed to them.
    pub fleet: crate::router::Fleet,
    /// Replay: request `id` gets these (input, output) lengths instead of the
    /// workload's draw (from a measured run's records). Requests past its end
    /// fall back to the workload.
    pub trace: Option<Vec<(u64, u64)>>,
    /// Reasoning models: each request first thinks this many tokens (drawn
    /// per request, seeded), decoded like any token and counted in its
    /// output; its answer of the workload's length follows.
    pub reasoning: Option<tokenscope_workload::lengths::LengthSpec>,
    /// Vision-language requests: each carries images the model's encoder
    /// encodes before its prefill.
    pub images: Option<Images>,
}

/// `--images N --image-size WxH[,WxH…]`: N images a request, the sizes
/// taken in turn, encoded by a catalogue family's encoder.
#[derive(Debug, Clone)]
pub struct Images {
    pub per_request: u32,
    pub sizes: Vec<(u32, u32)>,
    pub encoder: crate::vision::Encoder,
}

impl Images {
    /// Request `id`'s images: the prompt tokens they add and the encoder's FLOPs.
    pub fn of(&self, id: u64) -> (u64, f64) {
        let n = self.sizes.len().max(1) as u64;
        (0..self.per_request as u64)
            .map(|k| self.sizes[((id * self.per_request as u64 + k) % n) as usize])
            .fold((0, 0.0), |(t, f), size| {
                (
                    t + self.encoder.prompt_tokens(size),
                    f + self.encoder.flops(size),
                )
            })
    }
}

/// One-way delay `sim plan` assumes: a client in the same data centre.
pub const DEFAULT_NETWORK_DELAY_S: f64 = 0.0005;

/// Request ids are already well spread: hashing them is wasted work on the
/// per-token path (the map is looked up once per generated token).
pub(crate) type IdHash = std::hash::BuildHasherDefault<IdHasher>;

#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        // Spread sequential ids over the table's buckets (Fibonacci hashing).
        self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | b as u64;
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Virtual seconds as whole µs (the records' unit).
pub(crate) fn us(t: f64) -> u64 {
    (t * 1e6).round() as u64
}
