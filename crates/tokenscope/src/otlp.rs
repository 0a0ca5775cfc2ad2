//! `--otlp-endpoint URL`: tokenscope's live figures pushed over OTLP/HTTP
//! (protobuf) with the official `opentelemetry` crates, named after
//! OpenTelemetry's GenAI semantic conventions:
//!
//! - `gen_ai.client.operation.duration` (s): each request, send to end;
//! - `gen_ai.client.token.usage` ({token}): its input and output tokens
//!   (`gen_ai.token.type`);
//! - `gen_ai.server.time_to_first_token` (s) and
//!   `gen_ai.server.time_per_output_token` (s): as the client measured them;
//! - extras under `tokenscope.`: `tokenscope.requests` (by `outcome`),
//!   `tokenscope.answer_start`, `tokenscope.itl`, `tokenscope.send_lag` (s).
//!
//! Each finished record is shown to the exporter on the recorder's thread;
//! the SDK's periodic reader pushes from a thread of its own, with a short
//! timeout, so a slow or hanging collector never delays the load, and the
//! run's end waits for the last push at most [`FLUSH_WAIT`].

use crate::live_metrics::Seen;
use crate::otlp_push::{Noted, Noting, PUSH_TIMEOUT};
use opentelemetry::metrics::{Counter, Histogram, MeterProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::Resource;
use std::time::Duration;
use tokenscope_core::record::RequestRecord;

/// How often the figures are pushed.
const INTERVAL: Duration = Duration::from_secs(5);

/// Longest the run's end waits for the last push.
pub const FLUSH_WAIT: Duration = Duration::from_secs(5);

/// The semantic conventions' recommended boundaries.
const DURATION_BOUNDS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
const TOKEN_BOUNDS: [f64; 14] = [
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];
const TTFT_BOUNDS: [f64; 16] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
const TPOT_BOUNDS: [f64; 13] = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
];

/// What ran, for every data point: the API's operation and the model.
pub struct Run {
    pub operation: &'static str,
    pub model: String,
    /// Resource attributes: `service.*`, `tokenscope.run`, `tokenscope.tag`, …
    pub resource: Vec<(String, String)>,
    /// The share of requests given a client span (`--otlp-span-sample`).
    pub span_sample: f64,
    /// The run's request ids, which the spans' ids follow.
    pub ids: tokenscope_load::request_ids::RequestIds,
}

/// The instruments of one run's export.
pub struct OtlpExport {
    provider: SdkMeterProvider,
    /// Why the latest push failed, in the collector's own terms.
    failed: Noted,
    duration: Histogram<f64>,
    tokens: Histogram<u64>,
    ttft: Histogram<f64>,
    tpot: Histogram<f64>,
    answer_start: Histogram<f64>,
    itl: Histogram<f64>,
    send_lag: Histogram<f64>,
    requests: Counter<u64>,
    attributes: Vec<KeyValue>,
    /// A client span per request (`/v1/traces`); `None` with a sample of 0.
    traces: Option<crate::otlp_traces::Traces>,
}

/// The GenAI conventions' operation name of an API.
pub fn operation(api: &str) -> &'static str {
    match api {
        "openai-chat" | "openai-responses" | "anthropic-messages" => "chat",
        "openai-embeddings" => "embeddings",
        "rerank" => "rerank",
        _ => "text_completion",
    }
}

/// `URL` as the metrics endpoint: a bare collector address gets OTLP's
/// `/v1/metrics`.
pub fn metrics_url(url: &str) -> String {
    crate::otlp_push::collector_url(url, "/v1/metrics")
}

impl OtlpExport {
    /// The export of `run` to `endpoint`. Built on a thread outside any
    /// async runtime: the blocking HTTP client must not be made in one.
    pub fn start(endpoint: &str, run: Run) -> anyhow::Result<OtlpExport> {
        let url = metrics_url(endpoint);
        std::thread::scope(|s| s.spawn(|| OtlpExport::build(&url, run)).join())
            .map_err(|_| anyhow::anyhow!("starting the OTLP exporter panicked"))?
    }

    fn build(url: &str, run: Run) -> anyhow::Result<OtlpExport> {
        let failed = Noted::default();
        let client = reqwest_otlp::blocking::Client::builder()
            .timeout(PUSH_TIMEOUT)
            .build()
            .map_err(|e| anyhow::anyhow!("--otlp-endpoint {url}: {e}"))?;
        let exporter = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_http_client(Noting::new(client, failed.clone()))
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(url)
            .with_timeout(PUSH_TIMEOUT)
            .build()
            .map_err(|e| crate::exit::Exit::usage(format!("--otlp-endpoint {url}: {e}")))?;
        let reader = PeriodicReader::builder(exporter)
            .with_interval(INTERVAL)
            .build();
        let resource = Resource::builder()
            .with_service_name("tokenscope")
            .with_attributes(run.resource.into_iter().map(|(k, v)| KeyValue::new(k, v)))
            .build();
        let traces = match run.span_sample > 0.0 {
            true => Some(crate::otlp_traces::Traces::build(
                url,
                run.span_sample,
                (run.operation, &run.model),
                resource.clone(),
                run.ids,
            )?),
            false => None,
        };
        let provider = SdkMeterProvider::builder()
            .with_reader(reader)
            .with_resource(resource)
            .build();
        let meter = provider.meter("tokenscope");
        let seconds = |name: &'static str, help: &'static str, bounds: &[f64]| {
            meter
                .f64_histogram(name)
                .with_unit("s")
                .with_description(help)
                .with_boundaries(bounds.to_vec())
                .build()
        };
        Ok(OtlpExport {
            failed,
            duration: seconds(
                "gen_ai.client.operation.duration",
                "Request latency, send to the answer's end",
                &DURATION_BOUNDS,
            ),
            tokens: meter
                .u64_histogram("gen_ai.client.token.usage")
                .with_unit("{token}")
                .with_description("Input and output tokens per request")
                .with_boundaries(TOKEN_BOUNDS.to_vec())
                .build(),
            ttft: seconds(
                "gen_ai.server.time_to_first_token",
                "Time to first token, as the client measured it",
                &TTFT_BOUNDS,
            ),
            tpot: seconds(
                "gen_ai.server.time_per_output_token",
                "Time per output token after the first, as the client measured it",
                &TPOT_BOUNDS,
            ),
            answer_start: seconds(
                "tokenscope.answer_start",
                "Time to the answer's first token, after any reasoning",
                &TTFT_BOUNDS,
            ),
            itl: seconds(
                "tokenscope.itl",
                "Gap between streamed tokens",
                &TPOT_BOUNDS,
            ),
            send_lag: seconds(
                "tokenscope.send_lag",
                "How late a request left after its intended start",
                &TTFT_BOUNDS,
            ),
            requests: meter
                .u64_counter("tokenscope.requests")
                .with_description("Finished requests, by outcome")
                .build(),
            attributes: vec![
                KeyValue::new("gen_ai.operation.name", run.operation),
                KeyValue::new("gen_ai.request.model", run.model),
            ],
            provider,
            traces,
        })
    }

    /// The run's clock has started at `origin_unix_us` (the spans' wall clock).
    pub fn started(&self, origin_unix_us: u64) {
        if let Some(t) = &self.traces {
            t.started(origin_unix_us);
        }
    }

    /// Takes one finished record (warm-up left out, as the results leave it).
    pub fn observe(&self, r: &RequestRecord) {
        if let Some(t) = &self.traces {
            t.observe(r);
        }
        let Some(seen) = Seen::of(r) else { return };
        let attrs = &self.attributes;
        let with = |k: &'static str, v: String| [attrs.clone(), vec![KeyValue::new(k, v)]].concat();
        self.requests.add(1, &with("outcome", seen.outcome.clone()));
        self.send_lag.record(seen.send_lag_s, attrs);
        let Some(ok) = &seen.ok else {
            self.duration
                .record(seen.e2e_s, &with("error.type", seen.outcome));
            return;
        };
        self.duration.record(seen.e2e_s, attrs);
        for (kind, n) in [
            ("input", r.input_tokens.unwrap_or(0)),
            ("output", r.output_tokens),
        ] {
            self.tokens
                .record(n, &with("gen_ai.token.type", kind.into()));
        }
        let timed = [
            (&self.ttft, ok.ttft_s),
            (&self.answer_start, ok.answer_start_s),
            (&self.tpot, ok.tpot_s),
        ];
        for (histogram, value) in timed {
            if let Some(v) = value {
                histogram.record(v, attrs);
            }
        }
        Seen::itl_s(r).for_each(|gap| self.itl.record(gap, attrs));
    }

    /// The run is over: the last figures pushed, waiting at most
    /// [`FLUSH_WAIT`] (a collector that does not answer is left behind).
    pub fn finish(&self) -> Option<String> {
        // Both at once: a collector that does not answer costs the wait once.
        std::thread::scope(|s| {
            let spans = s.spawn(|| self.traces.as_ref().and_then(|t| t.finish(FLUSH_WAIT)));
            let metrics = self.finish_metrics();
            metrics.or(spans.join().ok().flatten())
        })
    }

    fn finish_metrics(&self) -> Option<String> {
        let (tx, rx) = std::sync::mpsc::channel();
        let provider = self.provider.clone();
        std::thread::spawn(move || {
            let _ = tx.send(provider.shutdown());
        });
        match rx.recv_timeout(FLUSH_WAIT) {
            Ok(Ok(())) => None,
            // The SDK's own error says only "Failed to shutdown": the push's
            // noted failure says why.
            Ok(Err(e)) => Some(format!(
                "the last OTLP push failed: {}",
                self.failed.take().unwrap_or_else(|| e.to_string())
            )),
            Err(_) => Some(format!(
                "the last OTLP push did not finish within {} s: the collector did not answer",
                FLUSH_WAIT.as_secs()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_collector_address_gets_the_metrics_path() {
        assert_eq!(metrics_url("http://c:4318"), "http://c:4318/v1/metrics");
        assert_eq!(metrics_url("http://c:4318/"), "http://c:4318/v1/metrics");
        assert_eq!(
            metrics_url("https://c/otlp/v1/metrics"),
            "https://c/otlp/v1/metrics"
        );
    }
}
