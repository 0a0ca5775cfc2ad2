//! Server-sent events, parsed incrementally from bytes as they arrive.
//!
//! Written here rather than taken from a crate because the timing model needs
//! it: every event of one network read shares that read's arrival instant, and
//! the parser must not copy or allocate per event on the per-token path.
//! Follows the WHATWG event-stream rules: lines end in CRLF, LF or CR (also when
//! a CRLF is split across reads); `:` starts a comment; `data:` lines of one
//! event are joined with `\n`; a blank line dispatches; one space after the
//! colon is dropped; unknown fields are ignored.
//!
//! A hostile or broken server may send a line that never ends, or `data:`
//! lines that never reach a blank line: the parser holds at most
//! [`MAX_EVENT_BYTES`] of one line or event. Past that it stops — no event
//! is dispatched again — and [`SseParser::overflow`] says so, so the request
//! fails (`too_large`) with the limit named and the run goes on.

/// One dispatched event. `event` is the `event:` field, if any.
#[derive(Debug, PartialEq, Eq)]
pub struct SseEvent<'a> {
    pub event: Option<&'a str>,
    pub data: &'a str,
}

/// The most bytes one line or one event (its `data:` lines joined) may
/// hold: 8 MiB, some thirty times the largest event a real server sends
/// (an OpenAI Responses `response.completed` carrying a long answer whole).
pub const MAX_EVENT_BYTES: usize = 8 << 20;

/// A line or event that outgrew [`MAX_EVENT_BYTES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "an event-stream line or event grew past {limit} bytes without ending (the limit on one event)"
)]
pub struct EventTooLarge {
    pub limit: usize,
}

#[derive(Debug)]
pub struct SseParser {
    /// A line not yet terminated at the end of the previous read.
    partial: Vec<u8>,
    /// `data:` values of the event being built, joined with `\n`.
    data: String,
    has_data: bool,
    event: Option<String>,
    /// The previous read ended in `\r`: a leading `\n` now belongs to it.
    after_cr: bool,
    /// A line or event outgrew the limit: nothing more is parsed.
    overflow: Option<EventTooLarge>,
    /// The limit (`MAX_EVENT_BYTES`; smaller in tests).
    limit: usize,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::with_limit(MAX_EVENT_BYTES)
    }
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// A parser that holds at most `limit` bytes of one line or event.
    pub fn with_limit(limit: usize) -> Self {
        SseParser {
            partial: Vec::new(),
            data: String::new(),
            has_data: false,
            event: None,
            after_cr: false,
            overflow: None,
            limit,
        }
    }

    /// The line or event that outgrew the limit, once one has: the stream
    /// cannot be read further.
    pub fn overflow(&self) -> Option<EventTooLarge> {
        self.overflow
    }

    /// Feeds one read; calls `on_event` for each event it completes.
    pub fn feed(&mut self, mut bytes: &[u8], mut on_event: impl FnMut(SseEvent<'_>)) {
        if self.overflow.is_some() {
            return;
        }
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
            }
        }
        while let Some(end) = memchr::memchr2(b'\n', b'\r', bytes) {
            let (line, rest) = bytes.split_at(end);
            let mut rest = &rest[1..];
            if bytes[end] == b'\r' {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            if self.partial.len() + line.len() > self.limit {
                return self.overflowed();
            }
            if self.partial.is_empty() {
                self.line(line, &mut on_event);
            } else {
                let mut whole = std::mem::take(&mut self.partial);
                whole.extend_from_slice(line);
                self.line(&whole, &mut on_event);
                whole.clear();
                self.partial = whole; // keep the allocation
            }
            if self.data.len() > self.limit {
                return self.overflowed();
            }
            bytes = rest;
        }
        if self.partial.len() + bytes.len() > self.limit {
            return self.overflowed();
        }
        self.partial.extend_from_slice(bytes);
    }

    /// Drops what was held and stops parsing.
    fn overflowed(&mut self) {
        self.overflow = Some(EventTooLarge { limit: self.limit });
        self.partial = Vec::new();
        self.data = String::new();
        self.has_data = false;
    }

    /// The stream ended. A last event without its blank line is still
    /// dispatched: servers that omit the final terminator lose nothing.
    pub fn finish(&mut self, mut on_event: impl FnMut(SseEvent<'_>)) {
        if self.overflow.is_some() {
            return;
        }
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            self.line(&line, &mut on_event);
        }
        self.line(b"", &mut on_event);
    }

    fn line(&mut self, line: &[u8], on_event: &mut impl FnMut(SseEvent<'_>)) {
        if line.is_empty() {
            if self.has_data {
                on_event(SseEvent {
                    event: self.event.as_deref(),
                    data: &self.data,
                });
            }
            self.data.clear();
            self.has_data = false;
            self.event = None;
            return;
        }
        if line[0] == b':' {
            return; // comment (keep-alive ping)
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.has_data = true;
                match std::str::from_utf8(value) {
                    Ok(s) => self.data.push_str(s),
                    Err(_) => self.data.push_str(&String::from_utf8_lossy(value)),
                }
            }
            b"event" => self.event = Some(String::from_utf8_lossy(value).into_owned()),
            _ => {} // id, retry and unknown fields carry nothing we time
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_reads(reads: &[&[u8]]) -> Vec<(Option<String>, String)> {
        let mut p = SseParser::new();
        let mut out = vec![];
        for r in reads {
            p.feed(r, |e| {
                out.push((e.event.map(str::to_owned), e.data.to_owned()))
            });
        }
        p.finish(|e| out.push((e.event.map(str::to_owned), e.data.to_owned())));
        out
    }

    fn datas(reads: &[&[u8]]) -> Vec<String> {
        parse_reads(reads).into_iter().map(|(_, d)| d).collect()
    }

    #[test]
    fn one_event_per_read() {
        assert_eq!(
            datas(&[b"data: {\"a\":1}\n\n", b"data: [DONE]\n\n"]),
            ["{\"a\":1}", "[DONE]"]
        );
    }

    #[test]
    fn event_split_across_reads() {
        assert_eq!(datas(&[b"da", b"ta: hel", b"lo\n", b"\n"]), ["hello"]);
    }

    #[test]
    fn many_events_in_one_read() {
        assert_eq!(
            datas(&[b"data: 1\n\ndata: 2\n\ndata: 3\n\n"]),
            ["1", "2", "3"]
        );
    }

    #[test]
    fn crlf_and_cr_line_endings() {
        assert_eq!(
            datas(&[b"data: a\r\n\r\ndata: b\r\rdata: c\n\n"]),
            ["a", "b", "c"]
        );
    }

    #[test]
    fn crlf_split_between_reads() {
        // The \r ends one read and the \n starts the next: one line end, not two.
        assert_eq!(datas(&[b"data: a\r", b"\ndata: b\r\n\r\n"]), ["a\nb"]);
    }

    #[test]
    fn comments_are_ignored() {
        assert_eq!(datas(&[b": ping\n\n:\n\ndata: x\n\n"]), ["x"]);
    }

    #[test]
    fn event_lines_are_reported() {
        let events = parse_reads(&[b"event: error\ndata: {\"m\":1}\n\ndata: y\n\n"]);
        assert_eq!(events[0], (Some("error".into()), "{\"m\":1}".into()));
        assert_eq!(events[1], (None, "y".into()));
    }

    #[test]
    fn multi_line_data_is_joined() {
        assert_eq!(
            datas(&[b"data: {\ndata:  \"a\": 1\ndata: }\n\n"]),
            ["{\n \"a\": 1\n}"]
        );
    }

    #[test]
    fn no_space_after_colon_and_ids_ignored() {
        assert_eq!(datas(&[b"id: 7\nretry: 10\ndata:x\n\n"]), ["x"]);
    }

    #[test]
    fn unterminated_last_event_is_kept() {
        assert_eq!(datas(&[b"data: 1\n\ndata: [DONE]"]), ["1", "[DONE]"]);
    }

    #[test]
    fn blank_lines_without_data_dispatch_nothing() {
        assert!(datas(&[b"\n\n\r\n"]).is_empty());
    }

    #[test]
    fn a_line_that_never_ends_stops_the_parser_at_its_limit() {
        let mut p = SseParser::with_limit(64);
        let mut seen = 0;
        p.feed(b"data: 1\n\ndata: ", |_| seen += 1);
        // An endless line, a read at a time: held up to the limit, then dropped.
        for _ in 0..100 {
            p.feed(&[b'x'; 16], |_| seen += 1);
        }
        assert_eq!(p.overflow(), Some(EventTooLarge { limit: 64 }));
        assert!(p.partial.capacity() == 0 && p.data.capacity() == 0);
        // Nothing more is dispatched, even a good event or the end.
        p.feed(b"\n\ndata: 2\n\n", |_| seen += 1);
        p.finish(|_| seen += 1);
        assert_eq!(seen, 1);
    }

    #[test]
    fn an_event_of_endless_data_lines_stops_at_its_limit() {
        // Each line is short; the event they build never reaches a blank line.
        let mut p = SseParser::with_limit(64);
        let mut seen = 0;
        for _ in 0..20 {
            p.feed(b"data: 0123456789\n", |_| seen += 1);
        }
        assert!(p.overflow().is_some());
        assert_eq!(seen, 0);
        // An event at the limit is still whole.
        let mut p = SseParser::with_limit(64);
        let mut got = String::new();
        p.feed(format!("data: {}\n\n", "y".repeat(58)).as_bytes(), |e| {
            got = e.data.to_owned()
        });
        assert_eq!((p.overflow(), got.len()), (None, 58));
    }

    #[test]
    fn invalid_utf8_is_replaced_not_fatal() {
        assert_eq!(datas(&[b"data: a\xffb\n\n"]), ["a\u{fffd}b"]);
    }
}
