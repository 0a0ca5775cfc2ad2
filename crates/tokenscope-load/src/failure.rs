//! A request's record, failed: the one way every path of the client ends
//! a request it could not finish.

use tokenscope_core::clock::Clock;
use tokenscope_core::record::{ErrorKind, RequestRecord};

/// A request that failed before any stream: its record, and no answer.
pub fn fail(
    mut rec: RequestRecord,
    clock: &Clock,
    kind: ErrorKind,
    msg: String,
) -> (RequestRecord, String) {
    rec.done_at_us = clock.now_us();
    rec.error_kind = Some(kind);
    rec.error = Some(msg);
    (rec, String::new())
}
