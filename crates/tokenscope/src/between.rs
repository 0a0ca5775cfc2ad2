//! `--between-points`: what is done to the server before each point of a
//! series after the first, so a point does not read faster for what the
//! last one left in the server's prefix cache.
//!
//! - `reset-prefix-cache`: the endpoint the server's kind has — vLLM's
//!   (and the built-in engine's) `POST /reset_prefix_cache`, SGLang's `POST /flush_cache`, and on
//!   llama.cpp each slot's cache erased (`GET /slots`, then
//!   `POST /slots/{id}?action=erase`, which llama.cpp allows only when it
//!   was started with `--slot-save-path`).
//! - `cmd:COMMAND`: a command of your own, through `sh -c`, that must exit
//!   0; the server's base URL is in its `TOKENSCOPE_URL`.
//!
//! Every call is checked: a refusal is said, with the server's own words,
//! and kept with the point. Answers are read as the probe reads them,
//! within its bound.

use std::time::Duration;

/// How long one call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The most of a server's answer kept in a message.
const SAID: usize = 300;

#[derive(Debug, Clone, PartialEq)]
pub enum Between {
    ResetPrefixCache,
    Command(String),
}

impl Between {
    pub fn parse(text: &str) -> Result<Between, String> {
        match text.trim() {
            "reset-prefix-cache" => Ok(Between::ResetPrefixCache),
            t => match t.strip_prefix("cmd:").map(str::trim) {
                Some(cmd) if !cmd.is_empty() => Ok(Between::Command(cmd.to_string())),
                _ => Err(format!(
                    "`{text}`: expected reset-prefix-cache or cmd:COMMAND"
                )),
            },
        }
    }

    /// Does it to the server at `url` (of `kind`, as detected), with the
    /// target's own `headers` (its API key: these calls go to the target
    /// alone); what was done, or why it was not.
    pub async fn apply(
        &self,
        url: &str,
        kind: Option<&str>,
        headers: &reqwest::header::HeaderMap,
    ) -> Result<String, String> {
        match self {
            Between::Command(cmd) => command(cmd, url).await,
            Between::ResetPrefixCache => {
                let client = reqwest::Client::builder()
                    .timeout(CALL_TIMEOUT)
                    .default_headers(headers.clone())
                    .redirect(reqwest::redirect::Policy::none())
                    .build()
                    .map_err(|e| e.to_string())?;
                let url = url.trim_end_matches('/');
                match kind {
                    // The built-in engine answers vLLM's endpoint.
                    Some("vllm") | Some("vllm-v0") | Some("tokenscope-sim") => {
                        post(&client, &format!("{url}/reset_prefix_cache")).await
                    }
                    Some("sglang") => post(&client, &format!("{url}/flush_cache")).await,
                    Some("llama.cpp") => erase_slots(&client, url).await,
                    other => Err(format!(
                        "no prefix-cache reset is known for a {} server; give --between-points 'cmd:…'",
                        other.unwrap_or("undetected")
                    )),
                }
            }
        }
    }
}

/// Sends `req` (`what`: `POST URL`, for the messages); its answer's body
/// on a 2xx, else what the server said.
async fn call(req: reqwest::RequestBuilder, what: &str) -> Result<String, String> {
    let answer = req.send().await.map_err(|e| format!("{what}: {e}"))?;
    let status = answer.status();
    // Within the probe's bound: an endless answer costs at most that.
    let body = tokenscope_load::probe::read_body(answer)
        .await
        .map_err(|e| format!("{what}: {status}: {e}"))?;
    match status.is_success() {
        true => Ok(body),
        false => Err(format!("{what}: {status}: {}", clip(&body))),
    }
}

async fn post(client: &reqwest::Client, url: &str) -> Result<String, String> {
    let what = format!("POST {url}");
    call(client.post(url), &what)
        .await
        .map(|_| format!("{what}: done"))
}

/// llama.cpp: every slot's cache erased, and the tokens it held counted.
async fn erase_slots(client: &reqwest::Client, url: &str) -> Result<String, String> {
    let slots_url = format!("{url}/slots");
    let body = call(client.get(&slots_url), &format!("GET {slots_url}")).await?;
    let slots: Vec<serde_json::Value> = serde_json::from_str(&body).map_err(|e| {
        format!(
            "GET {slots_url}: not a list of slots ({e}): {}",
            clip(&body)
        )
    })?;
    let ids: Vec<u64> = slots.iter().filter_map(|s| s["id"].as_u64()).collect();
    if ids.is_empty() {
        return Err(format!("GET {slots_url}: no slot ids in {}", clip(&body)));
    }
    let mut erased = 0;
    for id in &ids {
        let erase = format!("{url}/slots/{id}?action=erase");
        let body = call(client.post(&erase), &format!("POST {erase}")).await?;
        let said: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        erased += said["n_erased"].as_u64().unwrap_or(0);
    }
    Ok(format!(
        "erased {} llama.cpp slots ({erased} cached tokens)",
        ids.len()
    ))
}

/// `cmd:COMMAND`, with the server's base URL in `TOKENSCOPE_URL` (a
/// tune's server listens on a port chosen per setting).
async fn command(cmd: &str, url: &str) -> Result<String, String> {
    let run = tokio::process::Command::new("sh")
        .args(["-c", cmd])
        .env("TOKENSCOPE_URL", url)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(CALL_TIMEOUT, run)
        .await
        .map_err(|_| format!("`{cmd}` did not finish within {} s", CALL_TIMEOUT.as_secs()))?
        .map_err(|e| format!("running `{cmd}`: {e}"))?;
    let said = String::from_utf8_lossy(if out.stderr.is_empty() {
        &out.stdout
    } else {
        &out.stderr
    })
    .trim()
    .to_string();
    match out.status.success() {
        true => Ok(format!("`{cmd}` exited 0")),
        false => Err(format!("`{cmd}` {}: {}", out.status, clip(&said))),
    }
}

/// At most [`SAID`] characters of a server's answer, on one line.
fn clip(text: &str) -> String {
    let one: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match one.char_indices().nth(SAID) {
        Some((i, _)) => format!("{}…", &one[..i]),
        None => one,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_it_can_do_and_refuses_the_rest() {
        assert_eq!(
            Between::parse("reset-prefix-cache"),
            Ok(Between::ResetPrefixCache)
        );
        assert_eq!(
            Between::parse("cmd: curl -X POST x"),
            Ok(Between::Command("curl -X POST x".into()))
        );
        for bad in ["", "cmd:", "reset", "flush"] {
            assert!(
                Between::parse(bad).unwrap_err().contains("cmd:COMMAND"),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_long_answer_is_clipped_to_one_line() {
        let long = "x\n".repeat(10_000);
        let c = clip(&long);
        assert!(!c.contains('\n'));
        assert!(c.chars().count() <= SAID + 1);
    }

    fn none() -> reqwest::header::HeaderMap {
        reqwest::header::HeaderMap::new()
    }

    #[tokio::test]
    async fn the_reset_carries_the_targets_api_key_and_follows_no_redirect() {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for (i, s) in l.incoming().take(2).enumerate() {
                let Ok(mut s) = s else { continue };
                let mut buf = [0u8; 4096];
                let n = s.read(&mut buf).unwrap_or(0);
                tx.send(String::from_utf8_lossy(&buf[..n]).to_lowercase())
                    .unwrap();
                let answer = match i {
                    0 => "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
                    _ => "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://example.com/\r\nContent-Length: 0\r\n\r\n",
                };
                let _ = s.write_all(answer.as_bytes());
            }
        });
        let mut headers = none();
        headers.insert(
            reqwest::header::AUTHORIZATION,
            "Bearer sk-test".parse().unwrap(),
        );
        let ok = Between::ResetPrefixCache
            .apply(&url, Some("vllm"), &headers)
            .await;
        assert!(ok.is_ok(), "{ok:?}");
        let sent = rx.recv().unwrap();
        assert!(sent.starts_with("post /reset_prefix_cache"), "{sent}");
        assert!(sent.contains("authorization: bearer sk-test"), "{sent}");
        // A redirect elsewhere is not followed with the key: it is refused.
        let e = Between::ResetPrefixCache
            .apply(&url, Some("sglang"), &headers)
            .await
            .unwrap_err();
        assert!(e.contains("/flush_cache: 307"), "{e}");
    }

    #[tokio::test]
    async fn a_command_that_fails_is_said_with_its_words() {
        let e = Between::Command("echo nope >&2; exit 3".into())
            .apply("http://127.0.0.1:1", None, &none())
            .await
            .unwrap_err();
        assert!(e.contains("nope") && e.contains('3'), "{e}");
        let ok = Between::Command("test \"$TOKENSCOPE_URL\" = http://h:1".into())
            .apply("http://h:1", None, &none())
            .await;
        assert!(ok.is_ok(), "{ok:?}");
        let e = Between::ResetPrefixCache
            .apply("http://127.0.0.1:1", Some("tgi"), &none())
            .await
            .unwrap_err();
        assert!(e.contains("tgi"), "{e}");
    }

    /// A one-connection-at-a-time server answering every request with `head`
    /// then `body_bytes` bytes of `x` (at most `conns` connections).
    fn raw(head: &'static str, body_bytes: usize, conns: usize) -> String {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        std::thread::spawn(move || {
            for s in l.incoming().take(conns) {
                let Ok(mut s) = s else { continue };
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let _ = s.write_all(head.as_bytes());
                let chunk = vec![b'x'; 64 * 1024];
                let mut left = body_bytes;
                while left > 0 {
                    let n = left.min(chunk.len());
                    if s.write_all(&chunk[..n]).is_err() {
                        break; // the client stopped reading
                    }
                    left -= n;
                }
            }
        });
        url
    }

    #[tokio::test]
    async fn a_huge_or_misshapen_answer_is_refused_within_a_bound() {
        // 1 GiB announced and sent as a slot list: refused past the probe's bound.
        let url = raw(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1073741824\r\n\r\n",
            1 << 30,
            1,
        );
        let e = Between::ResetPrefixCache
            .apply(&url, Some("llama.cpp"), &none())
            .await
            .unwrap_err();
        assert!(e.contains("outgrew"), "{e}");
        assert!(e.len() < 1000, "{} bytes", e.len());
        // The wrong shape with HTTP 200: no slot ids.
        let url = raw(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n[]",
            0,
            1,
        );
        let e = Between::ResetPrefixCache
            .apply(&url, Some("llama.cpp"), &none())
            .await
            .unwrap_err();
        assert!(e.contains("no slot ids"), "{e}");
        // vLLM refusing: its status and words.
        let url = raw(
            "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nno route!",
            0,
            1,
        );
        let e = Between::ResetPrefixCache
            .apply(&url, Some("vllm"), &none())
            .await
            .unwrap_err();
        assert!(
            e.contains("/reset_prefix_cache: 404") && e.contains("no route!"),
            "{e}"
        );
    }
}
