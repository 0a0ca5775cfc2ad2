//! When the measured requests were sent and ended: what the window, the
//! concurrency, the steady state and the arrival fidelity are computed from.
//!
//! Up to [`MAX_EXACT`] requests each one keeps its own instants (24 bytes
//! a request) and every figure is exact. A longer run (a soak, a canary
//! with `--duration forever`) would grow without bound that way, so past
//! it the instants are *tallied* on a time grid instead ([`Timeline`]):
//! memory then stays flat whatever the run's length, and
//!
//! - the window, the steady window's requests and the mean concurrency
//!   stay exact (the integral of the in-flight count between two grid
//!   edges is exact from each slot's event counts and offset sums);
//! - the largest concurrency becomes an upper bound at the grid's
//!   resolution (`Concurrency::max_resolution_ms` says so);
//! - the arrival fidelity is that of the first [`MAX_EXACT`] requests
//!   (`ArrivalFidelity::requests` says how many).

use crate::results::{ArrivalFidelity, Concurrency};

const US: f64 = 1e-6;

/// The steady-state window's grid: its edges are rounded inward to it, so
/// its tokens are counted from per-slot totals instead of every chunk's
/// time (the first grid of a [`Timeline`] too).
pub const GRID_US: u64 = 10_000;

/// Requests whose instants are kept one by one (6 MiB of them).
pub const MAX_EXACT: usize = 1 << 18;

/// Slots a [`Timeline`] holds before its grid doubles (2 MiB of them).
pub const MAX_SLOTS: usize = 1 << 16;

/// A measured request's send and end instants, whether it succeeded in the
/// end's top bit: 16 bytes a request.
#[derive(Debug, Clone, Copy)]
struct Span {
    sent: u64,
    done_ok: u64,
}

impl Span {
    const OK: u64 = 1 << 63;

    fn new(sent: u64, done: u64, ok: bool) -> Span {
        let ok = if ok { Span::OK } else { 0 };
        Span {
            sent,
            done_ok: (done & !Span::OK) | ok,
        }
    }

    fn done(&self) -> u64 {
        (self.done_ok & !Span::OK).max(self.sent)
    }

    fn succeeded(&self) -> bool {
        self.done_ok & Span::OK != 0
    }
}

/// The requests' instants, kept exactly or tallied (see the module's doc).
#[derive(Debug, Clone)]
pub struct Instants {
    /// Every request's instants, while there are at most [`MAX_EXACT`].
    exact: Option<Exact>,
    /// The tallies that replace them past it.
    timeline: Option<Timeline>,
    /// The arrival fidelity of the requests kept exactly, frozen when
    /// they were tallied.
    arrivals: Option<ArrivalFidelity>,
    first_sent: u64,
    last_sent: u64,
    first_done: u64,
    last_done: u64,
    count: u64,
}

#[derive(Debug, Clone, Default)]
struct Exact {
    spans: Vec<Span>,
    /// When each request was meant to leave (µs).
    scheduled: Vec<u64>,
}

impl Default for Instants {
    fn default() -> Self {
        Instants {
            exact: Some(Exact::default()),
            timeline: None,
            arrivals: None,
            first_sent: u64::MAX,
            last_sent: 0,
            first_done: u64::MAX,
            last_done: 0,
            count: 0,
        }
    }
}

impl Instants {
    /// One request: sent, done (µs of the run's clock), whether it
    /// succeeded and when it was meant to leave.
    pub fn add(&mut self, sent: u64, done: u64, ok: bool, scheduled: u64) {
        let done = done.max(sent);
        self.first_sent = self.first_sent.min(sent);
        self.last_sent = self.last_sent.max(sent);
        self.first_done = self.first_done.min(done);
        self.last_done = self.last_done.max(done);
        self.count += 1;
        if let Some(t) = &mut self.timeline {
            t.add(sent, done, ok);
            return;
        }
        let e = self.exact.get_or_insert_with(Exact::default);
        e.spans.push(Span::new(sent, done, ok));
        e.scheduled.push(scheduled);
        if e.spans.len() > MAX_EXACT {
            self.tally();
        }
    }

    /// Moves the exact instants into a timeline, freezing their arrival
    /// fidelity first.
    fn tally(&mut self) {
        let Some(mut e) = self.exact.take() else {
            return;
        };
        self.arrivals = e.arrivals().map(|a| ArrivalFidelity {
            requests: Some(e.spans.len() as u64),
            ..a
        });
        let mut t = Timeline::default();
        for s in &e.spans {
            t.add(s.sent, s.done(), s.succeeded());
        }
        self.timeline = Some(t);
    }

    /// Whether the instants are tallied (the run passed [`MAX_EXACT`] requests).
    pub fn tallied(&self) -> bool {
        self.timeline.is_some()
    }

    /// The grid the figures are exact on, µs (1 while every instant is kept).
    pub fn grid_us(&self) -> u64 {
        self.timeline.as_ref().map_or(1, |t| t.grid_us)
    }

    /// First send and last end, µs.
    pub fn span_us(&self) -> Option<(u64, u64)> {
        (self.count > 0).then_some((self.first_sent, self.last_done))
    }

    /// The first end: the pipeline is full from then on.
    pub fn first_done(&self) -> Option<u64> {
        (self.count > 0).then_some(self.first_done)
    }

    /// The last send: after it the load only drains.
    pub fn last_sent(&self) -> Option<u64> {
        (self.count > 0).then_some(self.last_sent)
    }

    /// Successful requests that ended in [from, to), µs.
    pub fn succeeded_between(&self, from: u64, to: u64) -> u64 {
        match (&self.exact, &self.timeline) {
            (_, Some(t)) => t.ok_ends_between(from, to),
            (Some(e), None) => {
                let inside = |s: &&Span| s.succeeded() && s.done() >= from && s.done() < to;
                e.spans.iter().filter(inside).count() as u64
            }
            (None, None) => 0,
        }
    }

    /// In-flight requests (sent, not yet done) over [from, to], µs: the
    /// time-weighted mean and the largest.
    pub fn concurrency(&mut self, from: u64, to: u64) -> Concurrency {
        match (&mut self.exact, &self.timeline) {
            (_, Some(t)) => t.concurrency(from, to, (self.first_sent, self.last_done)),
            (Some(e), None) => e.concurrency(from, to),
            (None, None) => Concurrency::default(),
        }
    }

    /// The intended and actual arrivals compared: every request's while
    /// they are kept, else the first [`MAX_EXACT`]'s.
    pub fn arrivals(&mut self) -> Option<ArrivalFidelity> {
        match &mut self.exact {
            Some(e) => e.arrivals(),
            None => self.arrivals.clone(),
        }
    }

    /// Time-weighted in-flight requests per second of the run (for charts).
    pub fn in_flight_per_second(&self) -> Vec<f64> {
        let secs = (self.last_done / 1_000_000 + 1) as usize;
        let mut out = vec![0.0; if self.count > 0 { secs } else { 0 }];
        match (&self.exact, &self.timeline) {
            (_, Some(t)) => {
                for (s, v) in out.iter_mut().enumerate() {
                    // The second's edges on the grid; a grid coarser than
                    // a second gives each second its slot's mean.
                    let a = t.floor(s as u64 * 1_000_000);
                    let b = t.floor((s as u64 + 1) * 1_000_000).max(a + t.grid_us);
                    *v = t.area_between(a, b) / (b - a) as f64;
                }
            }
            (Some(e), None) => {
                for s in &e.spans {
                    spread(&mut out, s.sent, s.done());
                }
            }
            (None, None) => {}
        }
        out
    }
}

/// Adds one request's presence to each second it overlaps.
fn spread(per_second: &mut [f64], a: u64, b: u64) {
    let seconds = per_second
        .iter_mut()
        .enumerate()
        .take((b / 1_000_000) as usize + 1)
        .skip((a / 1_000_000) as usize);
    for (s, slot) in seconds {
        let lo = a.max(s as u64 * 1_000_000);
        let hi = b.min((s as u64 + 1) * 1_000_000);
        *slot += hi.saturating_sub(lo) as f64 / 1e6;
    }
}

impl Exact {
    fn arrivals(&mut self) -> Option<ArrivalFidelity> {
        if self.spans.len() < 2 {
            return None;
        }
        self.spans.sort_unstable_by_key(|s| s.sent);
        self.scheduled.sort_unstable();
        let (ri, ci, di) = arrival_stats(self.scheduled.iter().copied());
        let (rs, cs, ds) = arrival_stats(self.spans.iter().map(|s| s.sent));
        Some(ArrivalFidelity {
            intended_per_s: ri,
            sent_per_s: rs,
            intended_gap_cv2: ci,
            sent_gap_cv2: cs,
            intended_dispersion_1s: di,
            sent_dispersion_1s: ds,
            requests: None,
        })
    }

    /// A sweep of the sends (in send order) merged with the ends (sorted
    /// apart: 8 bytes a request, for the moment of the sweep).
    fn concurrency(&mut self, from: u64, to: u64) -> Concurrency {
        self.spans.sort_unstable_by_key(|s| s.sent);
        let mut ends: Vec<u64> = self.spans.iter().map(Span::done).collect();
        ends.sort_unstable();
        let (mut level, mut max, mut area, mut last) = (0i64, 0i64, 0f64, from);
        let mut sends = self.spans.iter().map(|s| s.sent).peekable();
        let mut ends = ends.into_iter().peekable();
        loop {
            // Ends before sends at the same instant: a closed loop's
            // hand-over is not 2 in flight.
            let (t, d) = match (sends.peek(), ends.peek()) {
                (Some(&s), Some(&e)) if e <= s => (ends.next().unwrap_or(e), -1),
                (Some(&s), _) => (sends.next().unwrap_or(s), 1),
                (None, Some(&e)) => (ends.next().unwrap_or(e), -1),
                (None, None) => break,
            };
            let t_clamped = t.clamp(from, to);
            area += level as f64 * (t_clamped - last.min(t_clamped)) as f64;
            last = last.max(t_clamped);
            level += d;
            if t >= from && t <= to {
                max = max.max(level);
            }
        }
        let span = to.saturating_sub(from) as f64;
        Concurrency {
            mean: if span > 0.0 { area / span } else { 0.0 },
            max: max.max(0) as u64,
            max_resolution_ms: None,
        }
    }
}

/// Sends and ends counted per slot of a grid that doubles when it would
/// pass [`MAX_SLOTS`], with the sums of their offsets in the slot: enough
/// for the exact integral of the in-flight count between any two grid edges.
#[derive(Debug, Clone)]
struct Timeline {
    grid_us: u64,
    slots: Vec<Slot>,
    /// Σ (end − send) of every request: the integral over the whole run.
    busy_us: u128,
}

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    sends: u32,
    ends: u32,
    ok_ends: u32,
    send_offsets: u64,
    end_offsets: u64,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline {
            grid_us: GRID_US,
            slots: Vec::new(),
            busy_us: 0,
        }
    }
}

impl Timeline {
    fn add(&mut self, sent: u64, done: u64, ok: bool) {
        self.busy_us += u128::from(done - sent);
        while done / self.grid_us >= MAX_SLOTS as u64 {
            self.coarsen();
        }
        let g = self.grid_us;
        let need = (done / g) as usize + 1;
        if self.slots.len() < need {
            self.slots.resize(need, Slot::default());
        }
        let s = &mut self.slots[(sent / g) as usize];
        s.sends += 1;
        s.send_offsets += sent % g;
        let e = &mut self.slots[(done / g) as usize];
        e.ends += 1;
        e.ok_ends += u32::from(ok);
        e.end_offsets += done % g;
    }

    /// Doubles the grid: each pair of slots becomes one, offsets kept.
    fn coarsen(&mut self) {
        let g = self.grid_us;
        let merged = self
            .slots
            .chunks(2)
            .map(|pair| {
                let mut m = pair[0];
                if let Some(b) = pair.get(1) {
                    m.sends += b.sends;
                    m.ends += b.ends;
                    m.ok_ends += b.ok_ends;
                    m.send_offsets += b.send_offsets + u64::from(b.sends) * g;
                    m.end_offsets += b.end_offsets + u64::from(b.ends) * g;
                }
                m
            })
            .collect();
        self.slots = merged;
        self.grid_us *= 2;
    }

    fn floor(&self, t: u64) -> u64 {
        t / self.grid_us * self.grid_us
    }

    fn ok_ends_between(&self, from: u64, to: u64) -> u64 {
        let (a, b) = ((from / self.grid_us) as usize, (to / self.grid_us) as usize);
        let slots = self
            .slots
            .get(a.min(self.slots.len())..b.min(self.slots.len()));
        slots.map_or(0, |s| s.iter().map(|x| u64::from(x.ok_ends)).sum())
    }

    /// ∫ in-flight dt over [from, to], both grid edges: Σ over sends
    /// before `to` of (to − max(send, from)) less the same over ends.
    fn area_between(&self, from: u64, to: u64) -> f64 {
        let g = self.grid_us;
        let (a, b) = ((from / g) as usize, (to / g) as usize);
        let mut area = 0f64;
        for (i, s) in self.slots.iter().enumerate().take(b) {
            let start = i as u64 * g;
            let net = |count: u32, offsets: u64| {
                if i < a {
                    count as f64 * (to - from) as f64
                } else {
                    count as f64 * (to - start) as f64 - offsets as f64
                }
            };
            area += net(s.sends, s.send_offsets) - net(s.ends, s.end_offsets);
        }
        area
    }

    /// Exact mean over the whole run (its integral is Σ end − send) or over
    /// grid edges; the largest level is bounded by each slot's starting
    /// level plus its sends.
    fn concurrency(&self, from: u64, to: u64, whole: (u64, u64)) -> Concurrency {
        let span = to.saturating_sub(from) as f64;
        let area = if (from, to) == whole {
            self.busy_us as f64
        } else {
            self.area_between(self.floor(from), self.floor(to))
        };
        let g = self.grid_us;
        let (mut level, mut max) = (0i64, 0i64);
        for (i, s) in self.slots.iter().enumerate() {
            let (start, end) = (i as u64 * g, (i as u64 + 1) * g);
            if end > from && start <= to {
                max = max.max(level + i64::from(s.sends));
            }
            level += i64::from(s.sends) - i64::from(s.ends);
        }
        Concurrency {
            mean: if span > 0.0 { area / span } else { 0.0 },
            max: max.max(0) as u64,
            max_resolution_ms: Some(g as f64 / 1e3),
        }
    }
}

/// Rate (per s), squared coefficient of variation of the gaps, and the
/// index of dispersion of counts in 1 s windows (from 5 windows on) of
/// sorted arrival instants (µs), walked without a copy (it runs once per
/// run over every request).
pub(crate) fn arrival_stats<I: Iterator<Item = u64> + Clone>(at: I) -> (f64, f64, Option<f64>) {
    let n = at.clone().count();
    let first = at.clone().next().unwrap_or(0);
    let last = at.clone().last().unwrap_or(first);
    let span_s = (last - first) as f64 * US;
    let rate = if span_s > 0.0 {
        (n - 1) as f64 / span_s
    } else {
        0.0
    };
    let gaps = || {
        at.clone()
            .zip(at.clone().skip(1))
            .map(|(a, b)| (b - a) as f64)
    };
    let count = n.saturating_sub(1).max(1) as f64;
    let mean = gaps().sum::<f64>() / count;
    let var = gaps().map(|g| (g - mean).powi(2)).sum::<f64>() / count;
    let cv2 = if mean > 0.0 { var / (mean * mean) } else { 0.0 };
    let windows = ((last - first) / 1_000_000) as usize;
    let dispersion = (windows >= 5).then(|| {
        let mut counts = vec![0u64; windows];
        for t in at.clone() {
            if let Some(c) = counts.get_mut(((t - first) / 1_000_000) as usize) {
                *c += 1;
            }
        }
        let m = counts.iter().sum::<u64>() as f64 / windows as f64;
        let v = counts.iter().map(|&c| (c as f64 - m).powi(2)).sum::<f64>() / windows as f64;
        if m > 0.0 {
            v / m
        } else {
            0.0
        }
    });
    (rate, cv2, dispersion)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The same requests kept exactly and tallied.
    fn both(spans: &[(u64, u64, bool)]) -> (Instants, Instants) {
        let mut exact = Instants::default();
        let mut tallied = Instants::default();
        for &(sent, len, ok) in spans {
            exact.add(sent, sent + len, ok, sent);
            tallied.add(sent, sent + len, ok, sent);
        }
        tallied.tally();
        (exact, tallied)
    }

    proptest! {
        /// The tallies give the exact mean in flight over the whole run and
        /// between grid edges, the exact successes between grid edges, and a
        /// largest count that is never below the true one.
        #[test]
        fn tallies_keep_the_exact_figures(
            spans in proptest::collection::vec((0u64..5_000_000, 0u64..800_000, any::<bool>()), 1..300),
            edges in (0u64..300, 0u64..300),
        ) {
            let (mut exact, mut tallied) = both(&spans);
            prop_assert!(tallied.tallied() && !exact.tallied());
            let (from, to) = exact.span_us().unwrap();
            let (e, t) = (exact.concurrency(from, to), tallied.concurrency(from, to));
            prop_assert!((e.mean - t.mean).abs() < 1e-6 * e.mean.max(1.0), "{} vs {}", e.mean, t.mean);
            prop_assert!(t.max >= e.max);
            let g = tallied.grid_us();
            let (a, b) = (edges.0.min(edges.1) * g, (edges.0.max(edges.1) + 1) * g);
            let (e, t) = (exact.concurrency(a, b), tallied.concurrency(a, b));
            prop_assert!((e.mean - t.mean).abs() < 1e-6 * e.mean.max(1.0), "[{a}, {b}]: {} vs {}", e.mean, t.mean);
            prop_assert_eq!(exact.succeeded_between(a, b), tallied.succeeded_between(a, b));
            let (pe, pt) = (exact.in_flight_per_second(), tallied.in_flight_per_second());
            prop_assert_eq!(pe.len(), pt.len());
            for (x, y) in pe.iter().zip(&pt) {
                prop_assert!((x - y).abs() < 1e-6, "{x} vs {y}");
            }
        }
    }

    #[test]
    fn a_long_run_is_tallied_in_flat_memory_and_keeps_its_figures() {
        let mut i = Instants::default();
        // A closed loop of 4: each request takes 1 s, one ends and the next
        // starts every 250 ms, for MAX_EXACT × 3 requests (9 days).
        let n = MAX_EXACT as u64 * 3;
        for k in 0..n {
            let sent = k * 250_000;
            i.add(sent, sent + 1_000_000, true, sent);
        }
        assert!(i.tallied());
        let t = i.timeline.as_ref().unwrap();
        assert!(t.slots.len() <= MAX_SLOTS, "{} slots", t.slots.len());
        let (from, to) = i.span_us().unwrap();
        let c = i.concurrency(from, to);
        let whole = (to - from) as f64;
        assert!((c.mean - n as f64 * 1e6 / whole).abs() < 1e-9);
        let res = c.max_resolution_ms.unwrap();
        assert!(
            c.max >= 4 && c.max as f64 <= 4.0 + res / 250.0 + 1.0,
            "max {} at {res} ms",
            c.max
        );
        let arrivals = i.arrivals().unwrap();
        assert_eq!(arrivals.requests, Some(MAX_EXACT as u64 + 1));
        assert!((arrivals.sent_per_s - 4.0).abs() < 1e-9 && arrivals.sent_gap_cv2 < 1e-9);
    }
}
