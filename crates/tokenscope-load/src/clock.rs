//! The run's one monotonic clock: every instant is microseconds since its start.

use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
}

impl Clock {
    pub fn start() -> Self {
        Clock {
            start: Instant::now(),
        }
    }

    pub fn origin(&self) -> Instant {
        self.start
    }

    pub fn now_us(&self) -> u64 {
        self.us(Instant::now())
    }

    pub fn us(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.start).as_micros() as u64
    }

    pub fn at(&self, offset: Duration) -> Instant {
        self.start + offset
    }
}
