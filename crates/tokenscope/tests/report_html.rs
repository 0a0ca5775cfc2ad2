//! `report.html` in headless Chromium: the page of a bench run and of a sweep
//! render with no console errors and no network requests, every chart is an
//! SVG with data, and a screenshot of each is kept under
//! `target/test-artifacts/`.
//!
//! Chromium loads the page through a recording HTTP proxy on 127.0.0.1 that
//! serves it with a Content-Security-Policy allowing nothing but inline
//! styles and `data:` images: any fetch the page tries (a script, a font, an
//! image, a stylesheet, anywhere) is blocked and logged to the console, and
//! any request for another path of the page's host reaches the proxy. The
//! browser's own background traffic (Google's time and account services)
//! also passes the proxy; it is not the page's and is not counted. A control
//! page with an inline script, an external image and a relative one shows
//! that the checks fail when they should.

mod common;
use common::*;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn chromium() -> PathBuf {
    let path = std::env::var_os("CHROMIUM")
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from);
    assert!(
        path.exists(),
        "Chromium not found at {} (set CHROMIUM): scripts/test.sh installs Debian's `chromium` package",
        path.display()
    );
    path
}

/// A proxy that answers `GET http://report.test/page.html` with `page` and
/// records every request line.
struct Proxy {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Proxy {
    fn start(page: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                // Drain the headers.
                let mut h = String::new();
                while reader.read_line(&mut h).is_ok_and(|n| n > 2) {
                    h.clear();
                }
                let line = line.trim().to_string();
                log.lock().unwrap().push(line.clone());
                let reply = if line.starts_with("GET http://report.test/page.html") {
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\
Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'; img-src data:\r\n\
Content-Length: {}\r\nConnection: close\r\n\r\n{page}",
                        page.len()
                    )
                } else {
                    "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        .into()
                };
                let _ = stream.write_all(reply.as_bytes());
            }
        });
        Proxy { port, seen }
    }
}

/// What Chromium saw: the rendered DOM, console lines, requests other than the page.
struct Rendered {
    dom: String,
    console: Vec<String>,
    other_requests: Vec<String>,
}

fn render(page: String, screenshot: Option<&Path>) -> Rendered {
    let proxy = Proxy::start(page);
    // A profile of its own per page: tests render in parallel, and Chromium
    // refuses a profile another instance holds.
    static PROFILES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = PROFILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let profile = run_dir(&format!("chromium-profile-{n}"));
    let run = |extra: &[String]| {
        let o = Command::new(chromium())
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-features=MediaRouter,OptimizationHints",
                "--enable-logging=stderr",
                "--v=0",
                "--window-size=1280,2400",
                "--virtual-time-budget=3000",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(format!("--proxy-server=http://127.0.0.1:{}", proxy.port))
            .arg("--proxy-bypass-list=<-loopback>")
            .args(extra)
            .arg("http://report.test/page.html")
            .output()
            .expect("running chromium");
        assert!(
            o.status.success(),
            "chromium failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        o
    };
    let o = run(&["--dump-dom".to_string()]);
    if let Some(shot) = screenshot {
        std::fs::create_dir_all(shot.parent().unwrap()).unwrap();
        run(&[format!("--screenshot={}", shot.display())]);
        assert!(
            std::fs::metadata(shot).unwrap().len() > 10_000,
            "an empty screenshot"
        );
        eprintln!("screenshot: {}", shot.display());
    }
    let stderr = String::from_utf8_lossy(&o.stderr);
    let console = stderr
        .lines()
        .filter(|l| l.contains("CONSOLE") || l.contains("Uncaught"))
        .map(String::from)
        .collect();
    let other_requests = proxy
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("report.test") && !l.starts_with("GET http://report.test/page.html"))
        .cloned()
        .collect();
    Rendered {
        dom: String::from_utf8_lossy(&o.stdout).into_owned(),
        console,
        other_requests,
    }
}

fn artifacts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-artifacts")
}

/// Every `<div class="chart">` holds an SVG with drawn data; returns how many.
fn charts_with_data(dom: &str) -> usize {
    let charts: Vec<&str> = dom.split("<div class=\"chart\">").skip(1).collect();
    for (i, c) in charts.iter().enumerate() {
        let svg_end = c
            .find("</svg>")
            .unwrap_or_else(|| panic!("chart {i} is not an SVG"));
        let svg = &c[..svg_end];
        assert!(
            svg.trim_start().starts_with("<svg"),
            "chart {i} is not an SVG"
        );
        let data = svg.matches("<polyline").count()
            + svg.matches("<rect").count()
            + svg.matches("<circle").count();
        // The frame and background are rects too: data means more than those.
        assert!(data > 3, "chart {i} has no data");
    }
    charts.len()
}

/// Renders the page in Chromium, checks it, and returns its DOM.
fn check(name: &str, page_path: &Path, min_charts: usize) -> String {
    let page = std::fs::read_to_string(page_path).unwrap();
    let r = render(page, Some(&artifacts().join(format!("report-{name}.png"))));
    assert!(r.console.is_empty(), "console messages: {:?}", r.console);
    assert!(
        r.other_requests.is_empty(),
        "network requests: {:?}",
        r.other_requests
    );
    assert!(
        r.dom.contains("</html>") && r.dom.contains("tokenscope"),
        "rendered: {}",
        &r.dom[..r.dom.len().min(300)]
    );
    let n = charts_with_data(&r.dom);
    assert!(
        n >= min_charts,
        "{n} charts, expected at least {min_charts}"
    );
    r.dom
}

#[test]
fn the_checks_catch_console_errors_and_network_requests() {
    let bad = "<!DOCTYPE html><html><head><link rel=\"icon\" href=\"data:,\"></head><body><script>console.error('boom')</script>\
<img src=\"http://cdn.example.com/x.png\"><img src=\"/y.png\"></body></html>"
        .to_string();
    let r = render(bad, None);
    let said = |what: &str| r.console.iter().any(|l| l.contains(what));
    assert!(said("inline script"), "{:?}", r.console);
    assert!(said("cdn.example.com/x.png"), "{:?}", r.console);
    assert!(said("report.test/y.png"), "{:?}", r.console);
}

/// The bench run whose report is checked.
const RUN: [&str; 6] = [
    "--requests",
    "40",
    "--concurrency",
    "8",
    "--output-tokens",
    "64",
];

#[test]
fn report_of_a_bench_run_renders_offline_with_charts() {
    let out = run_dir("report-run");
    let o = tokenscope()
        .arg("bench")
        .args(RUN)
        .args(["--gpu-type", "h100-sxm", "--quiet", "--out"])
        .arg(&out)
        .args(["--slo", "ttft_p99=5s,tpot_p50=1s"])
        .output()
        .unwrap();
    // 40 requests cannot judge a p99 (exit 7); the page says so first.
    assert_eq!(
        o.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // bench wrote it at the end of the run.
    let page = out.join("report.html");
    assert!(page.exists());
    // Distributions (4 × CDF + histogram) and the time series the engine's /metrics feed.
    let dom = check("run", &page, 8 + 3);
    let verdict = dom.find("id=\"verdict\"").expect("a verdict block");
    assert!(
        verdict < dom.find("<svg").unwrap(),
        "the verdict comes before the charts"
    );
    let block = &dom[verdict..verdict + dom[verdict..].find("</div>").unwrap()];
    for words in [
        "SLO not judged: not enough data",
        "good requests",
        "not enough requests to judge ttft p99 (n = 40; need ≈ 1,000)",
        "tpot_p50",
    ] {
        assert!(block.contains(words), "{words} not in {block}");
    }
    // The SLO limits are lines on the latency CDFs.
    assert!(
        dom.contains("SLO ttft_p99 ≤"),
        "no SLO line on the TTFT CDF"
    );
    assert!(
        dom.contains("SLO tpot_p50 ≤"),
        "no SLO line on the TPOT CDF"
    );
}

/// A DCGM exporter stand-in on 127.0.0.1: GPU utilisation and power that
/// change with every scrape. It answers until dropped, for two minutes at most.
struct FakeDcgm {
    url: String,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl FakeDcgm {
    fn start() -> FakeDcgm {
        use std::sync::atomic::Ordering;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}/metrics", listener.local_addr().unwrap());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::spawn(move || {
            let until = std::time::Instant::now() + Duration::from_secs(120);
            let mut n = 0u32;
            while !flag.load(Ordering::Relaxed) && std::time::Instant::now() < until {
                let Ok((conn, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                conn.set_nonblocking(false).unwrap();
                let mut reader = BufReader::new(conn);
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|k| k > 2) {
                    line.clear();
                }
                n += 1;
                let body = format!(
                    "DCGM_FI_DEV_GPU_UTIL{{gpu=\"0\",modelName=\"NVIDIA H100 80GB HBM3\"}} {}\n\
                     DCGM_FI_DEV_POWER_USAGE{{gpu=\"0\",modelName=\"NVIDIA H100 80GB HBM3\"}} {}\n",
                    50 + n % 40,
                    300 + 10 * (n % 30)
                );
                let _ = write!(
                    reader.get_mut(),
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        FakeDcgm { url, stop }
    }
}

impl Drop for FakeDcgm {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

#[test]
fn report_with_a_dcgm_exporter_draws_gpu_utilisation_and_power_over_time() {
    let engine = Engine::start(default_engine());
    let dcgm = FakeDcgm::start();
    let out = run_dir("report-gpu");
    let o = tokenscope()
        .args(["bench", "--url", &engine.url, "--quiet"])
        .args(RUN)
        .args(["--metrics-url", &format!("{}/metrics", engine.url)])
        .args(["--metrics-url", &dcgm.url, "--scrape-interval", "200ms"])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    let r = results(&out);
    let util = stat(&r, "server.metrics.gpu_util_time_pct.mean");
    assert!((50.0..90.0).contains(&util), "{util}");
    let power = stat(&r, "server.metrics.gpu_power_w.max");
    assert!((300.0..600.0).contains(&power), "{power}");
    let page = out.join("report.html");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(!html.contains("no GPU source"), "the GPU chart is drawn");
    assert!(html.contains("GPU utilisation and power"));
    // The run's charts plus the GPU's, each an SVG with data, offline.
    let _ = check("gpu", &page, 8 + 4 + 1);
}

#[test]
fn report_of_a_sweep_renders_offline_with_its_recommendations() {
    let out = run_dir("report-sweep");
    let o = tokenscope()
        .args([
            "sim",
            "plan",
            "--quiet",
            "--sweep",
            "concurrency:1,4,16,64",
            "--requests",
            "100",
            "--gpu-type",
            "h100-sxm",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    let page = out.join("report.html");
    let html = std::fs::read_to_string(&page).unwrap();
    for profile in [
        "chat",
        "batch",
        "cost",
        "long-context",
        "Pareto frontier",
        "knee",
    ] {
        assert!(html.contains(profile), "the sweep page names {profile}");
    }
    let dom = check("sweep", &page, 5);
    // The conclusions and the recommendations come before the charts.
    let first_chart = dom.find("<svg").unwrap();
    let conclusions = dom.find("id=\"conclusions\"").expect("a conclusions block");
    let recommended = dom.find("<h2>Recommendations</h2>").unwrap();
    assert!(
        conclusions < first_chart && recommended < first_chart,
        "conclusions first"
    );
    assert!(
        dom[conclusions..recommended].contains("knee")
            || dom[conclusions..recommended].contains("not saturated"),
        "the knee or 'not saturated' is stated at the top"
    );
    // Re-rendering from the directory gives the same page kind, and Markdown and CSV.
    let o = tokenscope()
        .arg("report")
        .arg(&out)
        .args(["--format", "md"])
        .output()
        .unwrap();
    assert_ok(&o);
    let md = String::from_utf8_lossy(&o.stdout);
    assert!(
        md.contains("| profile | judged by | load | why | margin |")
            && md.contains("| agent | cost per answer, E2E p99 |")
            && md.contains("concurrency 64"),
        "{md}"
    );
    let o = tokenscope()
        .arg("report")
        .arg(&out)
        .args(["--format", "csv"])
        .output()
        .unwrap();
    assert_ok(&o);
    let csv = std::fs::read_to_string(out.join("sweep.csv")).unwrap();
    assert_eq!(csv.lines().count(), 5, "a header and four points: {csv}");
    let o = tokenscope()
        .arg("report")
        .arg(out.join("point-00"))
        .args(["--format", "csv"])
        .output()
        .unwrap();
    assert_ok(&o);
    let csv = std::fs::read_to_string(out.join("point-00/requests.csv")).unwrap();
    assert_eq!(csv.lines().count(), 101, "a header and 100 requests");
    assert!(csv.starts_with("id,warmup,scheduled_ms,sent_ms,first_token_ms"));
}

#[test]
fn history_trend_page_renders_offline_with_the_change_point_marked() {
    let dir = run_dir("report-history");
    let db = dir.join("history.db").display().to_string();
    let profile = slow_decode_profile("report-history-profile");
    for seed in 1..=7 {
        let mut cmd = tokenscope();
        cmd.args(["sim", "plan", "--rate", "8", "--requests", "200", "--quiet"])
            .args(["--seed", &seed.to_string(), "--db", &db, "--out"])
            .arg(dir.join(format!("run-{seed}")));
        if seed == 7 {
            cmd.arg("--profile").arg(&profile);
        }
        let o = cmd.output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let page = dir.join("trend.html");
    let o = tokenscope()
        .args([
            "history", "trend", "tpot_p50", "--run", "1", "--db", &db, "--html",
        ])
        .arg(&page)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // TTFT, TPOT, ITL and E2E percentiles, tokens/s, requests/s, error rate.
    let dom = check("history-trend", &page, 10);
    assert!(dom.contains("#7 regression"), "the change point is marked");
    assert!(!dom.contains("#6 regression"));
}

#[test]
fn sim_size_report_renders_offline_with_its_chart() {
    let dir = run_dir("report-size");
    let o = tokenscope()
        .args([
            "sim",
            "size",
            "--model",
            "llama-3.1-8b",
            "--rate",
            "10",
            "--slo",
            "ttft_p99=500ms,tpot_p99=50ms",
        ])
        .args(["--gpu", "l4,l40s,h100-sxm", "--top", "3", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dom = check("size", &dir.join("report.html"), 1);
    assert!(
        dom.contains("tokenscope sim plan --model llama-3.1-8b"),
        "the re-run commands are listed"
    );
}

/// A tune's page: its recommendations, every setting linked to its own
/// report, planned against measured; offline, without console errors.
#[test]
fn tune_report_renders_offline_with_its_settings_and_recommendations() {
    let doc = serde_json::json!({
        "schema": "tokenscope.tune/v1",
        "serve": "llama-server -m m.gguf --port {port} -np {slots}",
        "slo": "ttft_p99 ≤ 2000 ms",
        "interrupted": false,
        "settings": [
            {"name": "slots=1", "dir": "slots-1", "measured": true, "capacity": 3.1,
             "bracket": [3.1, 3.3], "at_least": false, "ready_s": 1.2, "stop_s": 0.1,
             "max_output_tokens_per_s": 90.0, "notes": [],
             "find": {"points": [{}, {}, {}], "requests": 300},
             "planned": {"bracket": {"capacity": 3.0}}},
            {"name": "slots=4", "dir": "slots-4", "measured": true, "capacity": 9.8,
             "bracket": [9.8, 10.3], "at_least": false, "ready_s": 1.3, "stop_s": 0.1,
             "max_output_tokens_per_s": 260.0, "notes": [],
             "find": {"points": [{}, {}, {}, {}], "requests": 420},
             "planned": {"bracket": {"capacity": 10.4}}},
            {"name": "slots=16", "dir": "slots-16", "measured": false,
             "notes": ["not measured: outside the plan's first 2 (--plan-first)"],
             "planned": {"bracket": {"capacity": 9.1}}}
        ],
        "recommendations": [
            {"service": "chat", "setting": "slots=4", "why": "the highest SLO capacity: 9.8 requests/s"},
            {"service": "long-context", "setting": null, "why": "not judged by tune"}
        ]
    });
    let dir = run_dir("tune-report");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("report.html");
    std::fs::write(&path, tokenscope_report::tune::page(&doc)).unwrap();
    let dom = check("tune", &path, 0);
    for want in [
        "Recommended settings",
        "slots-4/report.html",
        "Planned against measured",
        "not measured: outside the plan",
        "not judged by tune",
    ] {
        assert!(dom.contains(want), "{want}: {dom}");
    }
}
