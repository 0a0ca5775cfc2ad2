//! Server-sent events, parsed incrementally from bytes as they arrive.
//!
//! Written here rather than taken from a crate because the timing model needs
//! it: every event of one network read shares that read's arrival instant, and
//! the parser must not copy or allocate per event on the per-token path.
//! Follows the WHATWG event-stream rules: lines end in CRLF, LF or CR (also when
//! a CRLF is split across reads); `:` starts a comment; `data:` lines of one
//! event are joined with `\n`; a blank line dispatches; one space after the
//! colon is dropped; unknown fields are ignored.

/// One dispatched event. `event` is the `event:` field, if any.
#[derive(Debug, PartialEq, Eq)]
pub struct SseEvent<'a> {
    pub event: Option<&'a str>,
    pub data: &'a str,
}

#[derive(Debug, Default)]
pub struct SseParser {
    /// A line not yet terminated at the end of the previous read.
    partial: Vec<u8>,
    /// `data:` values of the event being built, joined with `\n`.
    data: String,
    has_data: bool,
    event: Option<String>,
    /// The previous read ended in `\r`: a leading `\n` now belongs to it.
    after_cr: bool,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one read; calls `on_event` for each event it completes.
    pub fn feed(&mut self, mut bytes: &[u8], mut on_event: impl FnMut(SseEvent<'_>)) {
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
            if self.partial.is_empty() {
                self.line(line, &mut on_event);
            } else {
                let mut whole = std::mem::take(&mut self.partial);
                whole.extend_from_slice(line);
                self.line(&whole, &mut on_event);
                whole.clear();
                self.partial = whole; // keep the allocation
            }
            bytes = rest;
        }
        self.partial.extend_from_slice(bytes);
    }

    /// The stream ended. A last event without its blank line is still
    /// dispatched: servers that omit the final terminator lose nothing.
    pub fn finish(&mut self, mut on_event: impl FnMut(SseEvent<'_>)) {
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
    fn invalid_utf8_is_replaced_not_fatal() {
        assert_eq!(datas(&[b"data: a\xffb\n\n"]), ["a\u{fffd}b"]);
    }
}
