//! The plain-text summary printed at the end of `bench`.

use std::fmt::Write;
use tokenscope_core::analysis::{Analysis, SloCapacity};
use tokenscope_core::results::{Counts, RunResults};
use tokenscope_core::slo::{SloReport, Verdict};
use tokenscope_core::stats::Summary;

fn row(out: &mut String, name: &str, s: Option<&Summary>) {
    match s {
        Some(s) => {
            let _ = writeln!(
                out,
                "  {name:<22}{:>9.2}{:>9.2}{:>9.2}{:>9.2}{:>9.2}{:>9.2}",
                s.mean, s.p50, s.p90, s.p95, s.p99, s.max
            );
        }
        None => {
            let _ = writeln!(out, "  {name:<22}{:>9}", "—");
        }
    }
}

/// The figures a `client_lag` finding says may be tainted (`ttft`, `itl`,
/// `tpot`, `e2e`, `ttft_from_scheduled`, `load_shape`).
fn tainted(r: &RunResults) -> std::collections::BTreeSet<String> {
    r.diagnosis
        .iter()
        .filter(|f| f.rule == "client_lag")
        .filter_map(|f| f.evidence.get("taints")?.as_array().cloned())
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

/// A closed loop's TTFT that its users' phase decides: `sim plan`'s
/// finding with both starts' figures (`tokenscope_sim::phase`), or a run's
/// records that show waves (`tokenscope_core::waves`).
fn phase_finding(r: &RunResults) -> Option<&tokenscope_core::results::Finding> {
    r.diagnosis
        .iter()
        .find(|f| f.rule == "ttft_depends_on_phase" || f.rule == "waves")
}

/// A row's label, marked `‡` when the client's lag may have tainted it.
fn marked(label: &str, key: &str, tainted: &std::collections::BTreeSet<String>) -> String {
    match tainted.contains(key) {
        true => format!("{label} ‡"),
        false => label.to_string(),
    }
}

/// The client's own resolution: loop delay and connections opened ahead.
fn client_lines(out: &mut String, r: &RunResults) {
    if let Some(d) = &r.client.loop_delay_ms {
        let _ = writeln!(
            out,
            "  client loop delay       p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms   (a 1 ms timer; stamps are this late at worst)",
            d.p50, d.p99, d.max
        );
    }
    if let Some(c) = &r.client.connections {
        let connect = c
            .connect_ms
            .map(|s| format!(", connect p50 {:.2} ms, max {:.2} ms", s.p50, s.max))
            .unwrap_or_default();
        let failed = match c.failed {
            0 => String::new(),
            n => format!(", {n} failed"),
        };
        let _ = writeln!(
            out,
            "  connections             {} opened before the clock{connect}{failed}   (not inside TTFT; --cold-connections to include them)",
            c.opened
        );
    }
    if let Some(check) = &r.client.self_check {
        let _ = writeln!(out, "  self-check              {}", check.sentence());
    }
    if let Some(c) = &r.cold_start {
        cold_start_lines(out, c);
    }
    if let Some(a) = r
        .simulated
        .as_ref()
        .map(|s| &s["engine_summary"]["autoscale"])
    {
        autoscale_lines(out, a, r.efficiency.cost.map(|c| c.window_usd));
    }
}

/// `sim plan --autoscale`: the policy, the fleet's changes, what it cost.
fn autoscale_lines(out: &mut String, a: &serde_json::Value, usd: Option<f64>) {
    let Some(policy) = a["policy"].as_str() else {
        return;
    };
    let _ = writeln!(
        out,
        "\nAutoscaling ({policy}; {}..{} replicas, each serving {:.0} s after its start)",
        a["min"],
        a["max"],
        a["startup_s"].as_f64().unwrap_or(0.0)
    );
    let events = a["events"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    for e in events.iter().take(12) {
        let _ = writeln!(
            out,
            "  at {:>7.1} s          {} → {} replicas ({})",
            e["t_s"].as_f64().unwrap_or(0.0),
            e["from"],
            e["to"],
            e["why"].as_str().unwrap_or("")
        );
    }
    if events.len() > 12 {
        let _ = writeln!(out, "  … {} changes in all (results.json)", events.len());
    }
    let cost = usd.map_or(String::new(), |u| format!(" (${u:.2})"));
    let _ = writeln!(
        out,
        "  paid                    {:.0} replica-seconds{cost}, at most {} replicas serving (replicas over time: timeseries.jsonl)",
        a["replica_seconds"].as_f64().unwrap_or(0.0),
        a["peak_replicas"]
    );
}

/// `bench --cold-start`: time to ready, and the first wave against the rest.
fn cold_start_lines(out: &mut String, c: &tokenscope_core::results::ColdStart) {
    let _ = writeln!(
        out,
        "\nCold start (`{}` started by tokenscope)\n  ready after             {:.2} s (first /health 200); stopped in {:.2} s",
        c.program, c.ready_s, c.stop_s
    );
    let wave = |s: &Option<tokenscope_core::stats::Summary>| {
        s.map_or("none".to_string(), |s| {
            format!(
                "{} requests, TTFT p50 {:.1} ms, max {:.1} ms",
                s.count, s.p50, s.max
            )
        })
    };
    let _ = writeln!(out, "  first wave (cold)       {}", wave(&c.first_wave));
    let _ = writeln!(out, "  steady state            {}", wave(&c.steady));
    if let Some(excess) = c.excess_p50_ms {
        let _ = writeln!(
            out,
            "  affected                {} first-wave requests over the steady TTFT p99; first-wave p50 {:+.1} ms against the steady p50",
            c.affected, excess
        );
    }
}

/// The seed's GPU utilisation bands.
fn band(pct: f64) -> &'static str {
    if pct < 50.0 {
        "(waste: review batching)"
    } else if pct > 90.0 {
        "(saturated: latency risk)"
    } else if pct >= 70.0 {
        "(healthy)"
    } else {
        "(room for more load)"
    }
}

/// The summary as lines of text (no colour codes, so it can be logged).
pub fn summary(r: &RunResults) -> String {
    let mut out = String::new();
    header_lines(&mut out, r);
    let _ = writeln!(
        out,
        "\nLatency (ms)                mean      p50      p90      p95      p99      max"
    );
    latency_lines(&mut out, r);
    throughput_lines(&mut out, r);
    workload_lines(&mut out, r);
    adapter_lines(&mut out, r);
    class_lines(&mut out, r);
    let media = crate::media::lines(r);
    if !media.is_empty() {
        let _ = writeln!(out, "\nMedia\n  {}", media.join("\n  "));
    }
    for (title, lines) in crate::answers::sections(r) {
        let _ = writeln!(out, "\n{title}\n  {}", lines.join("\n  "));
    }
    let _ = writeln!(out, "\nEfficiency");
    cost_lines(&mut out, r);
    gpu_and_kv_lines(&mut out, r);
    prefix_cache_line(&mut out, r);
    if let (Some(cpu), Some(per_tok)) = (r.client.cpu_cores, r.client.cpu_us_per_output_token) {
        let _ = writeln!(
            out,
            "  client CPU              {cpu:.2} cores, {per_tok:.2} µs per output token"
        );
    }
    client_lines(&mut out, r);
    if let (Some(kind), Some(m)) = (&r.server.kind, &r.server.metrics) {
        server_lines(&mut out, kind, m);
    }
    error_lines(&mut out, &r.counts);
    if let Some(slo) = &r.slo {
        slo_lines(&mut out, slo, r.counts.requests);
    }
    if !r.diagnosis.is_empty() {
        let _ = writeln!(out, "\nDiagnosis");
        for f in &r.diagnosis {
            let _ = writeln!(out, "  [{}] {}", f.severity, f.message);
        }
    }
    out
}

/// Who was measured, and how many requests over what window.
fn header_lines(out: &mut String, r: &RunResults) {
    let c = &r.counts;
    let builtin = r.target.builtin_note();
    let _ = writeln!(
        out,
        "tokenscope {} · {} · model {}",
        r.tool.version, r.target.api, r.target.model
    );
    let _ = writeln!(out, "target {}{builtin}", r.target.url);
    let _ = writeln!(
        out,
        "{} requests: {} ok, {} failed{}{} · window {:.2} s{}",
        c.requests,
        c.succeeded,
        c.failed,
        match c.abandoned {
            0 => String::new(),
            n => format!(", {n} abandoned (--cancel; in no latency figure)"),
        },
        if c.warmup > 0 {
            format!(" · {} warm-up excluded", c.warmup)
        } else {
            String::new()
        },
        r.window.duration_s,
        if r.partial {
            " · PARTIAL (interrupted)"
        } else {
            ""
        },
    );
}

/// Tokens, requests and users a second, and the concurrency held.
fn throughput_lines(out: &mut String, r: &RunResults) {
    let t = &r.throughput;
    let _ = writeln!(out, "\nThroughput");
    let steady = r
        .window
        .steady
        .map(|s| format!("   (steady state {:.1})", s.output_tokens_per_s))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "  output tokens/s       {:>10.1}{steady}",
        t.output_tokens_per_s
    );
    let _ = writeln!(
        out,
        "  total tokens/s        {:>10.1}",
        t.total_tokens_per_s
    );
    if let Some(items) = t.items_per_s {
        let _ = writeln!(
            out,
            "  input tokens/s        {:>10.1}\n  items/s               {items:>10.1}   (vectors embedded or documents scored)",
            t.input_tokens_per_s
        );
    }
    let _ = writeln!(out, "  requests/s            {:>10.2}", t.requests_per_s);
    if let Some(g) = t.goodput_requests_per_s {
        let _ = writeln!(
            out,
            "  goodput requests/s    {:>10.2}   ({:.1} output tokens/s)",
            g,
            t.goodput_output_tokens_per_s.unwrap_or(0.0)
        );
    }
    // A max known only to a slot's resolution is an upper bound: said so.
    let bound = match t.concurrency.max_resolution_ms {
        Some(_) => "≤ ",
        None => "",
    };
    let _ = writeln!(
        out,
        "  concurrency           {:>10.2}   (max {bound}{})",
        t.concurrency.mean, t.concurrency.max
    );
    if let Some(u) = &t.per_user_output_tokens_per_s {
        let _ = writeln!(
            out,
            "  per-user tokens/s     {:>10.1}   (p50; slowest user {:.1})",
            u.p50, u.min
        );
    }
}

/// What the run cost, where a price was given.
fn cost_lines(out: &mut String, r: &RunResults) {
    match &r.efficiency.cost {
        Some(cost) => {
            let per = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("${v:.5}"));
            let source = r.config["gpu_price_source"]
                .as_str()
                .map(|s| format!("; {s}"))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  cost / 1K output tokens {:>12}   (${:.2}/GPU-h × {} GPU{source})",
                per(cost.usd_per_1k_output_tokens),
                cost.usd_per_gpu_hour,
                cost.gpus
            );
            let _ = writeln!(
                out,
                "  cost / 1M output tokens {:>12}",
                per(cost.usd_per_1m_output_tokens)
            );
            let _ = writeln!(
                out,
                "  cost / 1K total tokens  {:>12}",
                per(cost.usd_per_1k_total_tokens)
            );
            if cost.usd_per_1k_answer_tokens.is_some() {
                let _ = writeln!(
                    out,
                    "  cost / 1K answer tokens {:>12}   (thinking paid, not read)",
                    per(cost.usd_per_1k_answer_tokens)
                );
            }
            if cost.usd_per_answer.is_some() {
                let _ = writeln!(
                    out,
                    "  cost / answer           {:>12}   (per request that answered)",
                    per(cost.usd_per_answer)
                );
            }
            if cost.usd_per_1k_good_output_tokens.is_some() {
                let _ = writeln!(
                    out,
                    "  cost / 1K good tokens   {:>12}",
                    per(cost.usd_per_1k_good_output_tokens)
                );
            }
        }
        None => {
            let _ = writeln!(
                out,
                "  cost                    —   (set --gpu-price $/GPU-hour and --gpus)"
            );
        }
    }
}

/// The GPU's and the KV cache's use, or why they are not known.
fn gpu_and_kv_lines(out: &mut String, r: &RunResults) {
    let num = |v: &serde_json::Value| v.as_f64();
    match &r.efficiency.gpu {
        Some(g) => {
            if let Some(u) = num(&g["utilisation_time_pct_mean"]) {
                let _ = writeln!(out, "  GPU busy (time-based)   {u:.0} %   {}", band(u));
            }
            if let Some(p) = num(&g["power_w_mean"]) {
                let _ = writeln!(out, "  GPU power               {p:.0} W");
            }
            if let Some(j) = num(&g["joules_per_output_token"]) {
                let _ = writeln!(out, "  energy                  {j:.3} J per output token");
            }
        }
        None if r.simulated.is_some() || r.server.kind.as_deref() == Some("tokenscope-sim") => {
            let _ = writeln!(
                out,
                "  GPU                     simulated: no device to measure"
            );
        }
        None => {
            let _ = writeln!(out, "  GPU                     not measured (--gpu local, or a DCGM exporter via --metrics-url)");
        }
    }
    match &r.efficiency.kv_cache {
        Some(kv) => {
            let usage = match (num(&kv["usage_mean"]), num(&kv["usage_max"])) {
                (Some(m), Some(x)) => format!("{:.1} % mean, {:.1} % max", m * 100.0, x * 100.0),
                _ => "usage not exposed".into(),
            };
            let cap = num(&kv["capacity_tokens"])
                .map(|c| format!(" of {c:.0} tokens"))
                .unwrap_or_default();
            let pre = num(&kv["preemptions"])
                .map(|p| format!(", {p:.0} preemptions"))
                .unwrap_or_default();
            let _ = writeln!(out, "  KV cache                {usage}{cap}{pre}");
        }
        None => {
            let _ = writeln!(out, "  KV cache                not exposed by the server");
        }
    }
}

/// The failures by kind, and the commonest messages.
fn error_lines(out: &mut String, c: &Counts) {
    if !c.errors.is_empty() {
        let _ = writeln!(out, "\nErrors");
        for (kind, n) in &c.errors {
            let mine = if kind == "cancelled" {
                "   (stopped with the run, not failures)"
            } else {
                ""
            };
            let _ = writeln!(out, "  {kind:<22}{n:>8}{mine}");
        }
        for e in c.top_errors.iter().filter(|e| e.kind != "cancelled") {
            let mut message = e.message.clone();
            if message.chars().count() > 160 {
                message = message.chars().take(157).collect::<String>() + "…";
            }
            let _ = writeln!(out, "  ×{:<5} {}: {message}", e.count, e.kind);
        }
    }
}

/// The SLO verdict in words, each objective with its sample and interval.
fn slo_lines(out: &mut String, slo: &SloReport, requests: u64) {
    let verdict = slo.verdict.unwrap_or(if slo.met {
        Verdict::Met
    } else {
        Verdict::NotMet
    });
    let _ = writeln!(out, "\nSLO {}", verdict.words());
    for o in &slo.objectives {
        let value = o.value_ms.map_or("—".into(), |v| format!("{v:.2} ms"));
        let mark = match o.verdict {
            Some(Verdict::Met) => "ok",
            Some(Verdict::NotEnoughData) => "NOT JUDGED",
            _ if o.met => "ok",
            _ => "FAIL",
        };
        let interval = match (o.ci_low_ms, o.ci_high_ms) {
            (None, None) => String::new(),
            (lo, hi) => format!(
                " (95 % CI {} … {})",
                lo.map_or("?".into(), |v| format!("{v:.2}")),
                hi.map_or("unbounded".into(), |v| format!("{v:.2}"))
            ),
        };
        let n = o.n.map_or(String::new(), |n| format!(", n = {n}"));
        let _ = writeln!(
            out,
            "  {}_{} ≤ {} ms: {value}{interval}{n}  {mark}",
            o.metric, o.stat, o.limit_ms
        );
        if let Some(reason) = &o.reason {
            let _ = writeln!(out, "    {reason}");
        }
    }
    let _ = writeln!(out, "  good requests: {} of {requests}", slo.good_requests);
}

/// The latency table, with its marks and notes.
fn latency_lines(out: &mut String, r: &RunResults) {
    let tainted = tainted(r);
    let l = &r.latency;
    if r.config["stream"] == false {
        let _ = writeln!(
            out,
            "  non-streaming (--no-stream): answers came whole, so only E2E is timed;\n  TTFT, TPOT and ITL are not measured"
        );
        row(out, &marked("E2E", "e2e", &tainted), l.e2e_ms.as_ref());
        turn_rows(out, &l.ttft_ms_by_turn);
        return;
    }
    let phase = phase_finding(r);
    let ttft = marked("TTFT", "ttft", &tainted);
    let ttft = match phase {
        Some(_) => format!("{ttft} §"),
        None => ttft,
    };
    row(out, &ttft, l.ttft_ms.as_ref());
    if l.answer_start_ms.is_some() {
        // Reasoning came first: when the answer a user reads began.
        let answer = marked("answer start", "ttft", &tainted);
        row(out, &answer, l.answer_start_ms.as_ref());
        row(
            out,
            &marked("  thinking", "ttft", &tainted),
            l.reasoning_ms.as_ref(),
        );
    }
    row(out, &marked("TPOT", "tpot", &tainted), l.tpot_ms.as_ref());
    if l.answer_tpot_ms.is_some() {
        let answer = marked("  answer TPOT", "tpot", &tainted);
        row(out, &answer, l.answer_tpot_ms.as_ref());
    }
    let itl = match r.tokens.multi_token_chunks {
        true => "ITL (split*)",
        false => "ITL",
    };
    row(out, &marked(itl, "itl", &tainted), l.itl_ms.as_ref());
    if r.tokens.multi_token_chunks {
        row(out, "ICL (chunk gaps)", l.icl_ms.as_ref());
    }
    row(out, &marked("E2E", "e2e", &tainted), l.e2e_ms.as_ref());
    if l.client_lag_ms.is_some_and(|l| l.max >= 1.0) {
        row(out, "client lag", l.client_lag_ms.as_ref());
        let from_schedule = marked("TTFT from schedule", "ttft_from_scheduled", &tainted);
        row(out, &from_schedule, l.ttft_from_scheduled_ms.as_ref());
    }
    turn_rows(out, &l.ttft_ms_by_turn);
    latency_notes(out, r, !tainted.is_empty(), phase);
}

/// The latency table's footnotes: `‡` a figure the client's lag may have
/// moved, `§` a TTFT that hangs on how a closed loop's users lined up,
/// `*` ITL split over chunks of several tokens.
fn latency_notes(
    out: &mut String,
    r: &RunResults,
    tainted: bool,
    phase: Option<&tokenscope_core::results::Finding>,
) {
    if tainted {
        let _ = writeln!(
            out,
            "  ‡ the client was late (client_lag below): this figure may be off by its lag"
        );
    }
    if let Some(f) = phase {
        let p50 = |k: &str| {
            f.evidence
                .get(k)
                .and_then(|v| v.as_f64())
                .unwrap_or(f64::NAN)
        };
        let _ = match f.rule.as_str() {
            "waves" => writeln!(
                out,
                "  § the users ran in waves (waves below): where the server queues a wave's prompts, TTFT holds that queue, which users started apart would not meet"
            ),
            _ => writeln!(
                out,
                "  § hangs on how the closed loop's users line up: p50 {:.1} ms started together, {:.1} ms staggered (ttft_depends_on_phase below)",
                p50("together_ttft_p50_ms"),
                p50("staggered_ttft_p50_ms")
            ),
        };
    }
    if r.tokens.multi_token_chunks {
        let _ = writeln!(
            out,
            "  * chunks carried several tokens: ITL splits each chunk gap over its tokens"
        );
    }
}

/// `--lora`: each adapter's figures, a row each.
fn adapter_lines(out: &mut String, r: &RunResults) {
    let rows = crate::adapters::rows(r);
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nAdapters (--lora, {})",
        crate::adapters::assignment(r)
    );
    for row in std::iter::once(crate::adapters::HEADER.map(str::to_string)).chain(rows) {
        let [name, rest @ ..] = row;
        let cells: Vec<String> = rest.iter().map(|c| format!(" {c:>12}")).collect();
        let _ = writeln!(out, "  {name:<20}{}", cells.join(""));
    }
}

/// `--class`: each class of traffic's figures and SLO, a row each.
fn class_lines(out: &mut String, r: &RunResults) {
    let rows = crate::adapters::class_rows(r);
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nClasses (--class; each under its own SLO, else the run's)"
    );
    let header = crate::adapters::class_header();
    for row in std::iter::once(header).chain(rows.into_iter().map(|r| r.to_vec())) {
        let cells: Vec<String> = row[1..].iter().map(|c| format!(" {c:>12}")).collect();
        let _ = writeln!(out, "  {:<20}{}", row[0], cells.join(""));
    }
}

/// What was asked against what was delivered: lengths and arrivals.
fn workload_lines(out: &mut String, r: &RunResults) {
    let w = &r.workload;
    let mean = |s: &Option<Summary>| s.as_ref().map(|s| s.mean);
    let mut lines = String::new();
    if let Some(asked) = mean(&w.input_tokens_asked) {
        let served = match (&w.input_tokens_served, mean(&w.input_tokens_served)) {
            (Some(s), Some(m)) => format!(
                " → {m:.0} as the server counted ({} requests said)",
                s.count
            ),
            _ => " (the server did not count them)".into(),
        };
        let _ = writeln!(lines, "  input tokens          mean {asked:.0}{served}");
    }
    if let Some(delivered) = mean(&w.output_tokens_delivered) {
        let asked = mean(&w.output_tokens_asked)
            .map(|a| format!("asked {a:.0} → "))
            .unwrap_or_default();
        let stops = match w.early_stops {
            0 => String::new(),
            n => format!("; {n} stopped before max_tokens (--ignore-eos forces lengths)"),
        };
        let _ = writeln!(
            lines,
            "  output tokens         mean {asked}{delivered:.0} written{stops}"
        );
    }
    if let Some(x) = &r.tokens.reasoning {
        reasoning_line(&mut lines, x, &r.tokens);
    }
    if let Some(a) = &w.arrivals {
        let disp = |d: Option<f64>| {
            d.map(|d| format!(", dispersion {d:.2}"))
                .unwrap_or_default()
        };
        let _ = writeln!(
            lines,
            "  arrivals              intended {:.2}/s (gap CV² {:.2}{}) → sent {:.2}/s (CV² {:.2}{})",
            a.intended_per_s,
            a.intended_gap_cv2,
            disp(a.intended_dispersion_1s),
            a.sent_per_s,
            a.sent_gap_cv2,
            disp(a.sent_dispersion_1s)
        );
    }
    if !lines.is_empty() {
        let _ = writeln!(out, "\nWorkload (asked → delivered)");
        out.push_str(&lines);
    }
}

/// How much of the output was thinking, and how the counts were had.
fn reasoning_line(
    out: &mut String,
    x: &tokenscope_core::results::Reasoning,
    tokens: &tokenscope_core::results::Tokens,
) {
    let sources: Vec<String> = x.sources.iter().map(|(k, n)| format!("{k} {n}")).collect();
    let mut notes = vec![format!("counted by {}", sources.join(", "))];
    if x.hidden_requests > 0 {
        notes.push(format!("hidden in {} requests", x.hidden_requests));
    }
    if x.budget_spent_requests > 0 {
        notes.push(format!(
            "{} spent their length thinking",
            x.budget_spent_requests
        ));
    }
    let _ = writeln!(
        out,
        "  reasoning             {} of {} output tokens ({:.0} %) in {} requests; {} answer tokens ({})",
        x.tokens,
        tokens.output_total,
        tokens.reasoning_share().unwrap_or(0.0) * 100.0,
        x.requests,
        x.answer_tokens,
        notes.join("; ")
    );
}

/// Multi-turn: TTFT by turn, the first eight turns and the pooled rest.
fn turn_rows(out: &mut String, by_turn: &std::collections::BTreeMap<u32, Summary>) {
    let last = tokenscope_core::metrics::MAX_TURN_KEPT;
    for (turn, summary) in by_turn.iter().take(8) {
        let more = if *turn == last { "+" } else { "" };
        row(out, &format!("TTFT turn {turn}{more}"), Some(summary));
    }
    if by_turn.len() > 8 {
        let _ = writeln!(
            out,
            "  (TTFT of every turn in results.json: latency.ttft_ms_by_turn)"
        );
    }
}

/// The prefix cache's hits: as the server said per request, and from its metrics.
fn prefix_cache_line(out: &mut String, r: &RunResults) {
    let server = r
        .server
        .metrics
        .as_ref()
        .and_then(|m| m["prefix_cache_hit_rate"].as_f64());
    let per_request = r.tokens.prefix_cache.as_ref();
    if per_request.is_none() && server.is_none() {
        return;
    }
    let mut line = match per_request {
        Some(c) => format!(
            "{:.1} % of prompt tokens cached ({} of {} tokens, {} requests said)",
            c.hit_rate * 100.0,
            c.cached_tokens,
            c.prompt_tokens,
            c.requests
        ),
        None => "the responses did not say".into(),
    };
    if let Some(h) = server {
        let _ = write!(line, "; server metrics {:.1} %", h * 100.0);
    }
    let _ = writeln!(out, "  prefix cache            {line}");
}

/// The server's own figures, under a heading only when there is one.
fn server_lines(out: &mut String, kind: &str, m: &serde_json::Value) {
    let mut lines = String::new();
    let g = |k: &str| {
        m[k].as_object()
            .and_then(|o| Some((o.get("mean")?.as_f64()?, o.get("max")?.as_f64()?)))
    };
    if let Some((mean, max)) = g("running") {
        let _ = writeln!(
            lines,
            "  running requests        {mean:.1} mean, {max:.0} max"
        );
    }
    if let Some((mean, max)) = g("waiting") {
        let _ = writeln!(
            lines,
            "  waiting requests        {mean:.1} mean, {max:.0} max"
        );
    }
    if let Some(q) = m["queue_time"]["mean_ms"].as_f64() {
        let _ = writeln!(lines, "  queue time              {q:.1} ms mean");
    }
    if let Some(t) = m["generation_tokens_per_s"].as_f64() {
        let _ = writeln!(lines, "  generated tokens/s      {t:.1}");
    }
    if let Some(line) = spec_decode_line(&m["spec_decode"]) {
        let _ = writeln!(lines, "  speculative decoding    {line}");
    }
    if !lines.is_empty() {
        let _ = writeln!(out, "\nServer ({kind}, from its own metrics)");
        out.push_str(&lines);
    }
}

/// Speculative decoding's acceptance, as the server counted it.
pub fn spec_decode_line(s: &serde_json::Value) -> Option<String> {
    let rate = s["acceptance_rate"].as_f64();
    let length = s["mean_accepted_length"].as_f64();
    if rate.is_none() && length.is_none() {
        return None;
    }
    let mut line = rate.map_or("acceptance —".into(), |r| {
        format!("acceptance {:.1} %", r * 100.0)
    });
    if let (Some(a), Some(d)) = (s["accepted_tokens"].as_f64(), s["draft_tokens"].as_f64()) {
        let _ = write!(line, " ({a:.0} of {d:.0} draft tokens)");
    }
    if let Some(l) = length {
        let _ = write!(line, ", {l:.2} tokens a step");
    }
    let by: Vec<String> = s["acceptance_by_position"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| Some(format!("{:.0} %", v.as_f64()? * 100.0)))
        .collect();
    if !by.is_empty() {
        let _ = write!(line, "; by position {}", by.join(", "));
    }
    Some(line)
}

/// One line per point of a series (a sweep or `sim plan --sweep`).
fn series_table(points: &[(String, RunResults)]) -> String {
    // A reasoning series adds when the answer started and how much was thinking.
    let reasoning = points.iter().any(|(_, r)| r.tokens.reasoning.is_some());
    let mut out = String::from(
        "\nload               out tok/s   TTFT p50   TTFT p99   TPOT p50   TPOT p99    E2E p50   KV max  preempt",
    );
    out += if reasoning {
        "  ANS p99  think %\n"
    } else {
        "\n"
    };
    let mut phased = false;
    for (label, r) in points {
        let l = &r.latency;
        let ms = |s: Option<tokenscope_core::stats::Summary>,
                  p: fn(&tokenscope_core::stats::Summary) -> f64| {
            s.as_ref()
                .map_or("—".to_string(), |s| format!("{:.1}", p(s)))
        };
        // TTFT that hangs on the users' phase is marked, as in one run's summary.
        let mark = match phase_finding(r) {
            Some(_) => "§",
            None => "",
        };
        phased |= !mark.is_empty();
        let kv = r.efficiency.kv_cache.as_ref();
        out += &format!(
            "{label:<18} {:>10.0} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7.0}% {:>8}\n",
            r.throughput.output_tokens_per_s,
            ms(l.ttft_ms, |s| s.p50) + mark,
            ms(l.ttft_ms, |s| s.p99) + mark,
            ms(l.tpot_ms, |s| s.p50),
            ms(l.tpot_ms, |s| s.p99),
            ms(l.e2e_ms, |s| s.p50),
            kv.and_then(|k| k["usage_max"].as_f64()).unwrap_or(0.0) * 100.0,
            kv.and_then(|k| k["preemptions"].as_u64()).unwrap_or(0),
        );
        if reasoning {
            let share = r
                .tokens
                .reasoning_share()
                .map_or("—".into(), |s| format!("{:.0}%", s * 100.0));
            out.pop();
            out += &format!(" {:>8} {:>8}\n", ms(l.answer_start_ms, |s| s.p99), share);
        }
    }
    if phased {
        out += "§ TTFT hangs on how the closed loop's users line up (ttft_depends_on_phase or waves in that point's results.json): compare with --ramp-up, or vary --output-tokens\n";
    }
    out
}

/// A series in the terminal: its table, the analysis, and the notes on
/// recommendations that rest on a phase-bound TTFT.
pub fn series(points: &[(String, RunResults)], a: &Analysis) -> String {
    series_table(points) + &analysis(a) + &phase_notes(points, a)
}

/// Under the analysis: each recommendation judged by TTFT at a point whose
/// TTFT hangs on the closed loop's users' phase (marked `§` in the table),
/// so the choice shows what it rests on.
fn phase_notes(points: &[(String, RunResults)], a: &Analysis) -> String {
    let mut out = String::new();
    for r in &a.recommendations {
        let Some((label, p)) = r.point.and_then(|i| points.get(i)) else {
            continue;
        };
        if phase_finding(p).is_some() && r.judged_by.contains("TTFT") {
            let _ = writeln!(
                out,
                "  § {}'s {label} is judged by a TTFT that hangs on how the users line up: check it with --ramp-up",
                r.profile
            );
        }
    }
    out
}

/// The analysis under the series table: knee, saturation, SLO capacity and
/// the operating point for each service profile.
pub fn analysis(a: &Analysis) -> String {
    let mut out = String::new();
    knee_lines(&mut out, a);
    spread_lines(&mut out, a);
    if let Some(s) = a.saturation {
        _ = writeln!(
            out,
            "saturated from load {}: tokens/s grew < 5 % while TTFT p99 rose",
            s.load
        );
    }
    if let Some(c) = &a.slo {
        slo_capacity_lines(&mut out, c);
    }
    if let Some(s) = &a.scaling {
        scaling_lines(&mut out, s);
    }
    if let Some(answers) = &a.answers {
        for line in crate::answers::across_loads(answers) {
            _ = writeln!(out, "{line}");
        }
    }
    if let Some(spec) = &a.spec_decode {
        for line in crate::answers::spec_across_loads(spec) {
            _ = writeln!(out, "{line}");
        }
    }
    recommendation_lines(&mut out, a);
    out
}

/// The knee (or why there is none), and the saturation rule it rests on.
fn knee_lines(out: &mut String, a: &Analysis) {
    let on = |i: usize| {
        if a.pareto_frontier.contains(&i) {
            "on"
        } else {
            "off"
        }
    };
    match (a.knee, &a.note) {
        (Some(k), _) => {
            _ = writeln!(
                out,
                "\nknee: load {} (between loads {} and {}; {} the Pareto frontier)",
                k.load,
                k.low,
                k.high,
                on(k.index)
            )
        }
        (None, Some(note)) => _ = writeln!(out, "\nno knee: {note}"),
        (None, None) => {
            _ = writeln!(
                out,
                "\nno knee: tokens/s flattened but no single bend stands out ({})",
                a.flattening.as_ref().map_or("", |f| f.rule.as_str())
            )
        }
    }
    if let Some(f) = a.flattening.as_ref().filter(|f| f.saturated) {
        _ = writeln!(out, "  rule: {}", f.rule);
    }
}

/// Each load measured more than once: its runs' ranges.
fn spread_lines(out: &mut String, a: &Analysis) {
    for p in &a.series {
        if let Some(s) = p.spread {
            _ = writeln!(
                out,
                "load {}: {} runs, tokens/s {:.0} (range {:.0}–{:.0}), TTFT p99 {:.0} ms (range {:.0}–{:.0})",
                p.load,
                s.runs,
                p.output_tps,
                s.output_tps[0],
                s.output_tps[1],
                p.ttft_p99_ms,
                s.ttft_p99_ms[0],
                s.ttft_p99_ms[1]
            );
        }
    }
}

/// Each profile's operating point, its margin and what judged it.
fn recommendation_lines(out: &mut String, a: &Analysis) {
    _ = writeln!(out, "\nRecommended operating points");
    for r in &a.recommendations {
        match r.load {
            Some(load) => {
                let at = if r.lower_bound {
                    format!("≥ {load}")
                } else {
                    load.to_string()
                };
                _ = writeln!(
                    out,
                    "  {:<13} load {at:<8} {} · margin {:.0} % · judged by {}",
                    r.profile,
                    r.why,
                    r.margin_pct.unwrap_or(0.0),
                    r.judged_by
                )
            }
            None => {
                _ = writeln!(
                    out,
                    "  {:<13} {:<13} {} · judged by {}",
                    r.profile, "none", r.why, r.judged_by
                )
            }
        }
    }
}

/// What the series says of `--slo`: up to where it holds, where it stops
/// being judgeable, and the `--target-load` gate.
/// What an autoscaler should hold per replica, with the interval and the rule.
fn scaling_lines(out: &mut String, s: &tokenscope_core::autoscale::Scaling) {
    let range = |b: &tokenscope_core::autoscale::Bounded| match b.high {
        Some(h) => format!("{:.1} (could lie in {:.1} – {:.1})", b.value, b.low, h),
        None => format!("≥ {:.1} (the SLO held at every point)", b.value),
    };
    _ = writeln!(
        out,
        "autoscaling threshold per replica ({:.0} % headroom): {} req/s",
        s.headroom_pct,
        range(&s.requests_per_s)
    );
    if let Some(r) = &s.in_server {
        _ = writeln!(
            out,
            "  requests in the server (running + waiting) {}{}",
            range(r),
            match (&s.metric, &s.waiting_metric) {
                (Some(m), Some(w)) => format!(" on `{m}` + `{w}` (keda.yaml, hpa.yaml)"),
                (Some(m), None) => format!(" on `{m}` (keda.yaml, hpa.yaml)"),
                _ => String::new(),
            }
        );
    }
    _ = writeln!(out, "  rule: {}", s.rests_on);
}

fn slo_capacity_lines(out: &mut String, c: &SloCapacity) {
    let limiting = c.limiting.as_deref().unwrap_or("the SLO");
    _ = writeln!(
        out,
        "SLO {} (each objective judged at its 95 % upper bound):",
        c.objectives
    );
    match (c.highest_met_load, c.interpolated_load) {
        (None, _) if c.undecided_load.is_some() => {}
        (None, _) => {
            _ = writeln!(
                out,
                "  not met even at the lightest load ({limiting} binds)"
            )
        }
        (Some(h), Some(i)) => {
            _ = writeln!(
            out,
            "  met up to load {h} (margin {:.0} %); {limiting} reaches its limit near load {i:.1}",
            c.margin_pct.unwrap_or(0.0)
        )
        }
        (Some(h), None) if c.undecided_load.is_some() => {
            _ = writeln!(
                out,
                "  met up to load {h} (margin {:.0} %)",
                c.margin_pct.unwrap_or(0.0)
            )
        }
        (Some(h), None) => {
            _ = writeln!(
            out,
            "  met at every load up to {h} (margin {:.0} % there); capacity lies beyond the series",
            c.margin_pct.unwrap_or(0.0)
        )
        }
    }
    if let Some(u) = c.undecided_load {
        _ = writeln!(
            out,
            "  not judged from load {u}: {}",
            c.undecided_reason.as_deref().unwrap_or("too few requests")
        );
    }
    if let Some(t) = c.target_load {
        let verdict = match c.target_met {
            Some(true) => "SLO met",
            Some(false) => "SLO NOT met",
            None => "SLO not judged (too few requests; exit 7)",
        };
        _ = writeln!(out, "target load {t}: {verdict}");
    }
}
