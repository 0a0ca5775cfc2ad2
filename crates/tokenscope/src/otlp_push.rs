//! What every OTLP push (metrics and spans) shares: its timeout, and the
//! HTTP client that notes why a push failed, in the collector's own terms.

use std::time::Duration;

/// Longest a push may take before it is given up.
pub const PUSH_TIMEOUT: Duration = Duration::from_secs(3);

/// `url` with OTLP's `path` (`/v1/metrics`, `/v1/traces`) where it is a
/// bare collector address; a URL with a path of its own is kept whole.
pub fn collector_url(url: &str, path: &str) -> String {
    let trimmed = url.trim_end_matches('/');
    let has_path = trimmed
        .split_once("://")
        .is_some_and(|(_, rest)| rest.contains('/'));
    match has_path {
        true => trimmed.to_string(),
        false => format!("{trimmed}{path}"),
    }
}

/// The latest push's failure, shared by the exporter's HTTP client and
/// the run that reports it.
#[derive(Debug, Clone, Default)]
pub struct Noted(std::sync::Arc<std::sync::Mutex<Option<String>>>);

impl Noted {
    pub fn set(&self, why: Option<String>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = why;
    }

    pub fn take(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// The exporter's HTTP client, noting why a push failed: the OTLP
/// exporter turns every network failure into "network error" and the
/// SDK's shutdown into "Failed to shutdown", where a user needs to know
/// whether the collector refused the connection, closed it, timed out
/// or answered with an HTTP error.
#[derive(Debug)]
pub struct Noting {
    inner: reqwest_otlp::blocking::Client,
    failed: Noted,
}

impl Noting {
    pub fn new(inner: reqwest_otlp::blocking::Client, failed: Noted) -> Noting {
        Noting { inner, failed }
    }
}

impl opentelemetry_http::HttpClient for Noting {
    fn send_bytes<'s, 'f>(
        &'s self,
        request: http::Request<bytes::Bytes>,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<
                    Output = Result<http::Response<bytes::Bytes>, opentelemetry_http::HttpError>,
                > + Send
                + 'f,
        >,
    >
    where
        's: 'f,
        Self: 'f,
    {
        Box::pin(async move {
            let sent = self.inner.send_bytes(request).await;
            self.failed.set(match &sent {
                Ok(r) if r.status().is_success() => None,
                Ok(r) => Some(format!("the collector answered HTTP {}", r.status())),
                Err(e) => Some(push_error(e.as_ref())),
            });
            sent
        })
    }
}

/// A push's network failure named by its kind, with its causes.
fn push_error(e: &(dyn std::error::Error + 'static)) -> String {
    let chain = tokenscope_core::error_chain::line(e);
    let timed_out = std::iter::successors(Some(e), |e| e.source()).any(|e| {
        e.downcast_ref::<reqwest_otlp::Error>()
            .is_some_and(reqwest_otlp::Error::is_timeout)
    });
    let kind = match () {
        _ if timed_out => "no answer within the push timeout",
        _ if chain.contains("refused") => "connection refused",
        _ if chain.contains("closed") || chain.contains("reset") => "connection closed",
        _ => "network error",
    };
    format!("{kind} ({chain})")
}
