//! `report.html`: one self-contained page per run or sweep — inline CSS and
//! SVG, no script, nothing fetched — so it opens offline and attaches to a
//! ticket.

use crate::charts::{self, Axes, Mark, Series, Style};
use crate::health::{self, Health};
use crate::run_dir::{Run, Sweep};
use std::fmt::Write;
use tokenscope_core::analysis::Analysis;
use tokenscope_core::results::{Finding, RunResults};
use tokenscope_core::slo::Verdict;
use tokenscope_core::stats::Summary;

/// Escapes text for HTML.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const STYLE: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:1200px;color:#1f2328;padding:0 16px}
h1{font-size:22px;margin-bottom:4px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
.meta{color:#57606a;font-size:13px}.cards{display:flex;gap:16px;flex-wrap:wrap;margin-top:16px}
.card{flex:1 1 320px;border:1px solid #d0d7de;border-top:6px solid;border-radius:6px;padding:8px 14px}
.card h3{margin:4px 0 8px;font-size:16px}.card table{width:100%}.card td:nth-child(2){white-space:nowrap}
.charts{display:flex;flex-wrap:wrap;gap:12px}.chart{border:1px solid #d0d7de;border-radius:6px}
table{border-collapse:collapse;font-size:13px}td,th{padding:3px 8px;text-align:right;border-bottom:1px solid #eaeef2}
th{background:#f6f8fa}td:first-child,th:first-child{text-align:left}
.dot{display:inline-block;width:10px;height:10px;border-radius:5px;margin-right:6px}
.note{color:#57606a;font-style:italic}pre{background:#f6f8fa;padding:10px;font-size:12px;overflow:auto}
.finding{border-left:4px solid;padding:4px 10px;margin:8px 0}
.verdict{border:2px solid;border-radius:6px;padding:8px 14px;margin:10px 0;font-size:15px}
.verdict.good{border-color:#1a7f37;background:#dafbe1}.verdict.bad{border-color:#cf222e;background:#ffebe9}
.verdict.unknown{border-color:#9a6700;background:#fff8c5}.verdict ul{margin:4px 0;font-size:13px}";

pub fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
<link rel=\"icon\" href=\"data:,\"><title>{}</title><style>{STYLE}</style></head>\n<body>\n{body}\n</body></html>\n",
        esc(title)
    )
}

/// A chart, or a note saying why there is none.
fn chart(out: &mut String, svg: Option<String>, missing: &str) {
    match svg {
        Some(svg) => {
            let _ = write!(out, "<div class=\"chart\">{svg}</div>");
        }
        None => {
            let _ = write!(out, "<p class=\"note\">{}</p>", esc(missing));
        }
    }
}

fn ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0} ms")
    } else {
        format!("{v:.2} ms")
    }
}

fn dot(h: Health) -> String {
    format!(
        "<span class=\"dot\" style=\"background:{}\"></span>",
        h.css()
    )
}

/// A card: a title, a colour (its worst row), rows of (health, name, value, note).
fn card(out: &mut String, title: &str, rows: &[Row]) {
    let worst = rows.iter().map(|r| r.0).max().unwrap_or(Health::Unknown);
    let _ = write!(
        out,
        "<div class=\"card\" style=\"border-top-color:{}\"><h3>{}</h3><table>",
        worst.css(),
        esc(title)
    );
    for (h, name, value, note) in rows {
        let _ = write!(
            out,
            "<tr><td>{}{}</td><td>{}</td><td class=\"note\">{}</td></tr>",
            dot(*h),
            esc(name),
            esc(value),
            esc(note)
        );
    }
    out.push_str("</table></div>");
}

/// The SLO limit on `metric`_`stat`, when `--slo` named one.
fn limit(r: &RunResults, metric: &str, stat: &str) -> Option<f64> {
    r.slo.as_ref().and_then(|s| {
        s.objectives
            .iter()
            .find(|o| o.metric == metric && o.stat == stat)
            .map(|o| o.limit_ms)
    })
}

/// A card's row: its health (the colour), name, value and note.
type Row = (Health, String, String, String);

/// A row with no judgement of its health.
fn plain(name: &str, value: String, note: &str) -> Row {
    (Health::Unknown, name.into(), value, note.into())
}

/// The three cards at the top of a run's page.
fn cards(out: &mut String, r: &RunResults) {
    out.push_str("<div class=\"cards\">");
    card(out, "Latency", &latency_rows(r));
    card(out, "Throughput", &throughput_rows(r));
    card(out, "Efficiency", &efficiency_rows(r));
    out.push_str("</div>");
}

/// The latencies' medians and tails, each judged against its SLO limit.
fn latency_rows(r: &RunResults) -> Vec<Row> {
    let l = &r.latency;
    let mut lat = Vec::new();
    let mut add = |name: &str, metric: &str, s: Option<Summary>, stat: &str| {
        if let Some(s) = s {
            let v = s.get(stat).unwrap_or(f64::NAN);
            let lim = limit(r, metric, stat);
            let note = lim.map(|l| format!("SLO ≤ {}", ms(l))).unwrap_or_default();
            lat.push((
                health::against_limit(v, lim),
                format!("{name} {stat}"),
                ms(v),
                note,
            ));
        }
    };
    add("TTFT", "ttft", l.ttft_ms, "p50");
    add("TTFT", "ttft", l.ttft_ms, "p99");
    if l.answer_start_ms.is_some() {
        add("answer start", "answer_start", l.answer_start_ms, "p50");
        add("answer start", "answer_start", l.answer_start_ms, "p99");
        add("thinking", "reasoning", l.reasoning_ms, "p50");
    }
    add("TPOT", "tpot", l.tpot_ms, "p50");
    add("TPOT", "tpot", l.tpot_ms, "p99");
    if l.answer_tpot_ms.is_some() {
        add("answer TPOT", "answer_tpot", l.answer_tpot_ms, "p50");
    }
    add("ITL", "itl", l.itl_ms, "p99");
    add("E2E", "e2e", l.e2e_ms, "p99");
    lat
}

/// The rates, the concurrency held, and the failures with their kinds.
fn throughput_rows(r: &RunResults) -> Vec<Row> {
    let (t, c) = (&r.throughput, &r.counts);
    let mut thr = vec![
        plain(
            "output tokens/s",
            format!("{:.1}", t.output_tokens_per_s),
            "",
        ),
        plain("total tokens/s", format!("{:.1}", t.total_tokens_per_s), ""),
        plain("requests/s", format!("{:.2}", t.requests_per_s), ""),
        plain(
            "concurrency",
            format!("{:.1} mean, {} max", t.concurrency.mean, t.concurrency.max),
            "",
        ),
        (
            health::failures(c.failed, c.requests.saturating_sub(c.abandoned)),
            "failed".into(),
            format!("{} of {}", c.failed, c.requests.saturating_sub(c.abandoned)),
            c.errors
                .iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect::<Vec<_>>()
                .join(", "),
        ),
    ];
    if let Some(items) = t.items_per_s {
        let note = format!(
            "vectors embedded or documents scored; {:.1} input tokens/s",
            t.input_tokens_per_s
        );
        thr.push(plain("items/s", format!("{items:.1}"), &note));
    }
    if let Some(g) = t.goodput_requests_per_s {
        thr.push(plain(
            "goodput requests/s",
            format!("{g:.2}"),
            "meeting every SLO",
        ));
    }
    thr
}

/// The GPU, the KV cache, the cost and the client's own CPU, where known.
fn efficiency_rows(r: &RunResults) -> Vec<Row> {
    let e = &r.efficiency;
    let mut eff = Vec::new();
    if let Some(g) = &e.gpu {
        if let Some(u) = g["utilisation_time_pct_mean"].as_f64() {
            let (h, why) = health::gpu_util(u);
            eff.push((h, "GPU utilisation".into(), format!("{u:.0} %"), why.into()));
        }
        if let Some(p) = g["power_w_mean"].as_f64() {
            eff.push(plain("GPU power", format!("{p:.0} W"), ""));
        }
    }
    if let Some(k) = &e.kv_cache {
        if let Some(u) = k["usage_max"].as_f64() {
            let pre = k["preemptions"].as_f64().unwrap_or(0.0);
            let (h, why) = health::kv_cache(u, pre);
            eff.push((
                h,
                "KV cache usage max".into(),
                format!("{:.0} %", u * 100.0),
                why.into(),
            ));
            eff.push((
                if pre > 0.0 { Health::Bad } else { Health::Good },
                "preemptions".into(),
                format!("{pre:.0}"),
                String::new(),
            ));
        }
    }
    if let Some(cost) = &e.cost {
        eff.extend(cost_rows(cost));
    }
    if let Some(cpu) = r.client.cpu_cores {
        let note = "the load generator's own CPU";
        eff.push(plain("client cores busy", format!("{cpu:.2}"), note));
    }
    if eff.is_empty() {
        eff.push(plain(
            "no GPU, KV or cost figures",
            "—".into(),
            "give --gpu-price or --gpu-type; a server exposing /metrics adds KV",
        ));
    }
    eff
}

/// What the tokens cost: per 1K output tokens, per 1K answer tokens and
/// per answer, where known.
fn cost_rows(cost: &tokenscope_core::cost::Cost) -> Vec<Row> {
    let mut rows = Vec::new();
    if let Some(c1k) = cost.usd_per_1k_output_tokens {
        let note = format!("${:.2}/GPU-h × {}", cost.usd_per_gpu_hour, cost.gpus);
        rows.push(plain(
            "cost per 1K output tokens",
            format!("${c1k:.5}"),
            &note,
        ));
    }
    let more = [
        (
            "cost per 1K answer tokens",
            cost.usd_per_1k_answer_tokens,
            "thinking paid, not read",
        ),
        (
            "cost per answer",
            cost.usd_per_answer,
            "per request that answered",
        ),
    ];
    for (name, value, note) in more {
        if let Some(v) = value {
            rows.push(plain(name, format!("${v:.5}"), note));
        }
    }
    rows
}

/// Points of a time series: (seconds into the run, value).
type Points = Vec<(f64, f64)>;

/// A latency's distribution in ms: `(value, how many)` per histogram bucket.
struct Values {
    name: &'static str,
    buckets: Vec<(f64, f64)>,
    /// ITL counts tokens; the others count requests.
    per_token: bool,
}

/// The latency distributions of the successful, measured requests, in ms,
/// from the run's histograms (never every value: a long run has millions).
fn distributions(run: &Run) -> Vec<Values> {
    run.requests
        .distributions()
        .into_iter()
        .map(|(name, d)| Values {
            name,
            buckets: d
                .buckets()
                .into_iter()
                .map(|(v, n)| (v / 1e3, n as f64))
                .collect(),
            per_token: name == "ITL",
        })
        .collect()
}

/// Client-side series from the records: in flight and output tokens/s, per second.
fn client_series(run: &Run) -> (Points, Points) {
    let tokens = run.requests.tokens_per_second();
    let in_flight = run.requests.in_flight_per_second();
    let at = |i: usize| i as f64 + 0.5;
    (
        in_flight
            .iter()
            .enumerate()
            .map(|(i, v)| (at(i), *v))
            .collect(),
        tokens
            .iter()
            .enumerate()
            .map(|(i, v)| (at(i), *v))
            .collect(),
    )
}

/// What the TTFT-by-send-time chart reads of a record: its line's other
/// fields (its chunks above all) are skipped, not parsed.
#[derive(serde::Deserialize)]
struct SentAndFirst {
    #[serde(default)]
    warmup: bool,
    sent_at_us: u64,
    first_token_at_us: Option<u64>,
}

/// TTFT p50 and p99 (ms) of the measured requests, by when they were sent,
/// in up to 60 windows of the run: how latency moved through it (a rate
/// step, a replica coming up). From the points the figures kept while the
/// records were read; a run too long to keep them is read back a line at a time.
fn ttft_by_send_time(run: &Run) -> (Points, Points) {
    const WINDOWS: usize = 60;
    let end_s = run.results.window.end_s.max(1e-3);
    let width_s = (end_s / WINDOWS as f64).max(1.0);
    let mut windows: Vec<tokenscope_core::stats::Distribution> =
        (0..WINDOWS).map(|_| Default::default()).collect();
    let mut take = |sent_us: u64, ttft_us: u64| {
        let i = (sent_us as f64 / 1e6 / width_s) as usize;
        windows[i.min(WINDOWS - 1)].record_us(ttft_us);
    };
    match run.requests.ttft_by_sent() {
        Some(points) => points.for_each(|(sent, ttft)| take(sent, ttft)),
        None => {
            let read = crate::run_dir::for_each_as(&run.dir, |r: SentAndFirst| {
                let ttft = r.first_token_at_us.map(|t| t.saturating_sub(r.sent_at_us));
                if let (false, Some(ttft)) = (r.warmup, ttft) {
                    take(r.sent_at_us, ttft);
                }
            });
            if read.is_err() {
                return (Vec::new(), Vec::new());
            }
        }
    }
    let at = |q: f64| -> Points {
        windows
            .iter()
            .enumerate()
            .filter_map(|(i, d)| Some(((i as f64 + 0.5) * width_s, d.quantile(q)? / 1e3)))
            .collect()
    };
    (at(0.5), at(0.99))
}

/// A column of `timeseries.jsonl` as (t, value × scale).
fn column(run: &Run, key: &str, scale: f64) -> Vec<(f64, f64)> {
    run.timeseries
        .iter()
        .filter_map(|row| Some((row["t_s"].as_f64()?, row[key].as_f64()? * scale)))
        .collect()
}

/// The server's generated tokens/s between samples.
fn server_tokens_per_s(run: &Run) -> Vec<(f64, f64)> {
    let c = column(run, "generation_tokens_total", 1.0);
    c.windows(2)
        .filter(|w| w[1].0 > w[0].0 && w[1].1 >= w[0].1)
        .map(|w| {
            (
                (w[0].0 + w[1].0) / 2.0,
                (w[1].1 - w[0].1) / (w[1].0 - w[0].0),
            )
        })
        .collect()
}

fn time_axes<'a>(title: &'a str, y: &'a str) -> Axes<'a> {
    Axes {
        title,
        x: "seconds into the run",
        y,
        log_x: false,
    }
}

fn nonempty(v: Vec<(String, Vec<(f64, f64)>)>) -> Vec<Series> {
    v.into_iter()
        .filter(|(_, p)| !p.is_empty())
        .map(|(n, p)| Series::line(n, p))
        .collect()
}

fn findings(out: &mut String, list: &[Finding]) {
    if list.is_empty() {
        out.push_str("<p class=\"note\">No rule fired: nothing looked wrong.</p>");
    }
    for f in list {
        let h = match f.severity.as_str() {
            "critical" => Health::Bad,
            "warning" => Health::Warn,
            _ => Health::Unknown,
        };
        let _ = write!(
            out,
            "<div class=\"finding\" style=\"border-color:{}\"><b>{}</b> ({}) — {}",
            h.css(),
            esc(&f.rule),
            esc(&f.severity),
            esc(&f.message)
        );
        if !f.evidence.is_empty() {
            out.push_str("<table>");
            for (k, v) in &f.evidence {
                let _ = write!(
                    out,
                    "<tr><td>{}</td><td>{}</td></tr>",
                    esc(k),
                    esc(&v.to_string())
                );
            }
            out.push_str("</table>");
        }
        out.push_str("</div>");
    }
}

fn header(out: &mut String, kind: &str, r: &RunResults) {
    let builtin = r.target.builtin_note();
    let _ = write!(
        out,
        "<h1>tokenscope {kind} — {}</h1><p class=\"meta\">{} {}{} · {} · started {} · tokenscope {}{}</p>",
        esc(&r.target.model),
        esc(&r.target.api),
        esc(&r.target.url),
        esc(&builtin),
        esc(&r.server.kind.clone().unwrap_or_else(|| "server kind not detected".into())),
        esc(&r.started_at),
        esc(&r.tool.version),
        if r.partial { " · <b>partial: interrupted</b>" } else { "" }
    );
}

/// The SLO limits on one metric (`TTFT`, …), as labelled chart lines.
fn slo_lines(r: &RunResults, metric: &str) -> Vec<(String, f64)> {
    let metric = metric.to_lowercase();
    r.slo
        .iter()
        .flat_map(|s| &s.objectives)
        .filter(|o| o.metric == metric)
        .map(|o| {
            (
                format!("SLO {}_{} ≤ {}", o.metric, o.stat, ms(o.limit_ms)),
                o.limit_ms,
            )
        })
        .collect()
}

/// The SLO verdict in words, first thing on the page.
fn verdict(out: &mut String, r: &RunResults) {
    let Some(slo) = &r.slo else {
        return;
    };
    let v = slo.verdict.unwrap_or(if slo.met {
        Verdict::Met
    } else {
        Verdict::NotMet
    });
    let (class, words) = match v {
        Verdict::Met => ("good", "SLO met"),
        Verdict::NotMet => ("bad", "SLO NOT met"),
        Verdict::NotEnoughData => ("unknown", "SLO not judged: not enough data"),
    };
    let _ = write!(
        out,
        "<div class=\"verdict {class}\" id=\"verdict\"><b>{words}</b> — good requests {} of {}<ul>",
        slo.good_requests, r.counts.requests
    );
    for o in &slo.objectives {
        let value = o.value_ms.map_or("—".into(), ms);
        let n = o.n.map_or(String::new(), |n| format!(", n = {n}"));
        let interval = match (o.ci_low_ms, o.ci_high_ms) {
            (None, None) => String::new(),
            (lo, hi) => format!(
                ", 95 % CI {} … {}",
                lo.map_or("?".into(), ms),
                hi.map_or("unbounded".into(), ms)
            ),
        };
        let mark = match o.verdict {
            Some(v) => v.words(),
            None if o.met => "met",
            None => "NOT met",
        };
        let _ = write!(
            out,
            "<li>{}_{} ≤ {}: {value}{interval}{n} — {}</li>",
            esc(&o.metric),
            esc(&o.stat),
            ms(o.limit_ms),
            esc(o.reason.as_deref().unwrap_or(mark))
        );
    }
    out.push_str("</ul></div>");
}

/// The page of one run.
pub fn run_page(run: &Run) -> String {
    let r = &run.results;
    let mut out = String::new();
    header(&mut out, "run", r);
    verdict(&mut out, r);
    cards(&mut out, r);
    distribution_charts(&mut out, run);
    time_charts(&mut out, run);
    out.push_str("<h2>Diagnosis</h2>");
    findings(&mut out, &r.diagnosis);
    workload(&mut out, r);
    adapters(&mut out, r);
    classes(&mut out, r);
    answer_sections(&mut out, r);
    settings(&mut out, r);
    page(&format!("tokenscope run — {}", r.target.model), &out)
}

/// Each latency's CDF (per request, or per token for ITL) with its SLO
/// limit, and its histogram.
fn distribution_charts(out: &mut String, run: &Run) {
    let r = &run.results;
    out.push_str("<h2>Distributions</h2><div class=\"charts\">");
    for Values {
        name,
        buckets,
        per_token,
    } in distributions(run)
    {
        let unit = format!("{name} (ms)");
        let share = match per_token {
            true => "share of tokens ≤ x",
            false => "share of requests ≤ x",
        };
        chart(
            out,
            charts::cdf_weighted(
                &format!("{name}: CDF"),
                &unit,
                share,
                &buckets,
                &slo_lines(r, name),
            ),
            &format!("{name}: no values (no successful request had one)"),
        );
        let (values, weights): (Vec<f64>, Vec<f64>) = buckets.into_iter().unzip();
        chart(
            out,
            charts::histogram(
                &format!("{name}: histogram"),
                &unit,
                &values,
                Some(&weights),
            ),
            &format!("{name}: no values"),
        );
    }
    out.push_str("</div>");
}

/// The run over time: load, replicas, TTFT, tokens/s, the server's queue
/// and KV cache, the GPU, and the client's own event-loop delay; a chart
/// with no source says why.
fn time_charts(out: &mut String, run: &Run) {
    out.push_str("<h2>Over time</h2><div class=\"charts\">");
    let (in_flight, tokens) = client_series(run);
    let load = nonempty(vec![
        ("in flight (client)".into(), in_flight),
        ("running (server)".into(), column(run, "running", 1.0)),
        ("waiting (server)".into(), column(run, "waiting", 1.0)),
    ]);
    chart(
        out,
        charts::xy(
            &time_axes("Requests in flight and waiting", "requests"),
            &load,
            &[],
        ),
        "no requests",
    );
    // An autoscaled plan: the replicas serving, and TTFT through the changes.
    let replicas = column(run, "replicas", 1.0);
    if replicas.iter().any(|&(_, n)| n != replicas[0].1) {
        let series = nonempty(vec![("replicas serving".into(), replicas)]);
        chart(
            out,
            charts::xy(&time_axes("Replicas serving", "replicas"), &series, &[]),
            "no replicas",
        );
    }
    let (p50, p99) = ttft_by_send_time(run);
    let ttft = nonempty(vec![("TTFT p50".into(), p50), ("TTFT p99".into(), p99)]);
    chart(
        out,
        charts::xy(
            &time_axes("TTFT by when the request was sent", "ms"),
            &ttft,
            &[],
        ),
        "no TTFT (no streamed answers)",
    );
    let tps = nonempty(vec![
        ("received (client)".into(), tokens),
        ("generated (server)".into(), server_tokens_per_s(run)),
    ]);
    chart(
        out,
        charts::xy(&time_axes("Output tokens/s", "tokens/s"), &tps, &[]),
        "no tokens",
    );
    server_time_charts(out, run);
    out.push_str("</div>");
}

/// The server's queue and KV cache, the GPU and the client's loop delay
/// over time; a chart with no source says why.
fn server_time_charts(out: &mut String, run: &Run) {
    let r = &run.results;
    let server_missing = if run.timeseries.is_empty() {
        "not sampled: the run read no /metrics (--no-metrics or none given)"
    } else {
        "the server does not expose it"
    };
    let queue = nonempty(vec![(
        "queue time, mean since last sample".into(),
        column(run, "queue_time_mean_ms", 1.0),
    )]);
    chart(
        out,
        charts::xy(&time_axes("Server queue time", "ms"), &queue, &[]),
        &format!("Queue time: {server_missing}"),
    );
    let kv = nonempty(vec![(
        "KV-cache usage".into(),
        column(run, "kv_usage", 100.0),
    )]);
    chart(
        out,
        charts::xy(&time_axes("KV-cache usage", "%"), &kv, &[]),
        &format!("KV-cache usage: {server_missing}"),
    );
    let gpu = nonempty(vec![
        (
            "GPU utilisation (%)".into(),
            column(run, "gpu_util_time_pct", 1.0),
        ),
        ("GPU power (W)".into(), column(run, "gpu_power_w", 1.0)),
    ]);
    chart(
        out,
        charts::xy(&time_axes("GPU utilisation and power", "% · W"), &gpu, &[]),
        "GPU utilisation and power: no GPU source (--gpu local, or a DCGM exporter with --metrics-url)",
    );
    let delay: Points = r
        .client
        .loop_delay_per_s
        .iter()
        .map(|&(s, ms)| (s as f64 + 0.5, ms))
        .collect();
    let delay = nonempty(vec![("worst wake-up in the second".into(), delay)]);
    chart(
        out,
        charts::xy(
            &time_axes("Client event-loop delay (a 1 ms timer)", "ms"),
            &delay,
            &[],
        ),
        "Client loop delay: not measured (a simulated run, or one before it was)",
    );
}

/// Media, and what the answers were checked for (formats, tool calls,
/// grades, sessions): a list each, where there is one.
fn answer_sections(out: &mut String, r: &RunResults) {
    let media = ("Media".to_string(), crate::media::lines(r));
    for (title, lines) in std::iter::once(media).chain(crate::answers::sections(r)) {
        if lines.is_empty() {
            continue;
        }
        let _ = write!(out, "<h2>{}</h2><ul>", esc(&title));
        for line in lines {
            let _ = write!(out, "<li>{}</li>", esc(&line));
        }
        out.push_str("</ul>");
    }
}

/// What the run asked of the server against what it delivered.
fn workload(out: &mut String, r: &RunResults) {
    let rows = crate::fidelity::rows(r);
    if rows.is_empty() {
        return;
    }
    out.push_str("<h2>Workload: asked and delivered</h2><table><tr><th></th><th>asked</th><th>delivered</th></tr>");
    for [what, asked, delivered] in rows {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&what),
            esc(&asked),
            esc(&delivered)
        );
    }
    out.push_str("</table>");
}

/// `--lora`: each adapter's figures.
fn adapters(out: &mut String, r: &RunResults) {
    let title = format!("Adapters (--lora, {})", crate::adapters::assignment(r));
    let header = crate::adapters::HEADER.map(str::to_string);
    table(out, &title, &header, crate::adapters::rows(r));
}

/// `--class`: each class of traffic's figures and SLO verdict.
fn classes(out: &mut String, r: &RunResults) {
    let title = "Classes (--class; each under its own SLO, else the run's)";
    table(
        out,
        title,
        &crate::adapters::class_header(),
        crate::adapters::class_rows(r),
    );
}

/// A titled table of `rows` under `header`; nothing without rows.
fn table<const N: usize>(out: &mut String, title: &str, header: &[String], rows: Vec<[String; N]>) {
    if rows.is_empty() {
        return;
    }
    let _ = write!(out, "<h2>{}</h2><table><tr>", esc(title));
    for h in header {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr>");
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            let _ = write!(out, "<td>{}</td>", esc(&cell));
        }
        out.push_str("</tr>");
    }
    out.push_str("</table>");
}

fn settings(out: &mut String, r: &RunResults) {
    let _ = write!(
        out,
        "<h2>Settings</h2><pre>{}</pre>",
        esc(&serde_json::to_string_pretty(&r.config).unwrap_or_default())
    );
}

/// What the sweep concluded, first on the page: the knee (or "not
/// saturated"), the SLO capacity, then the recommendations.
fn conclusions(out: &mut String, a: &Analysis) {
    let mut text = crate::terminal::analysis(a);
    if let Some(i) = text.find("\nRecommended operating points") {
        text.truncate(i);
    }
    let _ = write!(
        out,
        "<div class=\"verdict unknown\" id=\"conclusions\"><pre>{}</pre></div>",
        esc(text.trim())
    );
    out.push_str("<h2>Recommendations</h2><table><tr><th>profile</th><th>objective</th><th>judged by</th><th>load</th><th>why</th><th>margin</th><th>TTFT p99</th><th>TPOT p99</th><th>tokens/s</th><th>cost/1K</th><th>GPU util</th><th>KV max</th></tr>");
    for r in &a.recommendations {
        let e = r.expect.as_ref();
        let opt = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or("—".into(), f);
        let _ = write!(
            out,
            "<tr><td><b>{}</b></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&r.profile),
            esc(&r.objective),
            esc(&r.judged_by),
            r.load.map_or("none".into(), |l| if r.lower_bound { format!("≥ {l}") } else { l.to_string() }),
            esc(&r.why),
            opt(r.margin_pct, &|v| format!("{v:.0} %")),
            opt(e.map(|p| p.ttft_p99_ms), &ms),
            opt(e.map(|p| p.tpot_p99_ms), &ms),
            opt(e.map(|p| p.output_tps), &|v| format!("{v:.0}")),
            opt(e.and_then(|p| p.cost_per_1k), &|v| format!("${v:.5}")),
            opt(e.and_then(|p| p.gpu_util_pct), &|v| format!("{v:.0} %")),
            opt(e.and_then(|p| p.kv_usage_max), &|v| format!("{:.0} %", v * 100.0)),
        );
    }
    out.push_str("</table>");
}

/// The page of a sweep: the trade-off curve with the frontier, knee and
/// recommendations marked, cost and utilisation against load, the tables.
pub fn sweep_page(s: &Sweep) -> String {
    let a = &s.analysis;
    let mut out = String::new();
    if let Some(first) = s.points.first() {
        header(&mut out, "sweep", &first.results);
    }
    conclusions(&mut out, a);
    out.push_str("<h2>Throughput against latency</h2><div class=\"charts\">");
    frontier_chart(&mut out, a);
    load_charts(&mut out, s);
    out.push_str("</div>");
    points_table(&mut out, s);
    if let Some(first) = s.points.first() {
        settings(&mut out, &first.results);
    }
    page("tokenscope sweep", &out)
}

/// Output tokens/s against TTFT p99 for every point, the Pareto frontier
/// through them, and the knee and each recommendation marked.
fn frontier_chart(out: &mut String, a: &Analysis) {
    let all: Vec<(f64, f64)> = a
        .series
        .iter()
        .map(|p| (p.ttft_p99_ms, p.output_tps))
        .collect();
    let mut frontier: Vec<(f64, f64)> = a.pareto_frontier.iter().map(|&i| all[i]).collect();
    frontier.sort_by(|x, y| x.0.total_cmp(&y.0));
    let mut marks: Vec<Mark> = Vec::new();
    if let Some(k) = a.knee {
        marks.push(Mark {
            label: format!("knee (load {})", k.load),
            at: all[k.index],
        });
    }
    for r in &a.recommendations {
        if let Some(i) = r.point {
            marks.push(Mark {
                label: r.profile.clone(),
                at: all[i],
            });
        }
    }
    chart(
        out,
        charts::xy(
            &Axes {
                title: "Output tokens/s against TTFT p99",
                x: "TTFT p99 (ms)",
                y: "output tokens/s per GPU",
                log_x: false,
            },
            &[
                Series {
                    name: "every point".into(),
                    points: all.clone(),
                    style: Style::Points,
                },
                Series {
                    name: "Pareto frontier".into(),
                    points: frontier,
                    style: Style::Line,
                },
            ],
            &marks,
        ),
        "no points",
    );
}

/// Throughput, latency, cost and the GPU and KV cache against the load
/// (log-scaled when it spans 8× or more).
fn load_charts(out: &mut String, s: &Sweep) {
    let a = &s.analysis;
    let loads: Vec<f64> = a.series.iter().map(|p| p.load).collect();
    let log_x = loads.iter().all(|&l| l > 0.0)
        && loads.iter().copied().fold(0.0, f64::max)
            / loads.iter().copied().fold(f64::INFINITY, f64::min)
            >= 8.0;
    let load_name = if s.points.iter().any(|p| p.point.starts_with("rate")) {
        "requests/s offered"
    } else {
        "concurrency"
    };
    let by_load =
        |f: &dyn Fn(&tokenscope_core::analysis::Point) -> Option<f64>| -> Vec<(f64, f64)> {
            a.series
                .iter()
                .filter_map(|p| Some((p.load, f(p)?)))
                .filter(|(_, v)| v.is_finite())
                .collect()
        };
    let axes = |title: &'static str, y: &'static str| Axes {
        title,
        x: load_name,
        y,
        log_x,
    };
    let lp = |name: &str, points| Series {
        name: name.into(),
        points,
        style: Style::LineAndPoints,
    };
    chart(
        out,
        charts::xy(
            &axes("Throughput against load", "tokens/s"),
            &[
                lp("output tokens/s per GPU", by_load(&|p| Some(p.output_tps))),
                lp(
                    "per-user tokens/s (p50)",
                    by_load(&|p| Some(p.per_user_tps)),
                ),
            ],
            &[],
        ),
        "no points",
    );
    chart(
        out,
        charts::xy(
            &axes("Latency against load", "ms"),
            &[
                lp("TTFT p99", by_load(&|p| Some(p.ttft_p99_ms))),
                lp("TPOT p99", by_load(&|p| Some(p.tpot_p99_ms))),
            ],
            &[],
        ),
        "no points",
    );
    chart(
        out,
        charts::xy(
            &axes("Cost per 1K output tokens against load", "$ per 1K tokens"),
            &[lp("cost per 1K", by_load(&|p| p.cost_per_1k))],
            &[],
        ),
        "Cost: no price (give --gpu-price or --gpu-type)",
    );
    let util = [
        lp("GPU utilisation (%)", by_load(&|p| p.gpu_util_pct)),
        lp(
            "KV usage max (%)",
            by_load(&|p| p.kv_usage_max.map(|k| k * 100.0)),
        ),
    ];
    let util: Vec<Series> = util.into_iter().filter(|s| !s.points.is_empty()).collect();
    chart(
        out,
        charts::xy(
            &axes("GPU utilisation and KV usage against load", "%"),
            &util,
            &[],
        ),
        "GPU utilisation and KV usage: the server exposed neither",
    );
}

/// A row per point run, linked to its own report.
fn points_table(out: &mut String, s: &Sweep) {
    let a = &s.analysis;
    out.push_str("<h2>Points</h2><table><tr><th>point</th><th>output tok/s</th><th>TTFT p50</th><th>TTFT p99</th><th>TPOT p99</th><th>E2E p99</th><th>failed</th><th>frontier</th><th>run</th></tr>");
    for (n, p) in s.points.iter().enumerate() {
        // Repeated runs of a load share its analysed point.
        let i = a
            .series
            .iter()
            .position(|q| q.load == p.load)
            .unwrap_or(usize::MAX);
        let q = &a.series.get(i);
        let link = s.point_dirs.get(n).cloned().flatten().and_then(|d| {
            d.strip_prefix(&s.dir)
                .ok()
                .map(|rel| rel.join("report.html").to_string_lossy().into_owned())
        });
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{:.0}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&p.point),
            p.results.throughput.output_tokens_per_s,
            p.results.latency.ttft_ms.map_or("—".into(), |s| ms(s.p50)),
            q.map_or("—".into(), |q| ms(q.ttft_p99_ms)),
            q.map_or("—".into(), |q| ms(q.tpot_p99_ms)),
            q.map_or("—".into(), |q| ms(q.e2e_p99_ms)),
            p.results.counts.failed,
            if a.pareto_frontier.contains(&i) { "on" } else { "" },
            link.map_or("—".into(), |l| format!("<a href=\"{}\">report</a>", esc(&l))),
        );
    }
    out.push_str("</table>");
}
