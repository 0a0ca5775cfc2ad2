//! Text to speech's answer (`--api openai-speech`): audio bytes, not
//! events. Timed to the first byte of audio and the last; the bytes are
//! counted, not kept (only the header's first bytes, for the audio's
//! seconds), so an endless answer costs no memory and ends at --timeout.

use crate::http1::{Body, Conn};
use crate::target::Target;
use tokenscope_core::clock::Clock;
use tokenscope_core::record::{ErrorKind, RequestRecord, Speech};
use tokio::time::{timeout_at, Instant};
use tokio_util::sync::CancellationToken;

/// The header bytes kept to read the audio's format from.
const HEAD_BYTES: usize = 4096;

/// What came so far.
#[derive(Default)]
struct Heard {
    head: Vec<u8>,
    total: u64,
    first_at: Option<u64>,
}

impl Heard {
    fn take(&mut self, d: &[u8], at: u64) {
        if d.is_empty() {
            return;
        }
        self.first_at.get_or_insert(at);
        let room = HEAD_BYTES.saturating_sub(self.head.len());
        self.head.extend_from_slice(&d[..room.min(d.len())]);
        self.total = self.total.saturating_add(d.len() as u64);
    }
}

/// Reads the audio to its end; `at` stamps the bytes that came with the head.
pub(crate) async fn read(
    mut rec: RequestRecord,
    (mut conn, mut body, content_type): (Conn, Body, Option<String>),
    (target, clock, cancel, deadline): (&Target, &Clock, &CancellationToken, Instant),
    at: u64,
) -> (RequestRecord, String) {
    if let Some(kind) = content_type.filter(|c| c.contains("json") || c.contains("text/")) {
        let msg = format!("asked for audio, got a `{kind}` body: not speech");
        return crate::failure::fail(rec, clock, ErrorKind::Malformed, msg);
    }
    let mut heard = Heard::default();
    let mut last_at = at;
    let mut ended = match conn.decode(&mut body, |d| heard.take(d, at)) {
        Ok(e) => e,
        Err(e) => return crate::failure::fail(rec, clock, ErrorKind::Stream, e.to_string()),
    };
    while !ended {
        let until = deadline.min(Instant::now() + target.idle_timeout);
        let read = tokio::select! {
            biased;
            _ = cancel.cancelled() => return crate::failure::fail(rec, clock, ErrorKind::Cancelled, "cancelled mid-answer".into()),
            r = timeout_at(until, conn.fill()) => r,
        };
        let n = match read {
            Err(_) if Instant::now() >= deadline => {
                return crate::failure::fail(
                    rec,
                    clock,
                    ErrorKind::Timeout,
                    "request exceeded --timeout".into(),
                )
            }
            Err(_) => {
                return crate::failure::fail(
                    rec,
                    clock,
                    ErrorKind::Timeout,
                    "audio stalled past --idle-timeout".into(),
                )
            }
            Ok(Err(e)) => {
                return crate::failure::fail(rec, clock, ErrorKind::Stream, e.to_string())
            }
            Ok(Ok(n)) => n,
        };
        let now = std::time::Instant::now();
        let at = clock.us(conn.arrived().unwrap_or(now)).max(last_at);
        last_at = at;
        let decoded = match n {
            0 => body.eof().map(|()| true),
            _ => conn.decode(&mut body, |d| heard.take(d, at)),
        };
        ended = match decoded {
            Ok(e) => e,
            Err(e) => return crate::failure::fail(rec, clock, ErrorKind::Stream, e.to_string()),
        };
    }
    if body.reusable() {
        target.http.checkin(conn);
    }
    rec.done_at_us = last_at;
    let Some(first) = heard.first_at else {
        return crate::failure::fail(
            rec,
            clock,
            ErrorKind::EmptyAnswer,
            "the answer carried no audio".into(),
        );
    };
    rec.first_token_at_us = Some(first);
    rec.first_answer_at_us = Some(first);
    match tokenscope_workload::audio_len::wav_stream_seconds(&heard.head, heard.total) {
        Ok(s) => {
            rec.speech = Some(Box::new(Speech {
                audio_s: s,
                ..Speech::default()
            }))
        }
        Err(why) => {
            let msg = format!("the audio's length cannot be read ({why}); tokenscope asks for WAV");
            return crate::failure::fail(rec, clock, ErrorKind::Malformed, msg);
        }
    }
    (rec, String::new())
}
