//! Helpers for the end-to-end tests: an exact server in the test process on
//! 127.0.0.1, and the `tokenscope` binary run against it.

#![allow(dead_code)]

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;
use tokenscope_sim::exact::{ExactConfig, ExactServer};

/// An exact server on its own runtime, stopped when dropped.
pub struct Server {
    pub url: String,
    pub stats: std::sync::Arc<tokenscope_sim::exact::ServerStats>,
    rt: Option<tokio::runtime::Runtime>,
}

impl Server {
    pub fn start(config: ExactConfig) -> Server {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("test-srv")
            .enable_all()
            .build()
            .unwrap();
        let server = rt
            .block_on(ExactServer::start(([127, 0, 0, 1], 0).into(), config))
            .unwrap();
        let (url, stats) = (server.url(), server.stats.clone());
        std::mem::forget(server);
        Server {
            url,
            stats,
            rt: Some(rt),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// `bench` flags for the exact server: its model, the chat API, no metrics (it has none).
pub const EXACT_CHAT: [&str; 5] = [
    "--model",
    "tokenscope-exact",
    "--api",
    "openai-chat",
    "--no-metrics",
];

/// The exact server's flags followed by `rest`.
pub fn exact_chat<'a>(rest: &[&'a str]) -> Vec<&'a str> {
    EXACT_CHAT
        .iter()
        .copied()
        .chain(rest.iter().copied())
        .collect()
}

pub fn exact(ttft_ms: u64, itl_ms: u64) -> ExactConfig {
    ExactConfig {
        ttft: Duration::from_millis(ttft_ms),
        itl: Duration::from_millis(itl_ms),
        ..ExactConfig::default()
    }
}

/// A port on 127.0.0.1 that nothing listens on (bound once, then let go).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A file of `text` beside the run directories (a dataset, a trace).
pub fn write_file(name: &str, text: &str) -> PathBuf {
    let path = run_dir(name).with_extension("data");
    std::fs::write(&path, text).unwrap();
    path
}

/// A calibrated profile of the default deployment (Llama-3.1-8B on an H100)
/// that differs from the engine's defaults only in memory efficiency, 0.64
/// instead of 0.8: every decode step reads the weights 25 % slower, about
/// 20 % on TPOT. Written under `name`; returns its path.
pub fn slow_decode_profile(name: &str) -> PathBuf {
    use tokenscope_sim::calibrate::Profile;
    use tokenscope_sim::engine::cost::Efficiency;
    let profile = Profile {
        model: "llama-3.1-8b".into(),
        gpu: "h100-sxm".into(),
        tp: 1,
        efficiency: Efficiency {
            memory: 0.64,
            ..Efficiency::default()
        },
        runs: Vec::new(),
        residual: 0.0,
        spec_decode: None,
    };
    write_file(name, &serde_json::to_string(&profile).unwrap())
}

/// A fresh run directory under the target dir.
pub fn run_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The binary, with no API key, and its results history in this test
/// binary's own SQLite file (never the user's).
pub fn tokenscope() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tokenscope"));
    c.env_remove("OPENAI_API_KEY");
    let history =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("history-{}.db", std::process::id()));
    c.env("TOKENSCOPE_DB", history);
    c
}

/// Runs `tokenscope bench --url URL --out DIR --quiet ARGS…`; returns the output.
pub fn bench(url: &str, out: &Path, args: &[&str]) -> Output {
    tokenscope()
        .args(["bench", "--url", url, "--quiet", "--out"])
        .arg(out)
        .args(args)
        .output()
        .expect("running tokenscope")
}

/// [`bench`] into a fresh directory named after `name`, which must
/// succeed: the directory, its results and its records. `args` are the
/// pieces of the command line, joined.
pub fn bench_ok(url: &str, name: &str, args: &[&[&str]]) -> (PathBuf, Value, Vec<Value>) {
    let out = run_dir(name);
    assert_ok(&bench(url, &out, &args.concat()));
    let (r, recs) = (results(&out), records(&out));
    (out, r, recs)
}

/// [`bench`] with `args` (and two requests), which must be refused before
/// it starts (exit 2): what it said on stderr.
pub fn refused(url: &str, args: &[&str]) -> String {
    let out = run_dir("refused");
    let o = bench(url, &out, &[args, &["--requests", "2"]].concat());
    assert_eq!(o.status.code(), Some(2), "{args:?} was not refused");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `tokenscope bench --quiet --no-history ARGS…` against the built-in
/// default target (the simulated engine), which must succeed: its results.
pub fn bench_builtin(name: &str, args: &[&str]) -> Value {
    let out = run_dir(name);
    let o = tokenscope()
        .args(["bench", "--quiet", "--no-history"])
        .args(args)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("running tokenscope");
    assert_ok(&o);
    results(&out)
}

/// Runs `tokenscope sim plan --quiet --out DIR ARGS…`; returns the output.
pub fn sim_plan(out: &Path, args: &[&str]) -> Output {
    tokenscope()
        .args(["sim", "plan", "--quiet", "--out"])
        .arg(out)
        .args(args)
        .output()
        .expect("running tokenscope")
}

pub fn results(out: &Path) -> Value {
    let text = std::fs::read_to_string(out.join("results.json")).expect("results.json exists");
    serde_json::from_str(&text).expect("results.json is JSON")
}

/// A sweep directory's `sweep.json`.
pub fn sweep_doc(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("sweep.json")).expect("sweep.json exists");
    serde_json::from_str(&text).expect("sweep.json is JSON")
}

pub fn records(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out.join("requests.jsonl"))
        .expect("requests.jsonl exists")
        .lines()
        .map(|l| serde_json::from_str(l).expect("every line is JSON"))
        .collect()
}

pub fn stat(v: &Value, path: &str) -> f64 {
    let mut cur = v;
    for key in path.split('.') {
        cur = &cur[key];
    }
    cur.as_f64()
        .unwrap_or_else(|| panic!("{path} is not a number: {cur}"))
}

pub fn assert_ok(out: &Output) {
    assert!(
        out.status.success(),
        "tokenscope failed ({:?}):\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The simulated engine server on its own runtime, stopped when dropped.
pub struct Engine {
    pub url: String,
    rt: Option<tokio::runtime::Runtime>,
}

impl Engine {
    pub fn start(config: tokenscope_sim::engine::EngineConfig) -> Engine {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("test-engine")
            .enable_all()
            .build()
            .unwrap();
        let options = tokenscope_sim::serve::ServeOptions::for_config(&config);
        let server = rt
            .block_on(tokenscope_sim::serve::EngineServer::start(
                ([127, 0, 0, 1], 0).into(),
                config,
                options,
            ))
            .unwrap();
        let url = server.url();
        std::mem::forget(server);
        Engine { url, rt: Some(rt) }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// The default simulated deployment: Llama-3.1-8B BF16 on one H100 SXM.
pub fn default_engine() -> tokenscope_sim::engine::EngineConfig {
    let cat = tokenscope_sim::engine::catalogue::Catalogue::builtin();
    tokenscope_sim::engine::EngineConfig::new(
        cat.model("llama-3.1-8b").unwrap(),
        cat.gpu("h100-sxm").unwrap(),
    )
}

/// `GET url` on 127.0.0.1 with a plain TCP request; the body as text.
pub fn http_get(url: &str) -> String {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").expect("http URL");
    let (host, path) = rest
        .split_once('/')
        .map_or((rest, "/".to_string()), |(h, p)| (h, format!("/{p}")));
    let mut s = std::net::TcpStream::connect(host).expect("connect");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    body.to_string()
}

/// The value of an unlabelled-or-labelled Prometheus series, by exact name (first match).
pub fn prom_value(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no series {name} in:\n{text}"))
}

/// The rule names of a run's diagnosis.
pub fn rules(r: &Value) -> Vec<String> {
    r["diagnosis"].as_array().map_or(Vec::new(), |d| {
        d.iter()
            .filter_map(|f| f["rule"].as_str().map(str::to_owned))
            .collect()
    })
}

pub fn has_rule(r: &Value, rule: &str) -> bool {
    rules(r).iter().any(|x| x == rule)
}

/// A `bench` loading `url` in the background, for tests that watch a server
/// under load; the caller kills it.
pub fn background_load(
    url: &str,
    concurrency: u32,
    requests: u32,
    output_tokens: u32,
    extra: &[&str],
) -> std::process::Child {
    tokenscope()
        .args(["bench", "--url", url, "--quiet"])
        .args(["--concurrency", &concurrency.to_string()])
        .args(["--requests", &requests.to_string()])
        .args(["--output-tokens", &output_tokens.to_string()])
        .args(extra)
        .arg("--out")
        .arg(run_dir(&format!(
            "load-{}",
            url.rsplit(':').next().unwrap_or("x")
        )))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starting a background bench")
}

/// A server on 127.0.0.1 answering each request with `answer(request line)`
/// (a whole HTTP response), connection closed after each.
pub fn raw_server(answer: fn(&str) -> String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().take(64) {
            let Ok(mut stream) = stream else { continue };
            let (first, _) = read_request(&stream).unwrap_or_default();
            let _ = stream.write_all(answer(&first).as_bytes());
        }
    });
    url
}

/// Reads one HTTP/1.1 request from `s`: its request line and its body
/// (by Content-Length). `None` when the peer closed first.
pub fn read_request(s: &std::net::TcpStream) -> Option<(String, Vec<u8>)> {
    let mut reader = BufReader::new(s.try_clone().ok()?);
    let (mut first, mut length) = (String::new(), 0);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line == "\r\n" {
            break;
        }
        if first.is_empty() {
            first = line.clone();
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    std::io::Read::read_exact(&mut reader, &mut body).ok()?;
    Some((first, body))
}

/// A whole HTTP/1.1 response that closes its connection.
pub fn http(status: &str, content_type: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// `bench` against a raw server as model `m` on the chat API, one at a time, no scraping.
pub fn bench_chat(url: &str, out: &std::path::Path, args: &[&str]) -> std::process::Output {
    tokenscope()
        .args([
            "bench",
            "--url",
            url,
            "--api",
            "openai-chat",
            "--model",
            "m",
        ])
        .args(["--no-metrics", "--concurrency", "1", "--out"])
        .arg(out)
        .args(args)
        .output()
        .unwrap()
}

/// A record's chunk arrival instants (µs): the running sum of its
/// delta-encoded `chunks.at_us` (docs/results-schema.md).
pub fn chunk_times(rec: &Value) -> Vec<u64> {
    let gaps = rec["chunks"]["at_us"].as_array().expect("chunks.at_us");
    gaps.iter()
        .scan(0u64, |at, g| {
            *at += g.as_u64().expect("a gap in µs");
            Some(*at)
        })
        .collect()
}

/// A server that logs every request body and answers a short stream.
pub fn logging_server() -> (
    String,
    std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let bodies = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = bodies.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(500) {
            let Ok(mut s) = stream else { continue };
            let Some((first, body)) = read_request(&s) else {
                continue;
            };
            if first.starts_with("GET") {
                let _ = s.write_all(
                    http("200 OK", "application/json", r#"{"data":[{"id":"m"}]}"#).as_bytes(),
                );
                continue;
            }
            if let Ok(v) = serde_json::from_slice(&body) {
                log.lock().unwrap().push(v);
            }
            let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"}}]}\n\n\
                       data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
                       data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\n\
                       data: [DONE]\n\n";
            let _ = s.write_all(http("200 OK", "text/event-stream", sse).as_bytes());
        }
    });
    (url, bodies)
}

/// `tokenscope sim serve` (or another built-in server) on `port`, in a
/// process of its own, killed when dropped.
pub struct SimServe(std::process::Child);

impl SimServe {
    pub fn start(port: u16, extra: &[&str]) -> SimServe {
        SimServe::start_as("serve", port, extra)
    }

    /// `tokenscope sim <server> --port <port> <extra…>` (`serve`, `exact`).
    pub fn start_as(server: &str, port: u16, extra: &[&str]) -> SimServe {
        let child = tokenscope()
            .args(["sim", server, "--port", &port.to_string()])
            .args(extra)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "sim {server} did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        SimServe(child)
    }
}

impl Drop for SimServe {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The middle value (the upper of the two middle ones for an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Per request, the client's stamp `at` − the exact server's send `sent`
/// (a `server_timings` key), on the host's shared clock, in ms.
pub fn read_delays_ms(r: &Value, recs: &[Value], at: &str, sent: &str) -> Vec<f64> {
    let origin = r["client"]["monotonic_origin_us"]
        .as_f64()
        .expect("the run's origin on the shared clock");
    recs.iter()
        .map(|q| {
            let read = q[at].as_f64().unwrap_or_else(|| panic!("{at}: {q}"));
            let sent = q["server_timings"][sent]
                .as_f64()
                .unwrap_or_else(|| panic!("{sent}: {q}"));
            (origin + read - sent) / 1e3
        })
        .collect()
}

/// No read before its send, and the median read within 1 ms of it: the
/// client's stamps are the kernel's receive times, so other work on the
/// machine delays the client's handling, not the stamps.
pub fn read_within_a_millisecond(delays: Vec<f64>, what: &str) {
    assert!(
        delays.iter().all(|&d| d > -0.5),
        "{what}: read before sent {delays:?}"
    );
    assert!(median(delays.clone()) < 1.0, "{what}: {delays:?}");
}

/// `FILE` checked against Kubernetes' own schemas, offline and strict
/// (unknown fields refused): the `kubernetes-validate` package the test
/// command installs (`KUBERNETES_VALIDATE`, its command).
pub fn kubernetes_validate(file: &Path) {
    let tool = std::env::var("KUBERNETES_VALIDATE").expect(
        "KUBERNETES_VALIDATE is not set: run the tests with scripts/test.sh, which installs kubernetes-validate",
    );
    let o = Command::new(tool)
        .args(["--strict", "--no-warn"])
        .arg(file)
        .output()
        .expect("running kubernetes-validate");
    assert!(
        o.status.success(),
        "{}: {}{}",
        file.display(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}
