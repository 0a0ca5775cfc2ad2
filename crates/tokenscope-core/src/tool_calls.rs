//! Tool calls (`--tools`): how many calls the answers made, how many had
//! arguments valid against their tool, and how soon the first call came.

use crate::formats::{wilson, Reasons};
use crate::record::RequestRecord;
use crate::results::ToolCallFigures;
use crate::stats::Distribution;

/// The successful requests' tool calls, gathered one record at a time.
#[derive(Debug, Clone, Default)]
pub struct ToolTally {
    requests: u64,
    requests_with_calls: u64,
    calls: u64,
    valid: u64,
    reasons: Reasons,
    first_call: Distribution,
}

impl ToolTally {
    /// Takes one successful measured record.
    pub fn add(&mut self, r: &RequestRecord) {
        if r.tools_offered.is_none() {
            return;
        }
        self.requests += 1;
        self.requests_with_calls += u64::from(!r.tool_calls.is_empty());
        for call in &r.tool_calls {
            self.calls += 1;
            match call.valid {
                true => self.valid += 1,
                false => self.reasons.add(call.error.as_deref().unwrap_or("")),
            }
        }
        if let Some(at) = r.first_tool_call_at_us {
            self.first_call.record_us(at.saturating_sub(r.sent_at_us));
        }
    }

    /// The figures, when any request offered tools.
    pub fn finish(&self) -> Option<ToolCallFigures> {
        (self.requests > 0).then(|| ToolCallFigures {
            requests: self.requests,
            requests_with_calls: self.requests_with_calls,
            calls: self.calls,
            calls_per_request: self.calls as f64 / self.requests as f64,
            valid: self.valid,
            valid_share: match self.calls {
                0 => 0.0,
                n => self.valid as f64 / n as f64,
            },
            valid_share_ci95: wilson(self.valid, self.calls),
            failures: self.reasons.list(),
            time_to_first_call_ms: self.first_call.summary(1e-3),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::ToolCallMade;

    #[test]
    fn calls_are_counted_and_judged_and_missing_ones_seen() {
        let mut t = ToolTally::default();
        let call = |valid, error: Option<&str>| ToolCallMade {
            name: "f".into(),
            valid,
            error: error.map(str::to_owned),
            ..ToolCallMade::default()
        };
        let mut r = RequestRecord::sent(0, 0, 1_000);
        t.add(&r); // no tools offered: not counted
        r.tools_offered = Some(2);
        r.first_tool_call_at_us = Some(5_000);
        r.tool_calls = vec![call(true, None), call(false, Some("not JSON"))];
        t.add(&r);
        r.tool_calls.clear();
        r.first_tool_call_at_us = None;
        t.add(&r);
        let f = t.finish().unwrap();
        assert_eq!((f.requests, f.requests_with_calls, f.calls), (2, 1, 2));
        assert_eq!(f.valid, 1);
        assert_eq!(f.failures[0].reason, "not JSON");
        assert!((f.valid_share - 0.5).abs() < 1e-9);
        let ttfc = f.time_to_first_call_ms.unwrap();
        assert!((ttfc.p50 - 4.0).abs() < 0.01, "{ttfc:?}");
    }
}
