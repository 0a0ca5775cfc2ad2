//! Durations as people type them on a command line (`500ms`, `1.5s`, `2m`).

use std::time::Duration;

/// The longest duration accepted (a year): past it a typo, never a plan.
pub const MAX_SECS: f64 = 365.0 * 86_400.0;

/// `--duration forever`: a run that goes on until Ctrl-C or SIGTERM (a
/// soak test, a canary). Longer than any parsed duration, short enough
/// that the clock's arithmetic never overflows.
pub const FOREVER: Duration = Duration::from_secs(100 * 365 * 86_400);

/// Whether a run length is [`FOREVER`].
pub fn is_forever(d: Duration) -> bool {
    d >= FOREVER
}

/// A run's length: [`parse_duration`]'s forms, or `forever`.
pub fn parse_run_length(text: &str) -> Result<Duration, String> {
    match text.trim() {
        "forever" | "inf" | "infinite" => Ok(FOREVER),
        _ => parse_duration(text),
    }
}

/// Parses `250ms`, `1.5s`, `2m`, `100us`; a bare number is seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (try 500ms, 1.5s, 2m)"))?;
    let secs = match unit.trim() {
        "" | "s" | "sec" => value,
        "ms" => value / 1e3,
        "us" | "µs" => value / 1e6,
        "ns" => value / 1e9,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        other => {
            return Err(format!(
                "unknown unit `{other}` in `{text}` (use ns, us, ms, s, m, h)"
            ))
        }
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("`{text}` is not a valid duration"));
    }
    if secs > MAX_SECS {
        return Err(format!(
            "`{text}` is longer than a year; nothing here waits that long"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("5parsecs").is_err());
        assert!(parse_duration("99999999999999999999999h").is_err());
        assert!(parse_duration("400d").is_err());
        assert!(parse_duration("forever").is_err());
        assert!(is_forever(parse_run_length("forever").unwrap()));
        assert_eq!(
            parse_run_length("24h").unwrap(),
            Duration::from_secs(86_400)
        );
        assert!(!is_forever(parse_run_length("8760h").unwrap()));
    }
}
