//! Writing the Prometheus text exposition format (version 0.0.4) for the
//! simulated server's `/metrics`: counters, gauges and fixed-bucket histograms.

use std::fmt::Write;

/// vLLM V1's TTFT buckets (seconds).
pub const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// vLLM V1's inter-token and per-output-token buckets (seconds).
pub const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// vLLM V1's request-latency buckets (seconds): e2e, queue, prefill, decode, inference.
pub const REQUEST_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];
/// vLLM V1's tokens-per-step buckets.
pub const ITERATION_TOKEN_BUCKETS: &[f64] = &[
    1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
];

/// A cumulative histogram with fixed upper bounds.
#[derive(Debug, Clone)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Observations ≤ each bound (not yet cumulative), plus +Inf at the end.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    pub fn observe(&mut self, v: f64) {
        let i = self
            .bounds
            .iter()
            .position(|&b| v <= b)
            .unwrap_or(self.bounds.len());
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }
}

fn le(b: f64) -> String {
    if b.fract() == 0.0 {
        format!("{b:.1}")
    } else {
        format!("{b}")
    }
}

/// Accumulates one exposition document. Every family is written once (one
/// HELP and TYPE), with one series per label set — one per engine, as vLLM
/// writes `engine="0"`, `engine="1"`… under data parallelism; the values of
/// each call come in that order.
pub struct Exposition {
    out: String,
    labels: Vec<String>,
}

impl Exposition {
    /// `labels`: the labels every series carries, e.g. `model_name="m",engine="0"`.
    pub fn new(labels: &str) -> Self {
        Exposition::each(vec![labels.to_string()])
    }

    /// One label set per engine.
    pub fn each(labels: Vec<String>) -> Self {
        Exposition {
            out: String::new(),
            labels,
        }
    }

    fn head(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    pub fn gauge(&mut self, name: &str, help: &str, values: &[f64]) {
        self.head(name, "gauge", help);
        for (labels, v) in self.labels.iter().zip(values) {
            let _ = writeln!(self.out, "{name}{{{labels}}} {v}");
        }
    }

    /// A counter `name` exposed as `name_total`, as Python's client does.
    pub fn counter(&mut self, name: &str, help: &str, values: &[f64]) {
        self.head(&format!("{name}_total"), "counter", help);
        for (labels, v) in self.labels.iter().zip(values) {
            let _ = writeln!(self.out, "{name}_total{{{labels}}} {v}");
        }
    }

    /// A counter with one extra label per value, per engine.
    pub fn counter_by(&mut self, name: &str, help: &str, label: &str, values: &[Vec<(&str, f64)>]) {
        self.head(&format!("{name}_total"), "counter", help);
        for (labels, vs) in self.labels.iter().zip(values) {
            for (l, v) in vs {
                let _ = writeln!(self.out, "{name}_total{{{labels},{label}=\"{l}\"}} {v}");
            }
        }
    }

    /// An info-style gauge (value 1) whose labels carry the facts, per engine.
    pub fn info(&mut self, name: &str, help: &str, facts: &[Vec<(&str, String)>]) {
        self.head(name, "gauge", help);
        for f in facts {
            let f: Vec<String> = f.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
            let _ = writeln!(self.out, "{name}{{{}}} 1.0", f.join(","));
        }
    }

    pub fn histogram(&mut self, name: &str, help: &str, hs: &[&Histogram]) {
        self.head(name, "histogram", help);
        for (labels, h) in self.labels.iter().zip(hs) {
            let mut cumulative = 0;
            for (i, b) in h.bounds.iter().enumerate() {
                cumulative += h.counts[i];
                let _ = writeln!(
                    self.out,
                    "{name}_bucket{{{labels},le=\"{}\"}} {cumulative}",
                    le(*b)
                );
            }
            let _ = writeln!(
                self.out,
                "{name}_bucket{{{labels},le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(self.out, "{name}_sum{{{labels}}} {}", h.sum);
            let _ = writeln!(self.out, "{name}_count{{{labels}}} {}", h.count);
        }
    }

    pub fn finish(self) -> String {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_is_cumulative_with_inf_sum_and_count() {
        let mut h = Histogram::new(&[0.1, 1.0]);
        for v in [0.05, 0.5, 0.7, 3.0] {
            h.observe(v);
        }
        let mut e = Exposition::new("model_name=\"m\"");
        e.histogram("vllm:x_seconds", "x", &[&h]);
        let text = e.finish();
        assert!(text.contains("# TYPE vllm:x_seconds histogram"));
        assert!(text.contains("vllm:x_seconds_bucket{model_name=\"m\",le=\"0.1\"} 1\n"));
        assert!(text.contains("vllm:x_seconds_bucket{model_name=\"m\",le=\"1.0\"} 3\n"));
        assert!(text.contains("vllm:x_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 4\n"));
        assert!(text.contains("vllm:x_seconds_sum{model_name=\"m\"} 4.25\n"));
        assert!(text.contains("vllm:x_seconds_count{model_name=\"m\"} 4\n"));
    }

    #[test]
    fn counters_get_total() {
        let mut e = Exposition::new("model_name=\"m\"");
        e.counter("vllm:num_preemptions", "p", &[3.0]);
        let text = e.finish();
        assert!(text.contains("# TYPE vllm:num_preemptions_total counter\nvllm:num_preemptions_total{model_name=\"m\"} 3\n"));
    }

    #[test]
    fn each_family_is_written_once_with_a_series_per_engine() {
        let mut e = Exposition::each(vec!["engine=\"0\"".into(), "engine=\"1\"".into()]);
        e.gauge("vllm:num_requests_running", "r", &[2.0, 5.0]);
        let text = e.finish();
        assert_eq!(
            text.matches("# TYPE vllm:num_requests_running gauge")
                .count(),
            1
        );
        assert!(text.contains("vllm:num_requests_running{engine=\"0\"} 2\nvllm:num_requests_running{engine=\"1\"} 5\n"));
    }
}
