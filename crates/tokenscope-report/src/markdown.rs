//! Markdown for pull requests and tickets: the run's numbers as tables, or a
//! sweep's points and recommendations.

use crate::run_dir::Sweep;
use std::fmt::Write;
use tokenscope_core::results::RunResults;
use tokenscope_core::slo::{SloReport, Verdict};
use tokenscope_core::stats::Summary;

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or("—".into(), f)
}

/// What was run, from `config`: the load, how much, the lengths asked for
/// and whether they were forced (`--ignore-eos`). `with_load`: false for a
/// sweep, whose points differ in load.
pub fn what_was_run(config: &serde_json::Value, with_load: bool) -> String {
    let mut parts = Vec::new();
    let load = &config["load"];
    if with_load {
        match load["mode"].as_str() {
            Some("closed") => {
                parts.push(format!("closed loop, concurrency {}", load["concurrency"]))
            }
            Some("open") => parts.push(format!(
                "open loop, {} requests/s ({})",
                load["rate"],
                load["arrival"].as_str().unwrap_or("poisson")
            )),
            _ => {}
        }
    }
    match (config["requests"].as_u64(), config["duration_s"].as_f64()) {
        (Some(n), Some(d)) => parts.push(format!("{n} requests or {d} s")),
        (Some(n), None) => parts.push(format!("{n} requests")),
        (None, Some(d)) => parts.push(format!("{d} s")),
        _ => {}
    }
    if let Some(w) = config["warmup"].as_u64().filter(|&w| w > 0) {
        parts.push(format!("{w} warm-up"));
    }
    if let Some(i) = config["input_tokens"].as_str() {
        parts.push(format!("input tokens {i}"));
    }
    if let Some(o) = config["output_tokens"].as_str() {
        parts.push(format!("output tokens {o}"));
    }
    match config["ignore_eos"].as_bool() {
        Some(true) => parts.push("--ignore-eos (lengths forced)".into()),
        Some(false) => parts.push("no --ignore-eos (the model may stop early)".into()),
        None => {}
    }
    if let Some(p) = config["shared_prefix"].as_u64().filter(|&p| p > 0) {
        parts.push(format!("shared prefix {p} tokens"));
    }
    parts.join(" · ")
}

/// One run.
pub fn run(r: &RunResults) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### tokenscope run — {} ({})\n\n{} · {} · started {}{}\n",
        r.target.model,
        r.target.api,
        r.target.url,
        r.server
            .kind
            .as_deref()
            .unwrap_or("server kind not detected"),
        r.started_at,
        if r.partial {
            " · **partial: interrupted**"
        } else {
            ""
        }
    );
    let _ = writeln!(out, "**Run:** {}\n", what_was_run(&r.config, true));
    if let Some(s) = &r.slo {
        slo(&mut out, s, r.counts.requests);
    }
    out.push_str(
        "| latency (ms) | mean | p50 | p90 | p99 | max |\n|---|---:|---:|---:|---:|---:|\n",
    );
    let l = &r.latency;
    // The answer's start only where a request reasoned (else it is TTFT).
    let reasoned = |name, s: Option<Summary>| s.map(|s| (name, Some(s)));
    let rows = [("TTFT", l.ttft_ms)]
        .into_iter()
        .chain(reasoned("answer start", l.answer_start_ms))
        .chain(reasoned("thinking", l.reasoning_ms))
        .chain([("TPOT", l.tpot_ms)])
        .chain(reasoned("answer TPOT", l.answer_tpot_ms))
        .chain([("ITL", l.itl_ms), ("E2E", l.e2e_ms)]);
    for (name, s) in rows {
        match s {
            Some(s) => {
                _ = writeln!(
                    out,
                    "| {name} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
                    s.mean, s.p50, s.p90, s.p99, s.max
                )
            }
            None => _ = writeln!(out, "| {name} | — | — | — | — | — |"),
        }
    }
    let t = &r.throughput;
    let c = &r.counts;
    let _ = writeln!(
        out,
        "\n| throughput | |\n|---|---:|\n| output tokens/s | {:.1} |\n| total tokens/s | {:.1} |\n| requests/s | {:.2} |\n| goodput requests/s | {} |\n| concurrency mean / max | {:.1} / {} |\n| requests ok / failed | {} / {} |",
        t.output_tokens_per_s,
        t.total_tokens_per_s,
        t.requests_per_s,
        opt(t.goodput_requests_per_s, |v| format!("{v:.2}")),
        t.concurrency.mean,
        t.concurrency.max,
        c.succeeded,
        c.failed
    );
    if let Some(items) = t.items_per_s {
        let _ = writeln!(
            out,
            "| input tokens/s | {:.1} |\n| items/s (vectors or scored documents) | {items:.1} |",
            t.input_tokens_per_s
        );
    }
    let e = &r.efficiency;
    let gpu = e
        .gpu
        .as_ref()
        .and_then(|g| g["utilisation_time_pct_mean"].as_f64());
    let kv = e.kv_cache.as_ref().and_then(|k| k["usage_max"].as_f64());
    let pre = e.kv_cache.as_ref().and_then(|k| k["preemptions"].as_f64());
    let cost = e.cost.and_then(|c| c.usd_per_1k_output_tokens);
    let _ = writeln!(
        out,
        "\n| efficiency | |\n|---|---:|\n| GPU utilisation | {} |\n| KV usage max | {} |\n| preemptions | {} |\n| cost per 1K output tokens | {} |",
        opt(gpu, |v| format!("{v:.0} %")),
        opt(kv, |v| format!("{:.0} %", v * 100.0)),
        opt(pre, |v| format!("{v:.0}")),
        opt(cost, |v| format!("${v:.5}"))
    );
    if let Some(c) = e.cost.and_then(|c| c.usd_per_1k_answer_tokens) {
        let _ = writeln!(out, "| cost per 1K answer tokens | ${c:.5} |");
    }
    if let Some(c) = e.cost.and_then(|c| c.usd_per_answer) {
        let _ = writeln!(out, "| cost per answer | ${c:.5} |");
    }
    let rows = crate::fidelity::rows(r);
    if !rows.is_empty() {
        out.push_str("\n| workload | asked | delivered |\n|---|---|---|\n");
        for [what, asked, delivered] in rows {
            let _ = writeln!(out, "| {what} | {asked} | {delivered} |");
        }
    }
    let media = crate::media::lines(r);
    if !media.is_empty() {
        let _ = writeln!(out, "\nMedia:\n\n- {}", media.join("\n- "));
    }
    for (title, lines) in crate::answers::sections(r) {
        let _ = writeln!(out, "\n{title}:\n\n- {}", lines.join("\n- "));
    }
    let rows = crate::adapters::rows(r);
    if !rows.is_empty() {
        let _ = writeln!(
            out,
            "\nAdapters (--lora, {}):\n\n| {} |\n|---|{}",
            crate::adapters::assignment(r),
            crate::adapters::HEADER.join(" | "),
            "---:|".repeat(crate::adapters::HEADER.len() - 1)
        );
        for row in rows {
            let _ = writeln!(out, "| {} |", row.join(" | "));
        }
    }
    let classes = crate::adapters::class_rows(r);
    if !classes.is_empty() {
        let header = crate::adapters::class_header();
        let _ = writeln!(
            out,
            "\nClasses (--class; each under its own SLO, else the run's):\n\n| {} |\n|---|{}",
            header.join(" | "),
            "---:|".repeat(header.len() - 1)
        );
        for row in classes {
            let _ = writeln!(out, "| {} |", row.join(" | "));
        }
    }
    if !c.errors.is_empty() {
        out.push_str("\n| error | count |\n|---|---:|\n");
        for (k, v) in &c.errors {
            let _ = writeln!(out, "| {k} | {v} |");
        }
    }
    if !r.diagnosis.is_empty() {
        out.push_str("\n**Diagnosis**\n\n");
        for f in &r.diagnosis {
            let _ = writeln!(out, "- `{}` ({}): {}", f.rule, f.severity, f.message);
        }
    }
    out
}

/// The SLO verdict in words, with each objective's sample.
fn slo(out: &mut String, s: &SloReport, requests: u64) {
    let v = s
        .verdict
        .unwrap_or(if s.met { Verdict::Met } else { Verdict::NotMet });
    let _ = writeln!(
        out,
        "**SLO {}** — good requests {} of {requests}\n",
        v.words(),
        s.good_requests
    );
    for o in &s.objectives {
        let n = o.n.map_or(String::new(), |n| format!(", n = {n}"));
        let _ = writeln!(
            out,
            "- {}_{} ≤ {} ms: {}{n} — {}",
            o.metric,
            o.stat,
            o.limit_ms,
            opt(o.value_ms, |v| format!("{v:.2} ms")),
            o.reason.clone().unwrap_or_else(|| match o.verdict {
                Some(v) => v.words().into(),
                None if o.met => "met".into(),
                None => "NOT met".into(),
            })
        );
    }
    out.push('\n');
}

/// A sweep.
pub fn sweep(s: &Sweep) -> String {
    let a = &s.analysis;
    let mut out = String::from("### tokenscope sweep\n\n");
    if let Some(first) = s.points.first() {
        let _ = writeln!(
            out,
            "**Each point:** {}\n",
            what_was_run(&first.results.config, false)
        );
    }
    let text = crate::terminal::analysis(a);
    let head = text
        .split("\nRecommended operating points")
        .next()
        .unwrap_or("");
    for line in head.lines().filter(|l| !l.trim().is_empty()) {
        let _ = writeln!(out, "{}  ", line.trim());
    }
    out.push('\n');
    out.push_str("| point | output tok/s | per-user tok/s | TTFT p99 | TPOT p99 | E2E p99 | cost/1K | KV max | preempt | frontier |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|:-:|\n");
    for p in &s.points {
        // Repeated runs of a load share its analysed point.
        let Some(i) = a.series.iter().position(|q| q.load == p.load) else {
            continue;
        };
        let q = &a.series[i];
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.1} | {:.1} | {:.1} | {:.0} | {} | {} | {} | {} |",
            p.point,
            q.output_tps,
            q.per_user_tps,
            q.ttft_p99_ms,
            q.tpot_p99_ms,
            q.e2e_p99_ms,
            opt(q.cost_per_1k, |v| format!("${v:.5}")),
            opt(q.kv_usage_max, |v| format!("{:.0} %", v * 100.0)),
            opt(q.preemptions, |v| format!("{v:.0}")),
            if a.pareto_frontier.contains(&i) {
                "✓"
            } else {
                ""
            }
        );
    }
    out.push_str("\n| profile | judged by | load | why | margin |\n|---|---|---:|---|---:|\n");
    for r in &a.recommendations {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            r.profile,
            r.judged_by,
            r.load.map_or("none".into(), |l| if r.lower_bound {
                format!("≥ {l}")
            } else {
                l.to_string()
            }),
            r.why.replace('|', "\\|"),
            r.margin_pct.map_or("—".into(), |m| format!("{m:.0} %"))
        );
    }
    out
}
