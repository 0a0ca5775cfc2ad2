//! The target as the client addresses it: its base URL (a full endpoint URL
//! names its API), the headers every request carries, and which of them a
//! metrics endpoint may get — credentials go only to the target's own
//! origin. `watch` reads its server with the same rules.

use crate::exit::Exit;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION};
use tokenscope_load::protocol::{self, Protocol};
use tokenscope_telemetry::scraper::Endpoint;

/// `http://host:port[/v1][/]` → `http://host:port`; a full endpoint URL
/// (`…/v1/chat/completions`, `…/v1/completions`) is accepted and names its
/// API. A URL without a scheme is refused with the fix.
pub fn base_url(url: &str) -> anyhow::Result<(String, Option<&'static dyn Protocol>)> {
    if !url.contains("://") {
        return Err(Exit::usage(format!(
            "--url `{url}` has no scheme: add http:// (--url http://{url})"
        )));
    }
    let parsed =
        reqwest::Url::parse(url).map_err(|e| Exit::usage(format!("--url `{url}`: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(Exit::usage(format!(
            "--url `{url}`: only http and https are supported"
        )));
    }
    let trimmed = url.trim_end_matches('/');
    for &api in protocol::ALL {
        if let Some(base) = trimmed.strip_suffix(api.path()) {
            return Ok((base.to_string(), Some(api)));
        }
    }
    Ok((
        trimmed.strip_suffix("/v1").unwrap_or(trimmed).to_string(),
        None,
    ))
}

/// `scheme://host:port` of a URL, for the same-origin rule.
fn origin(url: &str) -> Option<String> {
    let u = reqwest::Url::parse(url).ok()?;
    Some(format!(
        "{}://{}:{}",
        u.scheme(),
        u.host_str()?,
        u.port_or_known_default()?
    ))
}

/// Each metrics URL with the headers it may get: the target's own (API key,
/// `--header`) only on the target's origin, `--metrics-header` everywhere.
/// Credentials never travel to an exporter on another host or port.
pub(crate) fn metrics_endpoints(
    target: &str,
    urls: &[String],
    target_headers: &HeaderMap,
    own: &[(String, String)],
) -> anyhow::Result<Vec<Endpoint>> {
    let own = header_map(own, "--metrics-header")?;
    let home = origin(target);
    // Each distinct endpoint once (`watch URL --metrics-url URL/metrics`
    // names one twice), compared as parsed: case and default ports aside.
    let mut seen = std::collections::HashSet::new();
    urls.iter()
        .filter(|url| seen.insert(reqwest::Url::parse(url).map_or((*url).clone(), String::from)))
        .map(|url| {
            let Some(at) = origin(url) else {
                return Err(Exit::usage(format!(
                    "--metrics-url `{url}`: not an http(s) URL (e.g. http://gpu-node:9400/metrics)"
                )));
            };
            let mut headers = if Some(at) == home {
                target_headers.clone()
            } else {
                HeaderMap::new()
            };
            headers.extend(own.clone());
            Ok(Endpoint {
                url: url.clone(),
                headers,
            })
        })
        .collect()
}

/// `NAME: VALUE` pairs as sensitive headers; `flag` names them in errors.
fn header_map(pairs: &[(String, String)], flag: &str) -> anyhow::Result<HeaderMap> {
    let mut headers = HeaderMap::new();
    for (k, v) in pairs {
        let name = HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| Exit::usage(format!("{flag}: `{k}` is not a header name")))?;
        let mut value = HeaderValue::from_str(v)
            .map_err(|_| Exit::usage(format!("{flag} {k}: the value is not valid in a header")))?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    Ok(headers)
}

/// `--header`s and the API key (from `--api-key-env`, else OPENAI_API_KEY),
/// all marked sensitive so they never appear in debug output.
pub(crate) fn target_headers(
    api_key_env: Option<&str>,
    extra: &[(String, String)],
) -> anyhow::Result<HeaderMap> {
    let mut headers = header_map(extra, "--header")?;
    let key =
        match api_key_env {
            Some(var) => Some(std::env::var(var).map_err(|_| {
                Exit::usage(format!("--api-key-env: the variable {var} is not set"))
            })?),
            None => std::env::var("OPENAI_API_KEY")
                .ok()
                .filter(|k| !k.is_empty()),
        };
    if let Some(key) = key {
        let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
            Exit::usage("the API key contains characters not allowed in a header".into())
        })?;
        value.set_sensitive(true);
        headers.insert(AUTHORIZATION, value);
    }
    Ok(headers)
}

/// Said when the server cannot be reached and a proxy is configured:
/// tokenscope connects directly (a proxy would be measured as the server).
pub fn proxy_note() -> String {
    ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"]
        .iter()
        .find(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()))
        .map(|v| format!(" ({v} is set, but tokenscope connects directly: a proxy's latency would be measured as the server's; run it where the server is reachable)"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_url_is_trimmed_and_an_endpoint_names_its_api() {
        let (base, api) = base_url("http://h:8000/v1/").unwrap();
        assert_eq!(
            (base.as_str(), api.map(|a| a.name())),
            ("http://h:8000", None)
        );
        let (base, api) = base_url("http://h:8000/v1/chat/completions").unwrap();
        assert_eq!(
            (base.as_str(), api.map(|a| a.name())),
            ("http://h:8000", Some("openai-chat"))
        );
        let (_, api) = base_url("https://h/v1/completions").unwrap();
        assert_eq!(api.map(|a| a.name()), Some("openai-completions"));
        let err = base_url("localhost:8000").unwrap_err().to_string();
        assert!(err.contains("no scheme"), "{err}");
        assert!(base_url("ftp://h/").is_err());
    }

    #[test]
    fn credentials_go_only_to_the_targets_own_origin() {
        let mut target = HeaderMap::new();
        target.insert(AUTHORIZATION, HeaderValue::from_static("Bearer k"));
        let own = [("X-Exporter".to_string(), "e".to_string())];
        let urls = [
            "http://h:8000/metrics".to_string(),
            "http://gpu:9400/metrics".to_string(),
        ];
        let eps = metrics_endpoints("http://h:8000", &urls, &target, &own).unwrap();
        assert!(eps[0].headers.contains_key(AUTHORIZATION));
        assert!(
            !eps[1].headers.contains_key(AUTHORIZATION),
            "no key to another host"
        );
        assert!(eps.iter().all(|e| e.headers.contains_key("x-exporter")));
        assert!(metrics_endpoints("http://h:8000", &["gpu:9400".into()], &target, &[]).is_err());
    }

    #[test]
    fn an_endpoint_named_twice_is_scraped_once() {
        let urls = [
            "http://h:8000/metrics".to_string(),
            "http://H:8000/metrics".to_string(),
            "http://gpu:9400/metrics".to_string(),
            "http://h:8000/metrics".to_string(),
        ];
        let eps = metrics_endpoints("http://h:8000", &urls, &HeaderMap::new(), &[]).unwrap();
        let got: Vec<_> = eps.iter().map(|e| e.url.as_str()).collect();
        assert_eq!(got, ["http://h:8000/metrics", "http://gpu:9400/metrics"]);
    }
}
