//! `--serve-metrics`: tokenscope's own live figures, scraped mid-run by a
//! real Prometheus server (Debian's package, installed by the test command)
//! and read directly; at the end they agree with `results.json` within one
//! scrape's worth.

mod common;

use common::*;
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `GET http://127.0.0.1:PORT{path}`'s body, or `None` while nothing answers.
fn try_get(port: u16, path: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// The sum of every sample of `name` whose labels hold `with` (an
/// OpenMetrics exposition: `name{labels} value`).
fn sample(text: &str, name: &str, with: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(with))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A Prometheus server scraping 127.0.0.1:`target` every 200 ms.
struct Prometheus {
    child: Child,
    port: u16,
}

impl Prometheus {
    fn start(target: u16) -> Prometheus {
        Prometheus::start_with(target, &[])
    }

    /// With native histograms on, Prometheus asks for the protobuf
    /// exposition and stores the native buckets (not the classic ones).
    fn start_native(target: u16) -> Prometheus {
        Prometheus::start_with(target, &["--enable-feature=native-histograms"])
    }

    fn start_with(target: u16, flags: &[&str]) -> Prometheus {
        // One directory per server: two tests may run a Prometheus each at once.
        let dir = run_dir(&format!("prometheus-{target}"));
        std::fs::create_dir_all(&dir).unwrap();
        let config = format!(
            "global:\n  scrape_interval: 200ms\n  scrape_timeout: 150ms\nscrape_configs:\n  - job_name: tokenscope\n    static_configs:\n      - targets: ['127.0.0.1:{target}']\n"
        );
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let port = free_port();
        let child = Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .args(flags)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("Debian's prometheus on PATH (scripts/test.sh installs it)");
        // Ready before the load starts, so it scrapes the whole run.
        let deadline = Instant::now() + Duration::from_secs(60);
        while try_get(port, "/-/ready").is_none() {
            assert!(
                Instant::now() < deadline,
                "Prometheus was not ready within 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Prometheus { child, port }
    }

    /// The value of an instant `query`, when it has one.
    fn query(&self, query: &str) -> Option<f64> {
        let body = try_get(self.port, &format!("/api/v1/query?query={query}"))?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_prometheus_server_scrapes_the_live_figures_and_they_add_up_to_the_results() {
    // A tenth of the requests fail: goodput must leave them out.
    let server = Server::start(tokenscope_sim::exact::ExactConfig {
        faults: tokenscope_sim::faults::Faults {
            http_500: 0.1,
            ..Default::default()
        },
        seed: 4,
        ..exact(20, 4)
    });
    let port = free_port();
    let prometheus = Prometheus::start(port);
    let out = run_dir("serve-metrics");
    let addr = format!("127.0.0.1:{port}");
    let mut bench = exported_bench(
        &server.url,
        &addr,
        &out,
        &["--tag", "canary", "--slo", "ttft_p50=5s"],
    );
    // Read directly every 20 ms, keeping the last exposition, and ask the
    // Prometheus server until it has scraped a finished request.
    let (mut last, mut scraped_by_prometheus, mut seen_at) = (None, None, None);
    let deadline = Instant::now() + Duration::from_secs(120);
    while bench.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the bench ran past two minutes");
        if let Some(text) = try_get(port, "/metrics") {
            last = Some(text);
        }
        let q = "tokenscope_requests_total%7Btag%3D%22canary%22%7D";
        if let Some(n) = prometheus.query(q).filter(|&n| n > 0.0) {
            scraped_by_prometheus.get_or_insert(n);
            seen_at = Some(unix_now());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(bench.wait().unwrap().success());
    let mid_run = scraped_by_prometheus.expect("Prometheus scraped a finished request mid-run");
    assert!(mid_run < 300.0, "mid-run: {mid_run}");
    assert_eq!(
        // Its scrapes succeeded while it ran (the one after its end cannot).
        prometheus.query("max_over_time(up%7Bjob%3D%22tokenscope%22%7D%5B1m%5D)"),
        Some(1.0)
    );
    dashboard_queries_run(&prometheus, seen_at);
    let text = last.expect("an exposition was read");
    assert!(text.trim_end().ends_with("# EOF"), "OpenMetrics text");
    let r = results(&out);
    let done = stat(&r, "counts.succeeded");
    let scraped = sample(&text, "tokenscope_requests_total", "outcome=\"ok\"");
    // The last read came a poll (20 ms, a request or four) before the end
    // on an idle machine; a loaded one may starve this thread, so the bound
    // is a fifth of the run, and the figures below are checked within the
    // one exposition (the OTLP test checks the final figures exactly).
    assert!(
        scraped <= done && done - scraped <= 60.0,
        "{scraped} scraped, {done} done"
    );
    let failed = sample(&text, "tokenscope_requests_total", "outcome=\"http_500\"");
    assert!(failed > 0.0, "the injected failures are counted apart");
    let ttft_count = sample(&text, "tokenscope_ttft_seconds_count", "run=");
    assert_eq!(ttft_count, scraped, "one TTFT per finished request");
    // Goodput under the SLO, per request as the results judge it.
    let good = sample(&text, "tokenscope_slo_good_requests_total", "run=");
    assert_eq!(
        good, scraped,
        "every successful request met TTFT ≤ 5 s, no failed one"
    );
    assert_eq!(stat(&r, "slo.good_requests"), done);
    let tokens = sample(&text, "tokenscope_tokens_total", "kind=\"output\"");
    assert_eq!(tokens, scraped * 24.0, "every request's 24 tokens");
    // The TTFT histogram's mean against the run's over the same requests:
    // the server's 20 ms, as both read it.
    let mean_ms = sample(&text, "tokenscope_ttft_seconds_sum", "run=") / ttft_count * 1e3;
    let run_mean = stat(&r, "latency.ttft_ms.mean");
    // (the scrape holds all but the last few of the run's requests: 15 %
    // leaves room for a loaded machine's late reads among those few).
    assert!(
        (mean_ms - run_mean).abs() < 0.15 * run_mean,
        "{mean_ms} vs {run_mean}"
    );
    let run = format!("run=\"{}\"", out.file_name().unwrap().to_string_lossy());
    let labels = [
        "model=\"tokenscope-exact\"",
        "api=\"openai-chat\"",
        "tag=\"canary\"",
    ];
    for label in labels.iter().copied().chain([run.as_str()]) {
        assert!(text.contains(label), "{label}");
    }
}

/// Native histograms: a Prometheus with them on scrapes the protobuf
/// exposition and reads the latencies from the native buckets — their
/// count is the run's, their median the run's within a bucket's width.
#[test]
fn a_prometheus_with_native_histograms_reads_them_from_the_protobuf_exposition() {
    let server = Server::start(exact(20, 4));
    let port = free_port();
    let prometheus = Prometheus::start_native(port);
    let out = run_dir("serve-metrics-native");
    let addr = format!("127.0.0.1:{port}");
    let mut bench = exported_bench(&server.url, &addr, &out, &["--tag", "native"]);
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut protobuf, mut stored) = (None, None);
    // Asked while the run goes on: once the exporter is gone, Prometheus
    // marks its series stale and an instant query finds nothing.
    while bench.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the bench ran past two minutes");
        if protobuf.is_none() {
            protobuf = protobuf_content_type(port);
        }
        // histogram_count() reads only a native histogram.
        let count = prometheus.query("histogram_count(tokenscope_ttft_seconds)");
        let median = prometheus.query("histogram_quantile(0.5,tokenscope_ttft_seconds)");
        if let (Some(c), Some(m)) = (count, median) {
            stored = Some((c, m, unix_now()));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(bench.wait().unwrap().success());
    let content_type = protobuf.expect("the exposition was read mid-run");
    assert!(
        content_type.contains("io.prometheus.client.metricfamily"),
        "{content_type}"
    );
    let r = results(&out);
    let done = stat(&r, "counts.succeeded");
    let (count, median, seen_at) = stored.expect("a native TTFT histogram was stored mid-run");
    // The last read came a scrape or a poll before the end; a loaded
    // machine may starve this thread, so the bound is a fifth of the run.
    assert!(
        count <= done && done - count <= 60.0,
        "{count} stored, {done} done"
    );
    let p50_ms = median * 1e3;
    let run_p50 = stat(&r, "latency.ttft_ms.p50");
    // Schema 3: each bucket 2^(1/8) wide, so within ~9 % of the run's.
    assert!(
        (p50_ms - run_p50).abs() < 0.1 * run_p50,
        "native median {p50_ms} ms, the run's {run_p50} ms"
    );
    dashboard_queries_run(&prometheus, Some(seen_at));
}

/// Besides the requests: the server's own gauges from the run's scrapes, the
/// client's loop delay, and each closed window's percentiles and SLO status.
#[test]
fn the_exporter_serves_the_servers_gauges_the_loop_delay_and_each_windows_slo() {
    // The engine speculates: its acceptance is one of the server's figures.
    let mut config = default_engine();
    let cat = tokenscope_sim::engine::catalogue::Catalogue::builtin();
    let spec =
        tokenscope_sim::engine::spec::SpecDecode::parse("k=4,acceptance=0.6,method=ngram", |n| {
            cat.model(n).map_err(|e| e.to_string())
        });
    config.spec = Some(spec.unwrap());
    let engine = Engine::start(config);
    let port = free_port();
    let out = run_dir("serve-metrics-sources");
    let addr = format!("127.0.0.1:{port}");
    let mut bench = tokenscope()
        .args(["bench", "--url", &engine.url, "--quiet", "--no-history"])
        .args([
            "--concurrency",
            "8",
            "--requests",
            "4000",
            "--output-tokens",
            "64",
        ])
        .args([
            "--serve-metrics",
            &addr,
            "--windows",
            "1s",
            "--slo",
            "ttft_p50=10s",
        ])
        .args(["--scrape-interval", "200ms", "--out"])
        .arg(&out)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = None;
    while seen.is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        let Some(text) = try_get(port, "/metrics") else {
            continue;
        };
        let has = |s: &str| text.lines().any(|l| l.starts_with(s));
        // (A window of too few requests for its statistic leaves slo_met out.)
        let figures = ["slo_met", "spec_decode_acceptance", "kv_usage"];
        if figures
            .iter()
            .all(|f| text.contains(&format!("figure=\"{f}\"")))
            && has("tokenscope_server{")
        {
            seen = Some(text);
        }
    }
    let _ = bench.kill();
    let _ = bench.wait();
    let text = seen.expect("a window closed and the server was scraped within a minute");
    let running = sample(&text, "tokenscope_server", "figure=\"running\"");
    assert!(
        (0.0..=8.0).contains(&running),
        "the engine's running requests: {running}"
    );
    let kv = |l: &&str| l.starts_with("tokenscope_server{") && l.contains("figure=\"kv_usage\"");
    assert!(text.lines().any(|l| kv(&l)), "{text}");
    let accepted = sample(
        &text,
        "tokenscope_server",
        "figure=\"spec_decode_acceptance\"",
    );
    assert!(
        (accepted - 0.6).abs() < 0.12,
        "acceptance over the last scrape's interval: {accepted}"
    );
    let delay = sample(&text, "tokenscope_loop_delay_seconds", "run=");
    assert!((0.0..5.0).contains(&delay), "loop delay {delay} s");
    assert!(text
        .lines()
        .any(|l| l.starts_with("tokenscope_loop_delay_seconds{")));
    assert_eq!(
        sample(&text, "tokenscope_window", "figure=\"slo_met\""),
        1.0,
        "{text}"
    );
    let p99 = sample(&text, "tokenscope_window", "figure=\"ttft_p99_seconds\"");
    assert!(p99 > 0.0 && p99 < 10.0, "window TTFT p99 {p99} s");
}

/// The Content-Type of `/metrics` asked for as Prometheus asks for protobuf.
fn protobuf_content_type(port: u16) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let ask = "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3\r\nConnection: close\r\n\r\n";
    s.write_all(ask.as_bytes()).ok()?;
    let mut body = Vec::new();
    let _ = s.read_to_end(&mut body);
    let head = String::from_utf8_lossy(&body);
    head.lines().find_map(|l| {
        l.to_ascii_lowercase()
            .strip_prefix("content-type:")
            .map(|v| v.trim().to_string())
    })
}

/// Now, as Unix seconds (an instant query's `time`).
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A bench of 300 requests of 24 tokens at concurrency 4 against `url`,
/// serving its live figures at `addr`, started and left running.
fn exported_bench(url: &str, addr: &str, out: &std::path::Path, extra: &[&str]) -> Child {
    tokenscope()
        .args([
            "bench",
            "--url",
            url,
            "--quiet",
            "--no-metrics",
            "--no-history",
        ])
        .args([
            "--requests",
            "300",
            "--concurrency",
            "4",
            "--output-tokens",
            "24",
        ])
        .args(["--serve-metrics", addr])
        .args(extra)
        .arg("--out")
        .arg(out)
        .spawn()
        .unwrap()
}

/// Every query of the shipped Grafana dashboard (`deploy/grafana`), its
/// variables set to match all, is PromQL the Prometheus server runs, over
/// series the exporter wrote.
fn dashboard_queries_run(prometheus: &Prometheus, at: Option<f64>) {
    // Evaluated at the last moment Prometheus was seen holding the run's
    // figures: once the exporter is gone, a gauge's series is marked stale.
    let at = at.map_or(String::new(), |t| format!("&time={t:.3}"));
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/grafana/tokenscope.json"
    );
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap().clone())
        .map(|t| {
            let e = t["expr"].as_str().unwrap();
            e.replace("$run", ".*")
                .replace("$model", ".*")
                .replace("$tag", ".*")
        })
        .collect();
    assert!(exprs.len() >= 14);
    for e in exprs {
        let q: String = e
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect();
        let body = try_get(prometheus.port, &format!("/api/v1/query?query={q}{at}"))
            .unwrap_or_else(|| panic!("Prometheus refused: {e}"));
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["status"], "success", "{e}: {body}");
        // The server's panels have data where tokenscope scrapes a server
        // (these runs do not), the windows' once a window has closed.
        let optional = e.contains("tokenscope_server") || e.contains("tokenscope_window");
        assert!(
            optional || !v["data"]["result"].as_array().unwrap().is_empty(),
            "no series: {e}"
        );
    }
}

#[test]
fn an_address_in_use_is_refused_before_the_run() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let server = Server::start(exact(2, 1));
    let why = refused(&server.url, &["--no-metrics", "--serve-metrics", &addr]);
    assert!(why.contains("cannot listen"), "{why}");
}

/// What an OTLP receiver got: each push's request, decoded.
type Pushes = std::sync::Arc<std::sync::Mutex<Vec<ExportMetricsServiceRequest>>>;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;

/// How a broken collector fails a push.
#[derive(Clone, Copy, PartialEq)]
enum Broken {
    /// Answers nothing, closes nothing (a dead collector).
    Hangs,
    /// Reads the push, answers HTTP 500.
    Errs,
    /// Reads the push and closes the connection without an answer.
    Closes,
}

/// A collector failing each push its way.
fn broken_collector(how: Broken) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().take(200) {
            let Ok(mut s) = stream else { continue };
            if how == Broken::Hangs {
                held.push(s);
                continue;
            }
            let _ = read_request(&s);
            if how == Broken::Errs {
                let _ =
                    s.write_all(http("500 Internal Server Error", "text/plain", "down").as_bytes());
            }
        }
    });
    url
}

/// An OTLP/HTTP receiver on the protocol's own definitions
/// (`opentelemetry-proto`): each POST's body decoded as the collector
/// service's request; `hang` answers nothing, as a dead collector.
fn otlp_receiver(hang: bool) -> (String, Pushes) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let pushes: Pushes = Default::default();
    let got = pushes.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().take(200) {
            let Ok(mut s) = stream else { continue };
            if hang {
                held.push(s); // never answered, never closed
                continue;
            }
            let Some((first, body)) = read_request(&s) else {
                continue;
            };
            // The client spans (tests/request_ids.rs reads them) are taken and set aside.
            if first.starts_with("POST /v1/traces") {
                let _ = s.write_all(http("200 OK", "application/x-protobuf", "").as_bytes());
                continue;
            }
            assert!(first.starts_with("POST /v1/metrics"), "{first}");
            let decoded = <ExportMetricsServiceRequest as prost::Message>::decode(&body[..])
                .expect("a protobuf ExportMetricsServiceRequest");
            got.lock().unwrap().push(decoded);
            let _ = s.write_all(http("200 OK", "application/x-protobuf", "").as_bytes());
        }
    });
    (url, pushes)
}

/// `(count, sum)` of a histogram, or `(value, value)` of a sum, in the
/// last push that had `name`, over its points whose attributes hold `with`.
fn last_value(
    pushes: &[ExportMetricsServiceRequest],
    name: &str,
    with: Option<(&str, &str)>,
) -> (f64, f64) {
    let holds = |attrs: &[opentelemetry_proto::tonic::common::v1::KeyValue]| {
        with.is_none_or(|(k, v)| {
            attrs.iter().any(|a| {
                a.key == k
                    && matches!(&a.value.as_ref().and_then(|x| x.value.clone()), Some(AnyValue::StringValue(s)) if s == v)
            })
        })
    };
    let mut found = None;
    for push in pushes {
        for m in push
            .resource_metrics
            .iter()
            .flat_map(|r| &r.scope_metrics)
            .flat_map(|s| &s.metrics)
        {
            if m.name != name {
                continue;
            }
            let v = match &m.data {
                Some(Data::Histogram(h)) => h
                    .data_points
                    .iter()
                    .filter(|p| holds(&p.attributes))
                    .fold((0.0, 0.0), |(c, s), p| (c + p.count as f64, s + p.sum.unwrap_or(0.0))),
                Some(Data::Sum(sum)) => sum
                    .data_points
                    .iter()
                    .filter(|p| holds(&p.attributes))
                    .map(|p| match p.value {
                        Some(opentelemetry_proto::tonic::metrics::v1::number_data_point::Value::AsInt(i)) => i as f64,
                        Some(opentelemetry_proto::tonic::metrics::v1::number_data_point::Value::AsDouble(d)) => d,
                        None => 0.0,
                    })
                    .fold((0.0, 0.0), |(a, b), v| (a + v, b + v)),
                _ => continue,
            };
            found = Some(v);
        }
    }
    found.unwrap_or_else(|| panic!("no {name} in the pushes"))
}

#[test]
fn the_otlp_push_carries_the_genai_figures_and_they_add_up_to_the_results() {
    let server = Server::start(exact(10, 2));
    let (url, pushes) = otlp_receiver(false);
    let args = [
        "--no-metrics",
        "--requests",
        "40",
        "--concurrency",
        "4",
        "--output-tokens",
        "12",
        "--otlp-endpoint",
        &url,
        "--tag",
        "otlp",
    ];
    let (out, r, _) = bench_ok(&server.url, "otlp", &[&args]);
    let pushes = pushes.lock().unwrap().clone();
    assert!(!pushes.is_empty(), "the run's end pushed its figures");
    let ok = stat(&r, "counts.succeeded");
    let (requests, _) = last_value(&pushes, "tokenscope.requests", Some(("outcome", "ok")));
    assert_eq!(requests, ok);
    let (n, ttft_sum) = last_value(&pushes, "gen_ai.server.time_to_first_token", None);
    assert_eq!(n, ok);
    let mean_ms = ttft_sum / n * 1e3;
    let run_mean = stat(&r, "latency.ttft_ms.mean");
    assert!(
        (mean_ms - run_mean).abs() < 0.05 * run_mean,
        "{mean_ms} vs {run_mean}"
    );
    let (_, output) = last_value(
        &pushes,
        "gen_ai.client.token.usage",
        Some(("gen_ai.token.type", "output")),
    );
    assert_eq!(output, stat(&r, "tokens.output_total"));
    let (n, _) = last_value(
        &pushes,
        "gen_ai.client.operation.duration",
        Some(("gen_ai.operation.name", "chat")),
    );
    assert_eq!(n, ok);
    for name in [
        "gen_ai.server.time_per_output_token",
        "tokenscope.itl",
        "tokenscope.send_lag",
    ] {
        last_value(&pushes, name, None);
    }
    let resource = &pushes.last().unwrap().resource_metrics[0]
        .resource
        .as_ref()
        .unwrap()
        .attributes;
    let attr = |k: &str| {
        resource.iter().find(|a| a.key == k).and_then(|a| {
            match a.value.as_ref()?.value.clone()? {
                AnyValue::StringValue(s) => Some(s),
                _ => None,
            }
        })
    };
    assert_eq!(attr("service.name").as_deref(), Some("tokenscope"));
    assert_eq!(attr("tokenscope.tag").as_deref(), Some("otlp"));
    assert_eq!(
        attr("tokenscope.run"),
        out.file_name().map(|n| n.to_string_lossy().into_owned())
    );
}

/// Each way a collector fails is named in the finding — refused, closed,
/// an HTTP error, no answer — where every one read "Failed to shutdown".
#[test]
fn each_otlp_failure_is_named_by_its_kind() {
    let server = Server::start(exact(10, 1));
    let refused = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let cases = [
        (refused, "connection refused"),
        (broken_collector(Broken::Errs), "HTTP 500"),
        (broken_collector(Broken::Closes), "connection closed"),
        (
            broken_collector(Broken::Hangs),
            "no answer within the push timeout",
        ),
    ];
    for (i, (url, said)) in cases.iter().enumerate() {
        let args = [
            "--no-metrics",
            "--requests",
            "4",
            "--output-tokens",
            "4",
            "--otlp-endpoint",
            url,
        ];
        let (_, r, _) = bench_ok(&server.url, &format!("otlp-broken-{i}"), &[&args]);
        let finding = r["diagnosis"]
            .as_array()
            .and_then(|d| d.iter().find(|f| f["rule"] == "otlp_export_failed"))
            .unwrap_or_else(|| panic!("{url}: no otlp_export_failed in {:?}", rules(&r)));
        let message = finding["message"].as_str().unwrap();
        assert!(message.contains(said), "{said}: {message}");
        assert!(!message.contains("Failed to shutdown"), "{message}");
    }
}

#[test]
fn a_collector_that_never_answers_leaves_the_run_whole() {
    let server = Server::start(exact(10, 2));
    let (url, _) = otlp_receiver(true);
    let started = Instant::now();
    let args = [
        "--no-metrics",
        "--requests",
        "40",
        "--concurrency",
        "4",
        "--output-tokens",
        "12",
        "--otlp-endpoint",
        &url,
    ];
    let (_, r, recs) = bench_ok(&server.url, "otlp-hang", &[&args]);
    assert_eq!(stat(&r, "counts.succeeded"), 40.0);
    assert_eq!(recs.len(), 40);
    assert!(has_rule(&r, "otlp_export_failed"), "{:?}", rules(&r));
    // The end waits for the last push 5 s at most (and the pushes' own 3 s
    // timeouts run on the exporter's thread, never the load's).
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "{:?}",
        started.elapsed()
    );
}
