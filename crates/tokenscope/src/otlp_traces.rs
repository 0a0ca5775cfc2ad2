//! With `--otlp-endpoint`, a client span per request pushed over OTLP/HTTP
//! (protobuf) to `/v1/traces`, as inference-perf emits them, so a slow
//! request is found beside the server's own spans:
//!
//! - named `{gen_ai.operation.name} {gen_ai.request.model}`, kind client,
//!   from the send to the answer's end on the wall clock;
//! - the GenAI attributes (`gen_ai.operation.name`, `gen_ai.request.model`,
//!   `gen_ai.usage.input_tokens`/`output_tokens`,
//!   `gen_ai.response.finish_reasons`), `error.type` on a failure, and the
//!   request's id (`tokenscope.request_id`);
//! - its first token as an event, `gen_ai.first_token`, holding the TTFT.
//!
//! With `--trace-context` its trace and span ids are the ones the request
//! sent in `traceparent`, so a server's span for it (a child of that
//! parent) joins it. `--otlp-span-sample` keeps a share of the requests,
//! chosen by a hash of the record's id (the same requests each time).
//!
//! The spans are built from the finished record (its times are exact, not
//! the moment the record was seen) and handed to the SDK's batch
//! processor, which pushes from a thread of its own and drops spans past
//! its queue rather than grow: a long run stays light.

use crate::otlp_push::{Noted, Noting, PUSH_TIMEOUT};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, SpanData, SpanEvents, SpanLinks, SpanProcessor,
};
use opentelemetry_sdk::Resource;
use std::time::{Duration, UNIX_EPOCH};
use tokenscope_core::record::RequestRecord;
use tokenscope_load::request_ids::TraceParent;

/// The spans of one run's requests.
pub struct Traces {
    processor: BatchSpanProcessor,
    failed: Noted,
    /// The share of requests given a span, as a threshold on a 64-bit hash.
    sample_below: u64,
    name: String,
    attributes: Vec<KeyValue>,
    scope: InstrumentationScope,
    /// The run's clock origin, µs since the Unix epoch (set as it starts).
    origin_unix_us: std::sync::atomic::AtomicU64,
    /// The run's request ids: a record that sent no `traceparent` gets the
    /// one it would have sent, so its span's ids are the same either way.
    ids: tokenscope_load::request_ids::RequestIds,
}

/// `URL` as the traces endpoint: a bare collector address (or one ending
/// in `/v1/metrics`) gets OTLP's `/v1/traces`.
pub fn traces_url(url: &str) -> String {
    let trimmed = url.trim_end_matches('/');
    let base = trimmed.strip_suffix("/v1/metrics").unwrap_or(trimmed);
    crate::otlp_push::collector_url(base, "/v1/traces")
}

impl Traces {
    /// The span export to `endpoint`, keeping `sample` (0–1) of the
    /// requests. Made outside any async runtime (the blocking client).
    pub fn build(
        endpoint: &str,
        sample: f64,
        (operation, model): (&'static str, &str),
        resource: Resource,
        ids: tokenscope_load::request_ids::RequestIds,
    ) -> anyhow::Result<Traces> {
        let url = traces_url(endpoint);
        let failed = Noted::default();
        let client = reqwest_otlp::blocking::Client::builder()
            .timeout(PUSH_TIMEOUT)
            .build()
            .map_err(|e| anyhow::anyhow!("--otlp-endpoint {url}: {e}"))?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(Noting::new(client, failed.clone()))
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(&url)
            .with_timeout(PUSH_TIMEOUT)
            .build()
            .map_err(|e| crate::exit::Exit::usage(format!("--otlp-endpoint {url}: {e}")))?;
        let mut processor = BatchSpanProcessor::builder(exporter).build();
        processor.set_resource(&resource);
        Ok(Traces {
            processor,
            failed,
            sample_below: (sample.clamp(0.0, 1.0) * u64::MAX as f64) as u64,
            name: format!("{operation} {model}"),
            attributes: vec![
                KeyValue::new("gen_ai.operation.name", operation),
                KeyValue::new("gen_ai.request.model", model.to_string()),
            ],
            scope: InstrumentationScope::builder("tokenscope")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
            origin_unix_us: Default::default(),
            ids,
        })
    }

    /// The run's clock has started at `origin_unix_us`.
    pub fn started(&self, origin_unix_us: u64) {
        self.origin_unix_us
            .store(origin_unix_us, std::sync::atomic::Ordering::Relaxed);
    }

    /// One finished record's span, if it is sampled (warm-up left out).
    pub fn observe(&self, r: &RequestRecord) {
        if r.warmup || !sampled(r.id, self.sample_below) {
            return;
        }
        let origin = self
            .origin_unix_us
            .load(std::sync::atomic::Ordering::Relaxed);
        self.processor.on_end(self.span(r, origin));
    }

    fn span(&self, r: &RequestRecord, origin_unix_us: u64) -> SpanData {
        let wall = |us: u64| UNIX_EPOCH + Duration::from_micros(origin_unix_us.saturating_add(us));
        let sent = r.traceparent.clone();
        let context = sent.unwrap_or_else(|| self.ids.traceparent(r.id));
        let (trace_id, span_id) = match TraceParent::parse(&context) {
            Ok(p) => (p.trace_id, p.span_id),
            Err(_) => (u128::from(r.id) | 1 << 64, r.id.max(1)),
        };
        let mut attributes = self.attributes.clone();
        attributes.extend(record_attributes(r));
        // A user who left on purpose is no error.
        let status = match r.error_kind.filter(|_| r.failed()) {
            Some(kind) => Status::error(kind.to_string()),
            None => Status::Unset,
        };
        let events = r.first_token_at_us.map(|t| {
            let ttft_s = t.saturating_sub(r.sent_at_us) as f64 / 1e6;
            opentelemetry::trace::Event::new(
                "gen_ai.first_token",
                wall(t),
                vec![KeyValue::new("gen_ai.server.time_to_first_token", ttft_s)],
                0,
            )
        });
        SpanData {
            span_context: SpanContext::new(
                TraceId::from_bytes(trace_id.to_be_bytes()),
                SpanId::from_bytes(span_id.to_be_bytes()),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Client,
            name: self.name.clone().into(),
            start_time: wall(r.sent_at_us),
            end_time: wall(r.done_at_us.max(r.sent_at_us)),
            attributes,
            dropped_attributes_count: 0,
            events: span_events(events),
            links: SpanLinks::default(),
            status,
            instrumentation_scope: self.scope.clone(),
        }
    }

    /// The last spans pushed, waiting at most `wait`; why not, if not.
    pub fn finish(&self, wait: Duration) -> Option<String> {
        match self.processor.shutdown_with_timeout(wait) {
            Ok(()) => None,
            Err(e) => Some(format!(
                "the last OTLP span push failed: {}",
                self.failed.take().unwrap_or_else(|| e.to_string())
            )),
        }
    }
}

/// The span's events (the SDK's type is built only through its default).
fn span_events(first_token: Option<opentelemetry::trace::Event>) -> SpanEvents {
    let mut events = SpanEvents::default();
    events.events = first_token.into_iter().collect();
    events
}

/// Whether record `id` is among the sampled: a hash of its id below the threshold.
fn sampled(id: u64, below: u64) -> bool {
    if below == u64::MAX {
        return true;
    }
    tokenscope_load::draw::mix(id) < below
}

/// What the record says of its request, in the GenAI conventions' names.
fn record_attributes(r: &RequestRecord) -> Vec<KeyValue> {
    let mut a = vec![KeyValue::new(
        "gen_ai.usage.output_tokens",
        r.output_tokens as i64,
    )];
    if let Some(n) = r.input_tokens {
        a.push(KeyValue::new("gen_ai.usage.input_tokens", n as i64));
    }
    if let Some(f) = &r.finish_reason {
        a.push(KeyValue::new(
            "gen_ai.response.finish_reasons",
            opentelemetry::Value::Array(vec![opentelemetry::StringValue::from(f.clone())].into()),
        ));
    }
    match r.error_kind {
        Some(kind) if r.failed() => a.push(KeyValue::new("error.type", kind.to_string())),
        Some(kind) => a.push(KeyValue::new("tokenscope.ended", kind.to_string())),
        None => {}
    }
    if let Some(id) = &r.request_id {
        a.push(KeyValue::new("tokenscope.request_id", id.clone()));
    }
    if let Some(status) = r.status {
        a.push(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        ));
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_collector_address_gets_the_traces_path() {
        assert_eq!(traces_url("http://c:4318"), "http://c:4318/v1/traces");
        assert_eq!(
            traces_url("http://c:4318/v1/metrics"),
            "http://c:4318/v1/traces"
        );
        assert_eq!(
            traces_url("https://c/otlp/v1/traces"),
            "https://c/otlp/v1/traces"
        );
    }

    #[test]
    fn a_share_of_the_records_is_sampled_and_the_same_each_time() {
        let below = (0.25 * u64::MAX as f64) as u64;
        let n = (0..10_000u64).filter(|id| sampled(*id, below)).count();
        assert!((2_200..2_800).contains(&n), "{n}");
        assert!((0..100u64).all(|id| sampled(id, u64::MAX)));
        assert!((0..100u64).all(|id| !sampled(id, 0)));
    }
}
