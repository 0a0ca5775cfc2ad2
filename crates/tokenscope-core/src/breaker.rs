//! `--stop-on`: rules that stop a run early, judged on each finished
//! request as it is recorded, so no time is spent measuring a server past
//! the point its figures mean anything.
//!
//! - `saturation`: the queue is growing. Two signs, whichever shows first:
//!   - the requests waiting for their first token (sent, neither answering
//!     nor ended: [`WaitingRise`], which the run samples on its own timer,
//!     not on records: a queued request ends only after its wait) rose
//!     through each quarter of the last
//!     [`WAITING_WINDOW_S`] seconds, by at least [`WAITING_RISE_SHARE`] of
//!     the sends, looked at four times a second from [`WAITING_AFTER_S`].
//!     A queue shows here within seconds, before any queued request ends;
//!   - TTFT rising with send time ([`crate::overload`]'s rule) over the
//!     requests sent in the last [`SATURATION_WINDOW_S`] seconds, looked at
//!     once a second of the run's clock after [`SATURATION_AFTER_S`]: the
//!     finished requests' own evidence, for a client that cannot count
//!     its waiting requests.
//! - `errors>P%`: at least P % of the last [`ERROR_WINDOW`] requests
//!   failed (a cancelled request is not a failure).
//! - [`StopRule::Decided`] (not a flag: what `sweep --find` and `tune`
//!   give each point of their search): the SLO's verdict is settled, one
//!   way or the other, by each objective's 95 % interval ([`Decide`]).
//!
//! A stopped run keeps every request that finished; `results.json` says
//! which rule stopped it, when, and on what evidence.

use crate::overload::QueueGrowth;
use crate::record::{ErrorKind, RequestRecord};
pub use crate::results::Tripped;
use crate::slo::{quantile_of, ObjectiveResult, Slo, SloMetric};
use crate::stats::Distribution;
use std::collections::VecDeque;

/// Sends further back than this are out of the saturation fit.
pub const SATURATION_WINDOW_S: f64 = 60.0;
/// No saturation verdict before this much of the run.
pub const SATURATION_AFTER_S: f64 = 20.0;
/// The requests an error share is judged over.
pub const ERROR_WINDOW: usize = 50;
/// The waiting requests' rise is judged over this many seconds …
pub const WAITING_WINDOW_S: f64 = 8.0;
/// … of the run after this much of it (a stable server's waiting count
/// settles within a TTFT; the first seconds also hold connection set-up).
pub const WAITING_AFTER_S: f64 = 3.0;
/// The rise, a second, that calls the queue growing: a tenth of the sends
/// a second (the server keeps up with less than ~90 % of the arrivals) …
pub const WAITING_RISE_SHARE: f64 = 0.1;
/// … and at least this many requests over the window, so that a handful
/// of requests arriving together never reads as a queue.
pub const WAITING_RISE_MIN: f64 = 8.0;

/// One rule of `--stop-on`.
#[derive(Debug, Clone, PartialEq)]
pub enum StopRule {
    Saturation,
    /// Stop at this share of failures (0–1) over the last [`ERROR_WINDOW`].
    Errors(f64),
    /// Stop once the SLO's verdict is settled.
    Decided(Decide),
}

/// When a point of a search has said enough: an objective's 95 % interval
/// lies wholly above its limit (not met: at once), or every objective's
/// interval lies within its limit and the run is `met_after_s` old (met).
/// A `max` objective can only be decided not met, and an ITL objective
/// (judged on tokens, which this rule does not keep) never decides met:
/// such a point runs to its request cap.
///
/// The verdict is looked at after 8, 16, 24 … requests, then each time a
/// quarter more have finished: a few dozen looks in all, whose 95 %
/// intervals are not widened for their number. A point near the boundary
/// therefore runs longer rather than decides wrongly more often than the
/// looks allow; the search's bracket says where that matters.
#[derive(Debug, Clone, PartialEq)]
pub struct Decide {
    pub slo: Slo,
    /// An open loop's queue takes time to build; a verdict of met from the
    /// first seconds would pass a load the server cannot keep. Compared
    /// with the send time of the newest request judged.
    pub met_after_s: f64,
    /// No verdict of met while more than this share of the requests
    /// failed: a server that sheds load fast would otherwise pass on the
    /// few it served.
    pub failed_share: f64,
}

impl StopRule {
    /// `saturation` or `errors>5%`.
    pub fn parse(text: &str) -> Result<StopRule, String> {
        let text = text.trim();
        if text == "saturation" {
            return Ok(StopRule::Saturation);
        }
        let share = text
            .strip_prefix("errors>")
            .and_then(|p| p.strip_suffix('%'))
            .ok_or_else(|| format!("`{text}`: expected `saturation` or `errors>P%` (errors>5%)"))?;
        match share.trim().parse::<f64>() {
            Ok(p) if p > 0.0 && p < 100.0 => Ok(StopRule::Errors(p / 100.0)),
            _ => Err(format!(
                "`{text}`: the share must be a percentage above 0 and below 100 (errors>5%)"
            )),
        }
    }
}

/// The rules, and what they are judged on.
pub struct Breaker {
    rules: Vec<StopRule>,
    /// (send s, TTFT s) of the measured requests sent in the window.
    sent: VecDeque<(f64, f64)>,
    newest_sent_s: f64,
    next_look_s: f64,
    /// Whether each of the last [`ERROR_WINDOW`] requests failed.
    outcomes: VecDeque<bool>,
    /// [`StopRule::Decided`]'s samples, when it is a rule.
    judge: Option<Judge>,
}

impl Breaker {
    pub fn new(rules: Vec<StopRule>) -> Breaker {
        let judge = rules.iter().find_map(|r| match r {
            StopRule::Decided(d) => Some(Judge::new(d.clone())),
            _ => None,
        });
        Breaker {
            judge,
            rules,
            sent: VecDeque::new(),
            newest_sent_s: 0.0,
            next_look_s: SATURATION_AFTER_S,
            outcomes: VecDeque::with_capacity(ERROR_WINDOW + 1),
        }
    }

    /// Takes one finished record; the rule it trips, if one does.
    pub fn add(&mut self, r: &RequestRecord) -> Option<Tripped> {
        if r.warmup || r.error_kind == Some(ErrorKind::Cancelled) || r.abandoned() {
            return None;
        }
        let done_s = r.done_at_us as f64 * 1e-6;
        self.outcomes.push_back(r.error_kind.is_some());
        if self.outcomes.len() > ERROR_WINDOW {
            self.outcomes.pop_front();
        }
        if let Some(ttft) = r.ttft_us() {
            let sent_s = r.sent_at_us as f64 * 1e-6;
            self.newest_sent_s = self.newest_sent_s.max(sent_s);
            self.sent.push_back((sent_s, ttft as f64 * 1e-6));
        }
        // By index: `saturation` takes `self` mutably (its next look).
        (0..self.rules.len()).find_map(|i| match self.rules[i] {
            StopRule::Errors(share) => self.errors(share, done_s),
            StopRule::Saturation => self.saturation(done_s),
            StopRule::Decided(_) => self.judge.as_mut()?.add(r, done_s),
        })
    }

    fn errors(&self, share: f64, done_s: f64) -> Option<Tripped> {
        let failed = self.outcomes.iter().filter(|f| **f).count();
        let seen = self.outcomes.len();
        (seen == ERROR_WINDOW && failed as f64 >= share * seen as f64).then(|| Tripped {
            rule: "errors".into(),
            at_s: done_s,
            why: format!(
                "{failed} of the last {seen} requests failed, at least the {:.1} % --stop-on allows",
                share * 100.0
            ),
        })
    }

    fn saturation(&mut self, done_s: f64) -> Option<Tripped> {
        if done_s < self.next_look_s {
            return None;
        }
        self.next_look_s = done_s + 1.0;
        let oldest = self.newest_sent_s - SATURATION_WINDOW_S;
        self.sent.retain(|p| p.0 >= oldest);
        let us = |s: f64| (s * 1e6) as u64;
        let points = self.sent.iter().map(|&(s, t)| (us(s), us(t)));
        let g = QueueGrowth::fit_all(points).filter(QueueGrowth::growing)?;
        Some(Tripped {
            rule: "saturation".into(),
            at_s: done_s,
            why: format!(
                "the queue was growing: over the sends of the last {:.0} s, TTFT rose {:.0} ms a second (95 % interval {:.0}–{:.0} ms, {} requests); the server kept up with about {:.3} of the {:.3} requests/s sent",
                g.to_s - g.from_s,
                g.slope * 1e3,
                g.low * 1e3,
                g.high * 1e3,
                g.requests,
                g.arrival_rate / (1.0 + g.slope),
                g.arrival_rate,
            ),
        })
    }
}

/// The requests waiting for a first token, sampled four times a second
/// of the run's clock over the last [`WAITING_WINDOW_S`] seconds.
///
/// The rule: the window's four quarters each hold more waiting requests
/// on average than the one before, and from the first quarter to the last
/// the count rose by [`WAITING_RISE_SHARE`] of the requests sent a second
/// (and [`WAITING_RISE_MIN`] requests at least); **and** the requests
/// whose first token came in each quarter waited longer for it on average
/// than those of the quarter before, the last quarter's by a tenth at
/// least more than the first's.
///
/// A server that keeps up holds its waiting count level around arrivals
/// × TTFT, so its quarters rise in a row only by chance, and not by a
/// tenth of the sends; one that takes on μ of λ arrivals gains λ − μ
/// waiting requests a second, and (first come, first served) each answer
/// has waited longer than the one before. The second half tells the two
/// apart while a stable server with a long TTFT still fills: its waiting
/// count rises for one TTFT, but until then no answer comes (a quarter
/// with none is not judged), and the answers that come have waited as
/// long as each other (with two kinds of prompt, 2 s and 8 s to a first
/// token, the waits hold at 2 s until the first long one answers, then
/// jump: not a rise through every quarter).
#[derive(Debug, Default)]
pub struct WaitingRise {
    samples: VecDeque<(f64, WaitingSample)>,
}

/// The load's own counters at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WaitingSample {
    /// Requests sent so far.
    pub sent: u64,
    /// Requests sent that wait for a first token now.
    pub waiting: u64,
    /// Requests whose first token has come so far, and the µs they waited
    /// for it in all.
    pub answered: u64,
    pub answer_wait_us: u64,
}

/// Seconds between samples.
pub const WAITING_EVERY_S: f64 = 0.25;

impl WaitingRise {
    /// Whether a sample is due at `now_s`.
    pub fn due(&self, now_s: f64) -> bool {
        now_s >= WAITING_AFTER_S
            && self
                .samples
                .back()
                .is_none_or(|s| now_s >= s.0 + WAITING_EVERY_S)
    }

    /// One sample at `now_s` of the run's clock. The rule, when it trips.
    pub fn add(&mut self, now_s: f64, sample: WaitingSample) -> Option<Tripped> {
        if !self.due(now_s) {
            return None;
        }
        self.samples.push_back((now_s, sample));
        while self
            .samples
            .front()
            .is_some_and(|s| s.0 < now_s - WAITING_WINDOW_S)
        {
            self.samples.pop_front();
        }
        self.judge(now_s)
    }

    /// The samples of quarter `k` (0–3) of the window.
    fn quarter(&self, k: usize) -> Vec<&WaitingSample> {
        let (Some(first), Some(last)) = (self.samples.front(), self.samples.back()) else {
            return Vec::new();
        };
        let span = last.0 - first.0;
        let (lo, hi) = (
            first.0 + span * k as f64 / 4.0,
            first.0 + span * (k + 1) as f64 / 4.0,
        );
        self.samples
            .iter()
            .filter(|s| s.0 >= lo && (s.0 < hi || k == 3))
            .map(|s| &s.1)
            .collect()
    }

    fn judge(&self, now_s: f64) -> Option<Tripped> {
        let (first, last) = (self.samples.front()?, self.samples.back()?);
        let span = last.0 - first.0;
        // The window full, and sampled.
        if span < WAITING_WINDOW_S * 0.9 || self.samples.len() < 16 {
            return None;
        }
        let quarters: Vec<Vec<&WaitingSample>> = (0..4).map(|k| self.quarter(k)).collect();
        if quarters.iter().any(Vec::is_empty) {
            return None;
        }
        let means: Vec<f64> = quarters
            .iter()
            .map(|q| q.iter().map(|s| s.waiting as f64).sum::<f64>() / q.len() as f64)
            .collect();
        let sends_per_s = last.1.sent.saturating_sub(first.1.sent) as f64 / span;
        let rise = means[3] - means[0];
        // Between the first quarter's middle and the last's: ¾ of the window.
        let rise_per_s = rise / (span * 0.75);
        let growing = means.windows(2).all(|w| w[1] > w[0])
            && rise >= WAITING_RISE_MIN
            && rise_per_s >= WAITING_RISE_SHARE * sends_per_s;
        if !growing {
            return None;
        }
        // The mean wait of the first tokens that came within a quarter.
        let waited = |q: &[&WaitingSample]| {
            let (a, b) = (q[0], q[q.len() - 1]);
            let n = b.answered.saturating_sub(a.answered);
            let us = b.answer_wait_us.saturating_sub(a.answer_wait_us);
            (n > 0).then(|| us as f64 / n as f64 / 1e3)
        };
        let waits: Vec<f64> = quarters.iter().map(|q| waited(q)).collect::<Option<_>>()?;
        let (early_ms, late_ms) = (waits[0], waits[3]);
        let longer = waits.windows(2).all(|w| w[1] > w[0]) && late_ms >= 1.1 * early_ms;
        longer.then(|| Tripped {
            rule: "saturation".into(),
            at_s: now_s,
            why: format!(
                "the queue was growing: the requests waiting for a first token rose through each quarter of the last {span:.0} s, from {:.0} to {:.0} on average ({rise_per_s:.1} a second, while {sends_per_s:.1} requests a second were sent), and the first tokens that came waited {early_ms:.0} ms, then {late_ms:.0} ms; the server took on about {:.1} requests/s",
                means[0],
                means[3],
                (sends_per_s - rise_per_s).max(0.0),
            ),
        })
    }
}

/// [`StopRule::Decided`]: each objective's samples, and when to look next.
struct Judge {
    rule: Decide,
    values: Vec<Distribution>,
    seen: u64,
    failed: u64,
    newest_sent_s: f64,
    next_look: u64,
}

/// The first looks, this many requests apart.
const FIRST_LOOKS: u64 = 8;

impl Judge {
    fn new(rule: Decide) -> Judge {
        let values = rule
            .slo
            .objectives
            .iter()
            .map(|_| Distribution::new())
            .collect();
        Judge {
            rule,
            values,
            seen: 0,
            failed: 0,
            newest_sent_s: 0.0,
            next_look: FIRST_LOOKS,
        }
    }

    fn add(&mut self, r: &RequestRecord, done_s: f64) -> Option<Tripped> {
        if !r.succeeded() {
            self.failed += 1; // their latency is the errors rule's
            return None;
        }
        self.newest_sent_s = self.newest_sent_s.max(r.sent_at_us as f64 * 1e-6);
        for (o, d) in self.rule.slo.objectives.iter().zip(&mut self.values) {
            if let Some(v) = o.value_us(r) {
                d.record(v);
            }
        }
        self.seen += 1;
        if self.seen < self.next_look {
            return None;
        }
        self.next_look = (self.seen + FIRST_LOOKS).max(self.seen + self.seen / 4);
        let judged: Vec<ObjectiveResult> = self
            .rule
            .slo
            .objectives
            .iter()
            .zip(&self.values)
            .map(|(o, d)| {
                let estimate = match quantile_of(&o.stat) {
                    Some(q) => d.quantile(q),
                    None if o.stat == "mean" => d.mean(),
                    None => d.quantile(1.0),
                };
                o.judge(d, estimate.map(|v| v / 1e3))
            })
            .collect();
        let tripped = |why: String| Tripped {
            rule: "decided".into(),
            at_s: done_s,
            why,
        };
        let ms = |v: Option<f64>| v.map_or("…".to_string(), |v| format!("{v:.1}"));
        let above = |o: &&ObjectiveResult| match o.stat.as_str() {
            "max" => o.value_ms.is_some_and(|v| v > o.limit_ms),
            _ => o.ci_low_ms.is_some_and(|l| l > o.limit_ms),
        };
        if let Some(o) = judged.iter().find(above) {
            return Some(tripped(format!(
                "not met: {}_{} is {} ms (95 % interval {}–{} ms), above its {} ms, over {} requests",
                o.metric,
                o.stat,
                ms(o.value_ms),
                ms(o.ci_low_ms),
                ms(o.ci_high_ms),
                o.limit_ms,
                o.n.unwrap_or(0)
            )));
        }
        let decidable = self
            .rule
            .slo
            .objectives
            .iter()
            .all(|o| o.metric != SloMetric::Itl && o.stat != "max");
        let within = |o: &ObjectiveResult| o.ci_high_ms.is_some_and(|h| h <= o.limit_ms);
        let failed_share = self.failed as f64 / (self.failed + self.seen) as f64;
        let settled =
            self.newest_sent_s >= self.rule.met_after_s && failed_share <= self.rule.failed_share;
        (decidable && settled && judged.iter().all(within)).then(|| {
            let worst = judged
                .iter()
                .max_by(|a, b| {
                    let r = |o: &ObjectiveResult| o.ci_high_ms.unwrap_or(0.0) / o.limit_ms;
                    r(a).total_cmp(&r(b))
                })
                .expect("an SLO has an objective");
            tripped(format!(
                "met: every objective's 95 % interval lies within its limit, over the requests sent in the first {:.1} s; the closest, {}_{}, is {} ms (up to {} ms) against {} ms, over {} requests",
                self.newest_sent_s,
                worst.metric,
                worst.stat,
                ms(worst.value_ms),
                ms(worst.ci_high_ms),
                worst.limit_ms,
                worst.n.unwrap_or(0)
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: u64, sent_ms: u64, ttft_ms: u64, failed: bool) -> RequestRecord {
        let mut r = RequestRecord::sent(id, sent_ms * 1000, sent_ms * 1000);
        r.first_token_at_us = Some((sent_ms + ttft_ms) * 1000);
        r.done_at_us = (sent_ms + ttft_ms + 100) * 1000;
        if failed {
            r.error_kind = Some(ErrorKind::Http(503));
        }
        r
    }

    #[test]
    fn rules_parse_and_say_what_they_want() {
        assert_eq!(StopRule::parse("saturation"), Ok(StopRule::Saturation));
        assert_eq!(StopRule::parse("errors>5%"), Ok(StopRule::Errors(0.05)));
        for bad in [
            "errors>0%",
            "errors>100%",
            "errors>5",
            "errors>x%",
            "latency",
            "",
        ] {
            let e = StopRule::parse(bad).unwrap_err();
            assert!(e.contains("errors>5%"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_growing_queue_trips_saturation_once_the_run_is_old_enough() {
        let mut b = Breaker::new(vec![StopRule::Saturation]);
        // 20 requests/s, each waiting 0.3 s longer a second later.
        let tripped = (0..2000u64).find_map(|i| {
            let sent = i * 50;
            b.add(&rec(i, sent, 100 + sent * 3 / 10, false))
        });
        let t = tripped.expect("a queue growing at 30 % of the arrivals");
        assert_eq!(t.rule, "saturation");
        assert!(
            (SATURATION_AFTER_S..SATURATION_AFTER_S + 2.0).contains(&t.at_s),
            "{t:?}"
        );
        assert!(t.why.contains("queue was growing"), "{t:?}");
    }

    /// Samples at `rate` sends a second, offered every 0.1 s of the run's
    /// clock, with `waiting_at(t)` waiting and the answers so far
    /// `answers_at(t)` = (count, µs waited in all): when the rule trips.
    fn watch(
        rate: f64,
        waiting_at: impl Fn(f64) -> u64,
        answers_at: impl Fn(f64) -> (u64, u64),
        until_s: f64,
    ) -> Option<Tripped> {
        let mut w = WaitingRise::default();
        (0..(until_s * 10.0) as u64).find_map(|tenth| {
            let t = tenth as f64 / 10.0;
            let (answered, answer_wait_us) = answers_at(t);
            let sample = WaitingSample {
                sent: (t * rate) as u64,
                waiting: waiting_at(t),
                answered,
                answer_wait_us,
            };
            w.add(t, sample)
        })
    }

    /// First come, first served: `lambda` sent a second, `mu` answered,
    /// each answer having waited (1 − μ/λ) of the time since the run began.
    fn queued(lambda: f64, mu: f64) -> impl Fn(f64) -> (u64, u64) {
        move |t: f64| {
            let n = mu * t;
            // Σ waits = Σ over answers i of (1 − μ/λ) × (i / μ) seconds.
            let sum_s = (1.0 - mu / lambda) * n * n / (2.0 * mu);
            (n as u64, (sum_s * 1e6) as u64)
        }
    }

    #[test]
    fn requests_waiting_for_a_first_token_show_a_queue_within_seconds() {
        // 60 sent a second, 40 answered: 20 more waiting each second.
        let t = watch(60.0, |t| (20.0 * t) as u64, queued(60.0, 40.0), 60.0)
            .expect("a queue gaining 20/s");
        assert_eq!(t.rule, "saturation");
        let first = WAITING_AFTER_S + WAITING_WINDOW_S * 0.9;
        assert!((first..first + 1.0).contains(&t.at_s), "{t:?}");
        assert!(t.why.contains("waiting for a first token"), "{t:?}");
        assert!(t.why.contains("about 39.7 requests/s"), "{t:?}");
        // Gaining 5 a second of 60 sent is under a tenth: not called growing …
        let slow = queued(60.0, 55.0);
        assert!(watch(60.0, |t| (5.0 * t) as u64, slow, 60.0).is_none());
        // … nor a rise of a few requests, however steady, at a low rate.
        assert!(watch(2.0, |t| (t / 3.0) as u64, queued(2.0, 1.7), 60.0).is_none());
    }

    #[test]
    fn a_stable_server_with_a_long_ttft_fills_without_tripping() {
        // 4 a second, every first token 8 s after its send: the waiting
        // count rises for 8 s (no answer yet), then holds at 32.
        let waiting = |t: f64| (4.0 * t.min(8.0)) as u64;
        let answers = |t: f64| {
            let n = (4.0 * (t - 8.0)).max(0.0) as u64;
            (n, n * 8_000_000)
        };
        assert!(watch(4.0, waiting, answers, 60.0).is_none());
        // Two kinds of prompt: half answered in 2 s, half in 8 s. The
        // waiting count rises until 8 s while only the short ones answer,
        // each having waited as long as the one before.
        let waiting = |t: f64| (2.0 * t.min(2.0) + 2.0 * t.min(8.0)) as u64;
        let answers = |t: f64| {
            let short = (2.0 * (t - 2.0)).max(0.0) as u64;
            let long = (2.0 * (t - 8.0)).max(0.0) as u64;
            (short + long, short * 2_000_000 + long * 8_000_000)
        };
        assert!(watch(4.0, waiting, answers, 60.0).is_none());
    }

    #[test]
    fn a_waiting_count_that_settles_or_wanders_trips_nothing() {
        // Answers at the send rate, each after 0.5 s.
        let steady = |t: f64| {
            let n = (60.0 * (t - 0.5)).max(0.0) as u64;
            (n, n * 500_000)
        };
        // Rises for its first second (a TTFT), then holds with noise.
        let settles = |t: f64| (30.0 * t.min(1.0)) as u64 + (t * 7919.0) as u64 % 9;
        assert!(watch(60.0, settles, steady, 120.0).is_none());
        // Wanders in slow waves of ±10 requests (a server near its capacity).
        let wanders = |t: f64| (20.0 + 10.0 * (t / 9.0).sin()) as u64;
        assert!(watch(60.0, wanders, steady, 120.0).is_none());
    }

    #[test]
    fn a_server_that_keeps_up_or_a_few_failures_trip_nothing() {
        let mut b = Breaker::new(vec![StopRule::Saturation, StopRule::Errors(0.05)]);
        for i in 0..4000u64 {
            let jitter = (i * 7919) % 90;
            // One failure in 40: 2.5 %, under the rule's 5 %.
            let tripped = b.add(&rec(i, i * 50, 200 + jitter, i % 40 == 0));
            assert!(tripped.is_none(), "{i}: {tripped:?}");
        }
    }

    #[test]
    fn failures_past_the_share_trip_errors_and_cancelled_requests_do_not_count() {
        let mut b = Breaker::new(vec![StopRule::Errors(0.2)]);
        let mut cancelled = rec(0, 0, 10, false);
        cancelled.error_kind = Some(ErrorKind::Cancelled);
        for _ in 0..100 {
            assert!(b.add(&cancelled).is_none());
        }
        let t = (1..200u64)
            .find_map(|i| b.add(&rec(i, i * 10, 10, i % 4 == 0)))
            .expect("one in four failed");
        assert_eq!(t.rule, "errors");
        assert!(t.why.contains("of the last 50 requests failed"), "{t:?}");
    }

    fn decided(slo: &str, met_after_s: f64) -> Breaker {
        Breaker::new(vec![StopRule::Decided(Decide {
            slo: Slo::parse(slo).unwrap(),
            met_after_s,
            failed_share: 0.05,
        })])
    }

    #[test]
    fn a_verdict_far_from_its_limit_is_decided_early_either_way() {
        // TTFT around 100 ms, 10 requests a second.
        let ttft = |i: u64| 95 + (i * 7919) % 11;
        let mut met = decided("ttft_p90=200ms", 5.0);
        let t = (0..1000u64)
            .find_map(|i| met.add(&rec(i, i * 100, ttft(i), false)))
            .expect("decided");
        assert!(t.why.starts_with("met:"), "{t:?}");
        // Not before met_after_s, and not long after.
        assert!((5.0..7.0).contains(&t.at_s), "{t:?}");
        let mut not_met = decided("ttft_p90=50ms", 5.0);
        let t = (0..1000u64)
            .find_map(|i| not_met.add(&rec(i, i * 100, ttft(i), false)))
            .expect("decided");
        assert!(t.why.starts_with("not met: ttft_p90"), "{t:?}");
        assert!(t.at_s < 1.5, "a few requests settle it: {t:?}");
    }

    #[test]
    fn a_max_or_itl_objective_is_never_decided_met() {
        let ttft = |i: u64| 95 + (i * 7919) % 11;
        for slo in ["ttft_max=1s", "ttft_p50=1s,itl_p99=1s"] {
            let mut b = decided(slo, 1.0);
            for i in 0..3000u64 {
                let t = b.add(&rec(i, i * 100, ttft(i), false));
                assert!(t.is_none(), "{slo}: {t:?}");
            }
        }
        // A max above its limit is decided not met by the request that passes it.
        let mut b = decided("ttft_max=104ms", 1.0);
        let t = (0..100u64).find_map(|i| b.add(&rec(i, i * 100, ttft(i), false)));
        assert!(t.unwrap().why.starts_with("not met: ttft_max"));
    }

    #[test]
    fn failed_requests_are_not_judged_and_hold_back_a_verdict_of_met() {
        let mut b = decided("e2e_p50=1ms", 0.0);
        for i in 0..500u64 {
            assert!(b.add(&rec(i, i * 10, 10, true)).is_none());
        }
        // Fast answers, but two in five shed: never decided met.
        let mut b = decided("ttft_p50=1s", 0.0);
        for i in 0..2000u64 {
            let t = b.add(&rec(i, i * 10, 10, i % 5 < 2));
            assert!(t.is_none(), "{i}: {t:?}");
        }
    }
}
