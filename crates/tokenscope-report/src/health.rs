//! Health bands: the colours of the report's cards and the live dashboard.
//! GPU utilisation uses the seed's bands (< 50 % waste, 70–90 % healthy,
//! > 90 % saturated); the rest are stated here.

/// A band, worst last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Health {
    /// Nothing to judge it by.
    Unknown,
    Good,
    Warn,
    Bad,
}

impl Health {
    /// CSS colour.
    pub fn css(self) -> &'static str {
        match self {
            Health::Unknown => "#57606a",
            Health::Good => "#1a7f37",
            Health::Warn => "#bf8700",
            Health::Bad => "#cf222e",
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            Health::Unknown => "",
            Health::Good => "healthy",
            Health::Warn => "watch",
            Health::Bad => "act",
        }
    }
}

/// GPU utilisation (%): < 50 waste, 50–70 room for more load, 70–90
/// healthy, > 90 saturated (latency risk).
pub fn gpu_util(pct: f64) -> (Health, &'static str) {
    if pct < 50.0 {
        (Health::Bad, "waste: review batching")
    } else if pct < 70.0 {
        (Health::Warn, "room for more load")
    } else if pct <= 90.0 {
        (Health::Good, "healthy")
    } else {
        (Health::Warn, "saturated: latency risk")
    }
}

/// KV-cache usage (0–1) and preemptions: any preemption is recompute work
/// thrown away; above 90 % the next burst preempts.
pub fn kv_cache(usage: f64, preemptions: f64) -> (Health, &'static str) {
    if preemptions > 0.0 {
        (Health::Bad, "preempting: KV cache too small for the load")
    } else if usage > 0.9 {
        (Health::Warn, "little headroom")
    } else {
        (Health::Good, "headroom")
    }
}

/// Share of requests that failed.
pub fn failures(failed: u64, total: u64) -> Health {
    if total == 0 {
        Health::Unknown
    } else if failed == 0 {
        Health::Good
    } else if failed * 100 <= total {
        Health::Warn
    } else {
        Health::Bad
    }
}

/// Requests waiting in the server's queue: a queue that stays is overload.
pub fn waiting(n: f64) -> Health {
    if n <= 0.0 {
        Health::Good
    } else if n < 5.0 {
        Health::Warn
    } else {
        Health::Bad
    }
}

/// A latency against its SLO limit, when there is one.
pub fn against_limit(value: f64, limit: Option<f64>) -> Health {
    match limit {
        None => Health::Unknown,
        Some(l) if value <= l * 0.8 => Health::Good,
        Some(l) if value <= l => Health::Warn,
        Some(_) => Health::Bad,
    }
}
