//! The figures a voice team is judged by (docs/metrics.md, "Speech"),
//! from the speech requests' records:
//!
//! - RTFx, audio seconds per second of processing: per request (its audio
//!   over its send-to-end time) and over the run (all audio over the
//!   measured window), with the real-time factor (its inverse);
//! - the transcript's words a second, from its first delta to its end;
//! - a realtime session's lag behind the speaker, per delta, and the time
//!   from its last audio to `transcription.done`;
//! - text to speech: audio seconds produced per second (its RTFx).
//!
//! And one finding: a realtime transcript that does not keep up, its lag
//! growing along the sessions (the late deltas' lag well over the early
//! ones'), the load it ran at named.

use crate::diagnosis::finding;
use crate::record::RequestRecord;
use crate::results::{Finding, SpeechFigures};
use crate::stats::Distribution;
use serde_json::json;

/// RTFx is kept in thousandths in its histogram.
const RTFX_SCALE: f64 = 1000.0;
/// Sessions a finding needs before it is drawn, and deltas a session needs
/// to be judged.
const MIN_SESSIONS: u64 = 3;
const MIN_DELTAS: usize = 8;
/// The lag grows: the last quarter's mean at least this much over the
/// first quarter's, and by at least [`GROWTH_MIN_US`].
const GROWTH_RATIO: f64 = 2.0;
const GROWTH_MIN_US: f64 = 100_000.0;

/// The speech records, one at a time.
#[derive(Debug, Clone, Default)]
pub struct SpeechTally {
    requests: u64,
    audio_in_s: f64,
    audio_out_s: f64,
    rtfx: Distribution,
    words: u64,
    words_us: u64,
    lag: Distribution,
    final_to_done: Distribution,
    sessions: u64,
    /// Sessions judged for growth, those whose lag grew, and the sums of
    /// their early and late quarters' mean lags (µs).
    judged: u64,
    grew: u64,
    early_us: f64,
    late_us: f64,
}

impl SpeechTally {
    /// Takes one measured record; only succeeded speech requests count.
    pub fn add(&mut self, r: &RequestRecord) {
        let Some(sp) = r.speech.as_deref() else {
            return;
        };
        if !r.succeeded() {
            return;
        }
        self.requests += 1;
        let e2e = r.e2e_us();
        if let Some(x) = sp.rtfx(e2e) {
            self.rtfx.record(x * RTFX_SCALE);
        }
        match sp.words {
            Some(w) => {
                self.audio_in_s += sp.audio_s;
                self.words += w;
                let from = r.first_token_at_us.unwrap_or(r.sent_at_us);
                self.words_us += r.done_at_us.saturating_sub(from);
            }
            None => self.audio_out_s += sp.audio_s,
        }
        if let Some(rt) = &sp.realtime {
            self.sessions += 1;
            // Sent as fast as possible, a delta's lag is the server's
            // backlog of audio it was given at once, not the speaker's:
            // kept on the record, never judged.
            if !rt.paced {
                return;
            }
            self.lag.record_all_us(rt.lags_us.iter().copied());
            if let Some(f) = rt.final_to_done_us {
                self.final_to_done.record_us(f);
            }
            self.judge_growth(&rt.lags_us);
        }
    }

    /// One session's lag, early quarter against late quarter.
    fn judge_growth(&mut self, lags: &[u64]) {
        if lags.len() < MIN_DELTAS {
            return;
        }
        let q = lags.len() / 4;
        let mean = |s: &[u64]| s.iter().sum::<u64>() as f64 / s.len() as f64;
        let (early, late) = (mean(&lags[..q]), mean(&lags[lags.len() - q..]));
        self.judged += 1;
        self.early_us += early;
        self.late_us += late;
        if late >= early * GROWTH_RATIO && late - early >= GROWTH_MIN_US {
            self.grew += 1;
        }
    }

    /// The figures over `window_s` seconds of the run, if any request was a speech one.
    pub fn finish(&self, window_s: f64) -> Option<SpeechFigures> {
        if self.requests == 0 {
            return None;
        }
        let per_s = |x: f64| (window_s > 0.0).then(|| x / window_s);
        let rtfx = self.rtfx.summary(1.0 / RTFX_SCALE);
        Some(SpeechFigures {
            requests: self.requests,
            audio_in_s: self.audio_in_s,
            audio_out_s: self.audio_out_s,
            rtfx,
            rtf_p50: rtfx.filter(|s| s.p50 > 0.0).map(|s| 1.0 / s.p50),
            run_rtfx: per_s(self.audio_in_s + self.audio_out_s),
            words_per_s: (self.words_us > 0)
                .then(|| self.words as f64 / (self.words_us as f64 / 1e6)),
            sessions: self.sessions,
            lag_ms: self.lag.summary(1e-3),
            final_to_done_ms: self.final_to_done.summary(1e-3),
            sessions_lag_grew: self.grew,
            sessions_judged: self.judged,
        })
    }

    /// `realtime_lag_grows`: most judged sessions' transcripts fell behind
    /// the speaker as they went on; `load` names the run's load.
    pub fn findings(&self, load: &str) -> Vec<Finding> {
        if self.judged < MIN_SESSIONS || self.grew * 2 <= self.judged {
            return Vec::new();
        }
        let (early, late) = (
            self.early_us / self.judged as f64,
            self.late_us / self.judged as f64,
        );
        vec![finding(
            "realtime_lag_grows",
            "warning",
            format!(
                "the transcript does not keep up with speech at {load}: in {} of {} realtime sessions the lag grew as they went on (first quarter {:.0} ms, last quarter {:.0} ms on average); the server is behind the speaker, so lower the load or add capacity",
                self.grew, self.judged, early / 1e3, late / 1e3
            ),
            &[
                ("sessions_judged", json!(self.judged)),
                ("sessions_lag_grew", json!(self.grew)),
                ("early_lag_ms", json!(early / 1e3)),
                ("late_lag_ms", json!(late / 1e3)),
                ("rule", json!(format!("last quarter's mean lag ≥ {GROWTH_RATIO}× the first's and ≥ {} ms more, in over half of ≥ {MIN_SESSIONS} sessions of ≥ {MIN_DELTAS} deltas", GROWTH_MIN_US / 1e3))),
                ("load", json!(load)),
            ],
        )]
    }

    /// The lag samples, for an SLO on `lag`.
    pub fn lag(&self) -> &Distribution {
        &self.lag
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{RealtimeSession, Speech};

    fn session(lags: Vec<u64>) -> RequestRecord {
        let mut r = RequestRecord::sent(0, 0, 0);
        r.first_token_at_us = Some(100_000);
        r.done_at_us = 2_000_000;
        r.speech = Some(Box::new(Speech {
            audio_s: 2.0,
            words: Some(10),
            realtime: Some(RealtimeSession {
                lags_us: lags,
                final_to_done_us: Some(50_000),
                paced: true,
                ..Default::default()
            }),
            ..Default::default()
        }));
        r
    }

    #[test]
    fn rtfx_and_words_are_reckoned_from_the_records() {
        let mut t = SpeechTally::default();
        t.add(&session(vec![40_000; 8]));
        let f = t.finish(4.0).unwrap();
        assert_eq!(f.rtfx.unwrap().p50, 1.0); // 2 s of audio in 2 s
        assert_eq!(f.run_rtfx, Some(0.5));
        assert!((f.words_per_s.unwrap() - 10.0 / 1.9).abs() < 1e-9);
        assert_eq!(f.lag_ms.unwrap().p50, 40.0);
        assert!(t.findings("concurrency 4").is_empty());
    }

    #[test]
    fn a_growing_lag_is_found_and_a_steady_one_is_not() {
        let mut t = SpeechTally::default();
        for _ in 0..3 {
            t.add(&session((0..16).map(|k| 40_000 + k * 40_000).collect()));
        }
        let f = t.findings("concurrency 8");
        assert_eq!(f.len(), 1);
        assert!(f[0].message.contains("concurrency 8"), "{}", f[0].message);
        let mut steady = SpeechTally::default();
        for _ in 0..3 {
            steady.add(&session(vec![400_000; 16]));
        }
        assert!(steady.findings("x").is_empty());
        // Sent as fast as possible, the lag grows by construction: not judged.
        let mut fast = SpeechTally::default();
        for _ in 0..3 {
            let mut r = session((0..16).map(|k| 40_000 + k * 40_000).collect());
            if let Some(rt) = r.speech.as_mut().and_then(|s| s.realtime.as_mut()) {
                rt.paced = false;
            }
            fast.add(&r);
        }
        assert!(fast.findings("x").is_empty());
        assert!(fast.finish(1.0).unwrap().lag_ms.is_none());
    }
}
