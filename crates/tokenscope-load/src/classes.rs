//! `--class NAME:SHARE[:priority=N][:header=K=V]…[:slo=SPEC]`: traffic of
//! several kinds in one run, as production mixes them (an interactive
//! tier beside a batch tier). Each request draws its class from the seed;
//! the class's `priority` goes in the body as vLLM's field (its
//! `--scheduling-policy priority` serves the lowest value first), and its
//! headers with the request (llm-d's priority and fairness headers).
//! Figures, SLOs and findings are then given per class.

use crate::draw::{mix, unit};

/// One class of traffic.
#[derive(Debug, Clone, PartialEq)]
pub struct TrafficClass {
    pub name: String,
    /// Its share of the requests, as given (the shares are weighed against
    /// their sum).
    pub share: f64,
    /// vLLM's `priority`: lower is served first.
    pub priority: Option<i64>,
    /// Sent with each of its requests.
    pub headers: Vec<(String, String)>,
    /// Its own SLO, as `--slo` takes it; without, the run's.
    pub slo: Option<String>,
}

impl TrafficClass {
    /// `NAME:SHARE[:priority=N][:header=K=V]…[:slo=SPEC]`; SPEC is `--slo`'s
    /// own (`ttft_p99=200ms,tpot_p50=30ms`), so it comes last.
    pub fn parse(s: &str) -> Result<TrafficClass, String> {
        let mut parts = s.splitn(3, ':');
        let name = parts.next().unwrap_or_default().trim();
        let valid = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
        if name.is_empty() || !name.chars().all(valid) {
            return Err(format!(
                "`{s}`: NAME:SHARE, the name letters, digits, - _ ."
            ));
        }
        let share = parts
            .next()
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v > 0.0 && *v <= 1e6)
            .ok_or_else(|| {
                format!("`{s}`: its share is a number above 0 (0.2, or 1 of several)")
            })?;
        let mut class = TrafficClass {
            name: name.into(),
            share,
            priority: None,
            headers: Vec::new(),
            slo: None,
        };
        let mut rest = parts.next().unwrap_or_default();
        while !rest.is_empty() {
            if let Some(spec) = rest.strip_prefix("slo=") {
                tokenscope_core::slo::Slo::parse(spec)
                    .map_err(|e| format!("`{s}`: slo={spec}: {e}"))?;
                class.slo = Some(spec.to_string());
                break;
            }
            let (field, more) = rest.split_once(':').unwrap_or((rest, ""));
            class.option(field).map_err(|e| format!("`{s}`: {e}"))?;
            rest = more;
        }
        Ok(class)
    }

    fn option(&mut self, field: &str) -> Result<(), String> {
        match field.split_once('=') {
            Some(("priority", n)) => {
                let n = n
                    .trim()
                    .parse::<i64>()
                    .map_err(|_| format!("priority={n}: a whole number (lower is served first)"))?;
                self.priority = Some(n);
            }
            Some(("header", kv)) => {
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| format!("header={kv}: header=NAME=VALUE"))?;
                let name_ok = crate::request_ids::is_header_name(k);
                // A value goes on the wire as it is: no line breaks in it.
                let value_ok = v.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b));
                if !name_ok || !value_ok {
                    return Err(format!(
                        "header={kv}: a header's name and a printable value"
                    ));
                }
                // The request id's header too (its default name).
                if crate::request_ids::set_by_tokenscope(k)
                    || k.eq_ignore_ascii_case("x-request-id")
                {
                    return Err(format!(
                        "header={kv}: `{k}` is a header tokenscope sets itself"
                    ));
                }
                self.headers.push((k.to_ascii_lowercase(), v.to_string()));
            }
            _ => {
                return Err(format!(
                    "`{field}`: expected priority=N, header=NAME=VALUE or slo=SPEC"
                ))
            }
        }
        Ok(())
    }

    /// The header lines each of its requests adds, each ending in CRLF.
    pub fn head(&self) -> Vec<u8> {
        let mut lines = Vec::new();
        for (k, v) in &self.headers {
            lines.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
        }
        lines
    }
}

/// The most classes a run may name: each keeps its own figures.
pub const MAX_CLASSES: usize = 64;

/// The run's classes, and which one each request is.
#[derive(Debug, Clone)]
pub struct Classes {
    list: Vec<TrafficClass>,
    /// Each class's share's upper edge on [0, 1).
    edges: Vec<f64>,
    seed: u64,
}

impl Classes {
    /// `list` (at least one, names distinct), drawn from with `seed`.
    pub fn new(list: Vec<TrafficClass>, seed: u64) -> Result<Classes, String> {
        let mut names: Vec<&str> = list.iter().map(|c| c.name.as_str()).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("--class {} is named twice", w[0]));
        }
        let total: f64 = list.iter().map(|c| c.share).sum();
        if list.is_empty() || total <= 0.0 {
            return Err("--class: at least one class with a share above 0".into());
        }
        if list.len() > MAX_CLASSES {
            return Err(format!(
                "--class: at most {MAX_CLASSES} classes (each has its own figures)"
            ));
        }
        let mut at = 0.0;
        let edges = list
            .iter()
            .map(|c| {
                at += c.share / total;
                at
            })
            .collect();
        Ok(Classes { list, edges, seed })
    }

    pub fn list(&self) -> &[TrafficClass] {
        &self.list
    }

    /// The class of request `id`: the same for the same seed.
    pub fn for_request(&self, id: u64) -> &TrafficClass {
        let u = unit(mix(self.seed ^ mix(id ^ 0xC1A5)));
        let i = self
            .edges
            .iter()
            .position(|e| u < *e)
            .unwrap_or(self.list.len() - 1);
        &self.list[i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_class_reads_its_share_priority_headers_and_slo() {
        let c = TrafficClass::parse(
            "chat:0.3:priority=-1:header=X-Tier=gold:header=x-fair=a b:slo=ttft_p99=200ms,tpot_p50=30ms",
        )
        .unwrap();
        assert_eq!(c.name, "chat");
        assert_eq!(c.share, 0.3);
        assert_eq!(c.priority, Some(-1));
        assert_eq!(
            c.headers,
            vec![
                ("x-tier".into(), "gold".into()),
                ("x-fair".into(), "a b".into())
            ]
        );
        assert_eq!(c.slo.as_deref(), Some("ttft_p99=200ms,tpot_p50=30ms"));
        assert_eq!(c.head(), b"x-tier: gold\r\nx-fair: a b\r\n");
        assert_eq!(TrafficClass::parse("batch:1").unwrap().priority, None);
    }

    #[test]
    fn a_class_that_cannot_hold_is_refused_with_why() {
        for bad in [
            "",
            ":0.5",
            "a b:0.5",
            "chat",
            "chat:0",
            "chat:-1",
            "chat:NaN",
            "chat:inf",
            "chat:0.5:priority=high",
            "chat:0.5:priority=99999999999999999999",
            "chat:0.5:header=X-A",
            "chat:0.5:header=X A=1",
            "chat:0.5:header=X-A=1\r\nInjected: yes",
            "chat:0.5:color=red",
            "chat:0.5:header=Content-Length=5",
            "chat:0.5:header=X-Request-Id=mine",
            "chat:0.5:slo=ttft_p99=fast",
        ] {
            assert!(TrafficClass::parse(bad).is_err(), "{bad:?}");
        }
        let twice = vec![
            TrafficClass::parse("a:1").unwrap(),
            TrafficClass::parse("a:2").unwrap(),
        ];
        assert!(Classes::new(twice, 1).unwrap_err().contains("named twice"));
        assert!(Classes::new(Vec::new(), 1).is_err());
    }

    #[test]
    fn requests_draw_their_class_by_share_and_the_same_each_time() {
        let list = vec![
            TrafficClass::parse("hi:1").unwrap(),
            TrafficClass::parse("lo:3").unwrap(),
        ];
        let classes = Classes::new(list, 9).unwrap();
        let his = (0..8000u64)
            .filter(|id| classes.for_request(*id).name == "hi")
            .count();
        assert!((1_800..2_200).contains(&his), "a quarter: {his}");
        let again = (0..8000u64)
            .filter(|id| classes.for_request(*id).name == "hi")
            .count();
        assert_eq!(his, again);
    }
}
