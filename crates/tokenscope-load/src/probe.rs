//! Before the load: is the server there, which model does it serve, and which
//! API answers (`--api auto`).

use crate::protocol::{Protocol, ALL};
use reqwest::header::HeaderMap;
use serde_json::Value;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("cannot reach {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("{0}")]
    Refused(String),
}

/// The longest a probe waits: the run's own `--timeout`, at most a minute.
fn bounded(timeout: Duration) -> Duration {
    timeout.min(Duration::from_secs(60))
}

fn unreachable(url: &str, e: reqwest::Error) -> ProbeError {
    ProbeError::Unreachable {
        url: url.to_string(),
        reason: describe(&e),
    }
}

/// `GET /v1/models`: the ids the server serves.
pub async fn list_models(
    client: &reqwest::Client,
    base: &str,
    headers: &HeaderMap,
    timeout: Duration,
) -> Result<Vec<String>, ProbeError> {
    let url = format!("{base}/v1/models");
    let resp = client
        .get(&url)
        .headers(headers.clone())
        .timeout(bounded(timeout))
        .send()
        .await
        .map_err(|e| unreachable(base, e))?;
    let status = resp.status();
    if !status.is_success() {
        return Err(ProbeError::Refused(format!(
            "GET {url} answered HTTP {}; pass --model to skip model discovery",
            status.as_u16()
        )));
    }
    let body: Value = read_json(resp).await.map_err(|e| {
        ProbeError::Refused(format!("GET {url}: not a model list ({e}); pass --model"))
    })?;
    Ok(body["data"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|m| m["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default())
}

/// Sends a one-token request to each API in turn ([`ALL`]); the first that answers 2xx wins.
pub async fn detect_api(
    client: &reqwest::Client,
    base: &str,
    headers: &HeaderMap,
    model: &str,
    timeout: Duration,
) -> Result<&'static dyn Protocol, ProbeError> {
    let mut tried = Vec::new();
    for &api in ALL.iter().filter(|a| a.probed()) {
        let body = api.probe_body(model);
        let path = api.endpoint(model, true);
        let resp = client
            .post(format!("{base}{path}"))
            .headers(api.headers(headers.clone()))
            .json(&body)
            .timeout(bounded(timeout))
            .send()
            .await
            .map_err(|e| unreachable(base, e))?;
        let status = resp.status().as_u16();
        if resp.status().is_success() {
            match recognised(api, resp).await {
                Ok(()) => return Ok(api),
                Err(why) => tried.push(format!("{path} → HTTP {status}, {why}")),
            }
            continue;
        }
        let said = server_message(resp).await;
        tried.push(match said {
            Some(m) => format!("{path} → HTTP {status}: {m}"),
            None => format!("{path} → HTTP {status}"),
        });
    }
    Err(ProbeError::Refused(format!(
        "no API tokenscope speaks accepted model `{model}` at {base} ({})",
        tried.join("; ")
    )))
}

/// The most a probe keeps of one answer: a model list, a one-token
/// answer or an error is a few kilobytes; a page larger than this is no
/// answer of an API.
const MAX_PROBE_BODY: usize = 1 << 20;

/// A probe answer's body, whole, or why not (too large, broken off); also
/// what other short calls to a server read their answers with.
pub async fn read_body(mut resp: reqwest::Response) -> Result<String, String> {
    let mut body = tokenscope_core::capped::Capped::new(MAX_PROBE_BODY);
    while let Some(piece) = resp.chunk().await.map_err(|e| describe(&e))? {
        if !body.push(&piece) {
            break;
        }
    }
    let bytes = body.finish().map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// A probe answer's body as JSON.
async fn read_json(resp: reqwest::Response) -> Result<Value, String> {
    let text = read_body(resp).await?;
    serde_json::from_str(&text).map_err(|e| e.to_string())
}

/// Whether a 2xx answer to `api`'s probe is that API's answer: it parses
/// as one and says something (text, a call, a finish, usage, items, an
/// error). A web page, a health check's `OK` or another API's JSON served
/// with 200 is not, and says what it was instead.
async fn recognised(api: &dyn Protocol, resp: reqwest::Response) -> Result<(), String> {
    let kind = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("no content type")
        .to_string();
    let body = read_body(resp).await?;
    let start: String = body.split_whitespace().collect::<Vec<_>>().join(" ");
    let start: String = start.chars().take(80).collect();
    let not_it = || {
        format!(
            "not an answer of the {} API (`{kind}`: {start:?})",
            api.name()
        )
    };
    let mut said = false;
    let mut heard =
        |e: crate::protocol::Event<'_>| said |= !matches!(e, crate::protocol::Event::Timings(_));
    // A stream-only endpoint (TGI's and Triton's `generate_stream`)
    // answers the probe with events, read as the API reads a stream.
    let parsed = match kind.contains("text/event-stream") {
        true => {
            let mut sse = crate::sse::SseParser::new();
            let mut parsed = Ok(());
            let mut each = |ev: crate::sse::SseEvent<'_>| {
                if ev.data != "[DONE]" && parsed.is_ok() {
                    parsed = api.stream_event(ev.data, &mut heard);
                }
            };
            sse.feed(body.as_bytes(), &mut each);
            sse.finish(&mut each);
            parsed
        }
        false => api.whole(&body, &mut heard),
    };
    match parsed {
        Ok(()) if said => Ok(()),
        _ => Err(not_it()),
    }
}

/// What an error response says, in one short line: its JSON `error.message`
/// (OpenAI, vLLM), `message` or `detail`, else the start of its text.
async fn server_message(resp: reqwest::Response) -> Option<String> {
    let text = tokio::time::timeout(Duration::from_secs(5), read_body(resp))
        .await
        .ok()?
        .ok()?;
    let json: Option<Value> = serde_json::from_str(&text).ok();
    let said = json
        .as_ref()
        .and_then(|v| {
            [
                &v["error"]["message"],
                &v["error"],
                &v["message"],
                &v["detail"],
            ]
            .into_iter()
            .find_map(|m| m.as_str().map(str::to_owned))
        })
        .unwrap_or(text);
    let line: String = said.split_whitespace().collect::<Vec<_>>().join(" ");
    let short: String = line.chars().take(200).collect();
    (!short.is_empty()).then_some(short)
}

/// The error and its causes on one line, without the URL.
fn describe(e: &reqwest::Error) -> String {
    let mut msg = tokenscope_core::error_chain::line(e);
    if let Some(url) = e.url() {
        msg = msg
            .replace(&format!(" ({url})"), "")
            .replace(url.as_str(), "<url>");
    }
    msg
}

/// The server's own version, where it tells one: vLLM's `/version`, TGI's
/// `/info`, SGLang's `/get_server_info`, llama.cpp's `/props` (its build).
/// Each is asked briefly and in turn; a server that answers none has no
/// version (never an error: the run does not depend on it).
pub async fn server_version(
    client: &reqwest::Client,
    base: &str,
    headers: &HeaderMap,
) -> Option<String> {
    const ASKED: [(&str, &str); 4] = [
        ("/version", "version"),
        ("/info", "version"),
        ("/get_server_info", "version"),
        ("/props", "build_info"),
    ];
    for (path, field) in ASKED {
        let answer = client
            .get(format!("{base}{path}"))
            .headers(headers.clone())
            .timeout(Duration::from_secs(2))
            .send()
            .await;
        let Ok(resp) = answer else { return None }; // gone or unreachable: ask no more
        if !resp.status().is_success() {
            continue;
        }
        if let Ok(body) = read_json(resp).await {
            if let Some(v) = body[field].as_str().filter(|v| !v.is_empty()) {
                return Some(v.chars().take(100).collect());
            }
        }
    }
    None
}
