//! Sessions (`--multi-turn`), an agent's tasks among them: how long a whole
//! session took from its first send to its last answer, how many requests
//! it made (tool rounds among them), and where its time went — the server,
//! the tools, the rest (the user's think time, the client's gaps). Each
//! session's last record carries its figures, so memory stays flat.

use crate::record::RequestRecord;
use crate::results::SessionFigures;
use crate::stats::Distribution;

/// The finished sessions, one last record at a time.
#[derive(Debug, Clone, Default)]
pub struct SessionTally {
    sessions: u64,
    requests: u64,
    tool_rounds: u64,
    e2e: Distribution,
    e2e_us: u64,
    server_us: u64,
    tool_us: u64,
}

impl SessionTally {
    /// Takes one measured record (a session's last carries its figures).
    pub fn add(&mut self, r: &RequestRecord) {
        let Some(e) = r.session_end else { return };
        self.sessions += 1;
        self.requests += e.requests as u64;
        self.tool_rounds += e.tool_rounds as u64;
        self.e2e.record_us(e.e2e_us);
        self.e2e_us += e.e2e_us;
        self.server_us += e.server_us;
        self.tool_us += e.tool_us;
    }

    /// The figures, when any session ended.
    pub fn finish(&self) -> Option<SessionFigures> {
        let n = self.sessions;
        let total = self.e2e_us.max(1) as f64;
        let share = |us: u64| us as f64 / total;
        (n > 0).then(|| SessionFigures {
            sessions: n,
            requests_per_session: self.requests as f64 / n as f64,
            tool_rounds_per_session: self.tool_rounds as f64 / n as f64,
            e2e_ms: self.e2e.summary(1e-3),
            server_share: share(self.server_us),
            tool_share: share(self.tool_us),
            other_share: share(self.e2e_us.saturating_sub(self.server_us + self.tool_us)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::SessionEnd;

    #[test]
    fn sessions_are_taken_from_their_last_records() {
        let mut t = SessionTally::default();
        let mut r = RequestRecord::sent(0, 0, 0);
        t.add(&r);
        assert!(t.finish().is_none());
        r.session_end = Some(SessionEnd {
            requests: 3,
            tool_rounds: 1,
            e2e_us: 100_000,
            server_us: 60_000,
            tool_us: 30_000,
        });
        t.add(&r);
        let f = t.finish().unwrap();
        assert_eq!((f.sessions, f.requests_per_session), (1, 3.0));
        assert!((f.server_share - 0.6).abs() < 1e-9 && (f.other_share - 0.1).abs() < 1e-9);
        assert!((f.e2e_ms.unwrap().p50 - 100.0).abs() < 0.1);
    }
}
