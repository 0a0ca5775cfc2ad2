//! How each request names itself to the server, so that a slow request
//! found in tokenscope's records can be found in the server's own logs
//! and traces, and the other way round.
//!
//! - `X-Request-Id` (the name can be changed): vLLM, SGLang and most
//!   gateways log it, and vLLM echoes it (`--enable-request-id-headers`);
//!   AIPerf sends the same header.
//! - With `--trace-context`, a W3C `traceparent` (version 00, sampled), so
//!   a server that traces (vLLM's `--otlp-traces-endpoint`) makes its spans
//!   children of the client's: the client span tokenscope exports with
//!   `--otlp-endpoint` has the same trace and span id.
//!
//! Ids are made from a number drawn once per run and the request's record
//! id: unique across runs and shards, the same for a request sent again
//! on a fresh connection, and computed without any state on the per-request
//! path.

use crate::draw::mix;

/// The run's request naming, the same for every request.
#[derive(Debug, Clone)]
pub struct RequestIds {
    /// The header's name, lower case (`x-request-id`); `None` sends none.
    header: Option<String>,
    /// Drawn once per run; never 0, so no trace id is all zeros.
    run: u64,
    trace_context: bool,
}

impl RequestIds {
    /// `header` as given on the command line (`none` for no header).
    pub fn new(header: Option<&str>, trace_context: bool) -> RequestIds {
        RequestIds {
            header: header.map(str::to_ascii_lowercase),
            run: run_number(),
            trace_context,
        }
    }

    /// With a given run number (tests, and a resumed run's own).
    pub fn with_run(header: Option<&str>, trace_context: bool, run: u64) -> RequestIds {
        RequestIds {
            run: run.max(1),
            ..RequestIds::new(header, trace_context)
        }
    }

    /// Whether any header is sent.
    pub fn sends_any(&self) -> bool {
        self.header.is_some() || self.trace_context
    }

    /// The request id of record `n`: `ts-RUN-N`, RUN as 16 hex digits.
    pub fn id(&self, n: u64) -> String {
        format!("ts-{:016x}-{n}", self.run)
    }

    /// Record `n`'s W3C `traceparent`: `00-TRACE-SPAN-01`, its trace id
    /// the run's number (so one run's traces share a prefix) then 64 bits
    /// mixed from the run's and the record's (random-looking, as W3C level 2
    /// and ratio samplers want them there; distinct for each record), its
    /// span id mixed likewise (never 0).
    pub fn traceparent(&self, n: u64) -> String {
        format!(
            "00-{:016x}{:016x}-{:016x}-01",
            self.run,
            mix(self.run ^ mix(n)),
            span_id(self.run, n)
        )
    }

    /// The header lines record `n` adds to its request, each ending in CRLF;
    /// with the values the record keeps (`request_id`, `traceparent`).
    pub fn head(&self, n: u64) -> (Vec<u8>, Option<String>, Option<String>) {
        let mut lines = Vec::new();
        let id = self.header.as_ref().map(|name| {
            let id = self.id(n);
            lines.extend_from_slice(format!("{name}: {id}\r\n").as_bytes());
            id
        });
        let parent = self.trace_context.then(|| {
            let p = self.traceparent(n);
            lines.extend_from_slice(format!("traceparent: {p}\r\n").as_bytes());
            p
        });
        (lines, id, parent)
    }
}

/// Headers tokenscope sets on every request itself: a user's header of
/// one of these names would be sent twice (framing broken, or two ids).
pub const SET_BY_TOKENSCOPE: [&str; 7] = [
    "host",
    "content-length",
    "content-type",
    "transfer-encoding",
    "connection",
    "authorization",
    "traceparent",
];

/// A header's name as tokenscope sends one: letters, digits, `-`, `_`.
pub fn is_header_name(k: &str) -> bool {
    !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b))
}

/// One of [`SET_BY_TOKENSCOPE`], whatever its case.
pub fn set_by_tokenscope(k: &str) -> bool {
    SET_BY_TOKENSCOPE.contains(&k.to_ascii_lowercase().as_str())
}

/// A trace context's parts, read back from a `traceparent` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: u128,
    pub span_id: u64,
    pub sampled: bool,
}

impl TraceParent {
    /// Parses `00-<32 hex>-<16 hex>-<2 hex>` as W3C Trace Context level 1
    /// has it: lower-case hex, neither id all zeros, version `ff` invalid.
    pub fn parse(s: &str) -> Result<TraceParent, String> {
        let parts: Vec<&str> = s.trim().split('-').collect();
        let hex = |p: &str, len: usize| {
            p.len() == len
                && p.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        match parts[..] {
            [v, t, p, f] if hex(v, 2) && v != "ff" && hex(t, 32) && hex(p, 16) && hex(f, 2) => {
                let trace_id = u128::from_str_radix(t, 16).map_err(|e| e.to_string())?;
                let span_id = u64::from_str_radix(p, 16).map_err(|e| e.to_string())?;
                let flags = u8::from_str_radix(f, 16).map_err(|e| e.to_string())?;
                match trace_id != 0 && span_id != 0 {
                    true => Ok(TraceParent {
                        trace_id,
                        span_id,
                        sampled: flags & 1 == 1,
                    }),
                    false => Err(format!("{s:?}: an all-zero trace or span id")),
                }
            }
            _ => Err(format!(
                "{s:?}: not version-trace-span-flags in lower-case hex"
            )),
        }
    }
}

/// A number for this run: the wall clock's nanoseconds and the process id,
/// mixed; never 0.
fn run_number() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    mix(nanos ^ (u64::from(std::process::id()) << 32)).max(1)
}

/// The span id of record `n` in run `run`: never 0.
fn span_id(run: u64, n: u64) -> u64 {
    mix(run ^ mix(n)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_request_has_its_id_and_a_traceparent_that_parses_back() {
        let ids = RequestIds::with_run(Some("X-Request-Id"), true, 0xabc);
        let (head, id, parent) = ids.head(7);
        assert_eq!(id.as_deref(), Some("ts-0000000000000abc-7"));
        let parent = parent.unwrap();
        let text = String::from_utf8(head).unwrap();
        assert_eq!(
            text,
            format!("x-request-id: ts-0000000000000abc-7\r\ntraceparent: {parent}\r\n")
        );
        let p = TraceParent::parse(&parent).unwrap();
        assert_eq!(p.trace_id >> 64, 0xabc, "the run's prefix");
        let lows: std::collections::HashSet<u64> = (0..10_000)
            .map(|n| TraceParent::parse(&ids.traceparent(n)).unwrap().trace_id as u64)
            .collect();
        assert_eq!(lows.len(), 10_000, "each record its own trace");
        assert!(p.sampled && p.span_id != 0);
        assert_ne!(ids.traceparent(8), parent, "each request its own");
    }

    #[test]
    fn no_header_and_no_context_send_nothing() {
        let ids = RequestIds::with_run(None, false, 1);
        assert!(!ids.sends_any());
        assert_eq!(ids.head(1), (Vec::new(), None, None));
    }

    #[test]
    fn a_broken_traceparent_is_refused_with_why() {
        for bad in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-zz-zz",
        ] {
            assert!(TraceParent::parse(bad).is_err(), "{bad:?}");
        }
        let ok = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        assert_eq!(TraceParent::parse(ok).unwrap().span_id, 0xb7ad6b7169203331);
    }

    #[test]
    fn runs_draw_different_numbers() {
        let a = RequestIds::new(Some("x-request-id"), false);
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = RequestIds::new(Some("x-request-id"), false);
        assert_ne!(a.id(1), b.id(1));
    }
}
