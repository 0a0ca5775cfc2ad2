//! A body read piece by piece up to a limit: what a server sends to a probe
//! or a scrape is kept whole when it fits, and dropped the moment it does
//! not, so an endless or absurd body costs at most the limit in memory.

/// Bytes gathered up to `limit`.
#[derive(Debug)]
pub struct Capped {
    bytes: Vec<u8>,
    limit: usize,
    over: bool,
}

impl Capped {
    pub fn new(limit: usize) -> Capped {
        Capped {
            bytes: Vec::new(),
            limit,
            over: false,
        }
    }

    /// Adds one piece; `false` once the whole would pass the limit (what
    /// was held is let go, and later pieces are refused).
    pub fn push(&mut self, piece: &[u8]) -> bool {
        if self.over || self.bytes.len() + piece.len() > self.limit {
            self.over = true;
            self.bytes = Vec::new();
            return false;
        }
        self.bytes.extend_from_slice(piece);
        true
    }

    /// The whole body, or why there is none: it outgrew the limit.
    pub fn finish(self) -> Result<Vec<u8>, TooLarge> {
        match self.over {
            true => Err(TooLarge { limit: self.limit }),
            false => Ok(self.bytes),
        }
    }
}

/// A body larger than its reader's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the body outgrew {limit} bytes (the limit on it) and was not read further")]
pub struct TooLarge {
    pub limit: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_within_the_limit_is_kept_and_one_past_it_is_let_go() {
        let mut c = Capped::new(8);
        assert!(c.push(b"abcd") && c.push(b"efgh"));
        assert_eq!(c.finish().unwrap(), b"abcdefgh");
        let mut c = Capped::new(8);
        assert!(c.push(b"abcd"));
        assert!(!c.push(b"efghi"));
        assert!(!c.push(b"")); // refused from then on
        assert_eq!(c.bytes.capacity(), 0);
        assert_eq!(c.finish(), Err(TooLarge { limit: 8 }));
    }
}
