//! `tokenscope compare A B`: whether B differs from A, metric by metric, with
//! bootstrap confidence intervals from the per-request records. Two sweeps
//! are compared point by point, at the loads both measured. Runs of
//! different models, servers, APIs or workloads are said to be unlike up
//! front: their differences are shown, never gated as regressions.

use crate::cli::CompareArgs;
use crate::exit::Exit;
use crate::run_dir::{read_run, values_of, values_where};
use serde_json::json;
use std::path::Path;
use tokenscope_core::compare::{
    compare_values, within_resolution, MetricChange, RunValues, Settings,
};
use tokenscope_core::consistency::Consistency;
use tokenscope_core::results::RunResults;
use tokenscope_report::run_dir::Run;

/// What makes two runs measure different things, one line each.
pub fn unlike(a: &RunResults, b: &RunResults) -> Vec<String> {
    let mut out = Vec::new();
    let mut differ = |what: &str, x: String, y: String| {
        if x != y {
            out.push(format!("{what} differs: A {x} · B {y}"));
        }
    };
    differ("model", a.target.model.clone(), b.target.model.clone());
    differ("API", a.target.api.clone(), b.target.api.clone());
    let kind = |r: &RunResults| r.server.kind.clone().unwrap_or_else(|| "unknown".into());
    differ("server kind", kind(a), kind(b));
    for key in [
        "input_tokens",
        "output_tokens",
        "shared_prefix",
        "ignore_eos",
    ] {
        differ(
            &format!("workload ({key})"),
            a.config[key].to_string(),
            b.config[key].to_string(),
        );
    }
    out
}

/// One compared pair: its label (a sweep's load), the changes, and the regressions.
struct Pair {
    label: Option<String>,
    changes: Vec<MetricChange>,
    unlike: Vec<String>,
}

pub fn run(mut args: CompareArgs) -> anyhow::Result<Exit> {
    // A run may be named by its id in the history (`42`, `#42`) where no
    // directory of that name exists.
    for side in [&mut args.a, &mut args.b] {
        if !side.exists() {
            if let Some(dir) =
                crate::recording::run_dir_of(&side.to_string_lossy(), args.db.as_deref())?
            {
                *side = dir;
            }
        }
        // A peer's result (vLLM, AIPerf, GuideLLM) is read as a run directory.
        *side = crate::peer_results::resolve(side)?;
    }
    let settings = Settings {
        resamples: args.resamples as usize,
        confidence: args.confidence,
        noise_threshold_pct: args.noise_threshold,
        seed: 0,
    };
    let sweeps = crate::run_dir::holds_sweep(&args.a) && crate::run_dir::holds_sweep(&args.b);
    let mut answers = None;
    let pairs = if sweeps {
        let (pairs, line) = sweep_pairs(&args.a, &args.b, &settings)?;
        if !args.json {
            crate::outln!("{line}");
        }
        pairs
    } else {
        let (pairs, between) = run_pairs(&args, &settings)?;
        answers = between;
        pairs
    };
    if pairs.iter().all(|p| p.changes.is_empty()) {
        return Err(Exit::usage(
            "nothing to compare: one of the runs has no successful request".into(),
        ));
    }
    let is_unlike = pairs.iter().any(|p| !p.unlike.is_empty());
    let gated = !is_unlike || args.allow_unlike;
    let failing: Vec<(Option<&String>, &MetricChange)> = pairs
        .iter()
        .flat_map(|p| p.changes.iter().map(move |c| (p.label.as_ref(), c)))
        .filter(|(_, c)| {
            gated
                && c.is_regression()
                && args
                    .fail_on_regression
                    .is_some_and(|limit| c.change_pct.abs() >= limit)
        })
        .collect();
    if args.json {
        let doc = json_doc(&args, &settings, (&pairs, sweeps), &answers, &failing);
        crate::outln!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print_pairs(&pairs, &settings, &args, gated, &failing);
        if let Some(c) = &answers {
            let line = tokenscope_core::consistency::finding(c, "B", "A").map_or_else(
                || {
                    format!(
                        "answers: all {} identical (the same prompts at temperature 0)",
                        c.compared
                    )
                },
                |f| format!("answers: {}", f.message),
            );
            crate::outln!("\n{line}");
        }
    }
    Ok(if failing.is_empty() {
        Exit::Success
    } else {
        Exit::Regression
    })
}

/// Two runs compared: the whole runs, then each LoRA adapter's requests
/// apart; and their answers side by side, where both kept them.
fn run_pairs(
    args: &CompareArgs,
    settings: &Settings,
) -> anyhow::Result<(Vec<Pair>, Option<Consistency>)> {
    let (a, b) = (read_run(&args.a)?, read_run(&args.b)?);
    if !args.json {
        header(&args.a, &a.results, &args.b, &b.results);
    }
    let mut pairs = vec![Pair {
        label: None,
        changes: changes(
            (&values_of(&a.dir)?, &a.results),
            (&values_of(&b.dir)?, &b.results),
            settings,
        ),
        unlike: [
            unlike(&a.results, &b.results),
            sources(&a.results, &b.results),
        ]
        .concat(),
    }];
    pairs.extend(adapter_pairs(&a, &b, settings)?);
    let answers = crate::answers::between((&a.dir, &a.results), (&b.dir, &b.results));
    Ok((pairs, answers))
}

/// `compare --json`: the changes of the runs (or of each sweep point), what
/// makes them unlike, and the regressions that fail the gate.
fn json_doc(
    args: &CompareArgs,
    settings: &Settings,
    (pairs, sweeps): (&[Pair], bool),
    answers: &Option<Consistency>,
    failing: &[(Option<&String>, &MetricChange)],
) -> serde_json::Value {
    let points: Vec<_> = pairs
        .iter()
        .map(|p| json!({"load": p.label, "metrics": p.changes, "unlike": p.unlike}))
        .collect();
    json!({
        "a": args.a, "b": args.b,
        "settings": settings,
        "unlike": pairs.iter().flat_map(|p| p.unlike.clone()).collect::<std::collections::BTreeSet<_>>(),
        "metrics": if sweeps { json!(null) } else { json!(pairs[0].changes) },
        "adapters": (!sweeps).then(|| pairs[1..].iter().map(|p| (p.label.clone().unwrap_or_default(), json!(p.changes))).collect::<serde_json::Map<_, _>>()),
        "points": if sweeps { json!(points) } else { json!(null) },
        "answers": answers,
        "fail_on_regression_pct": args.fail_on_regression,
        "regressions": failing.iter().map(|(l, c)| match l {
            Some(l) => format!("{l}: {}", c.metric),
            None => c.metric.clone(),
        }).collect::<Vec<_>>(),
    })
}

fn header(pa: &Path, a: &RunResults, pb: &Path, b: &RunResults) {
    for (name, path, r) in [("A", pa, a), ("B", pb, b)] {
        crate::outln!(
            "{name} {}  ({}, {}, {} requests)",
            path.display(),
            r.target.model,
            r.server.kind.as_deref().unwrap_or("server kind unknown"),
            r.counts.requests
        );
    }
    let (x, y) = (&a.config["load"], &b.config["load"]);
    if x != y {
        crate::outln!("  note: load differs: A {x} · B {y}");
    }
}

/// Two sweeps, point by point at the loads both have.
fn sweep_pairs(a: &Path, b: &Path, settings: &Settings) -> anyhow::Result<(Vec<Pair>, String)> {
    let (sa, sb) = (
        crate::run_dir::read_series(a)?,
        crate::run_dir::read_series(b)?,
    );
    let values = |d: &crate::run_dir::Done| -> RunValues {
        d.dir
            .as_ref()
            .and_then(|dir| values_of(dir).ok())
            .unwrap_or_default()
    };
    // A concurrency of 4 and 4 requests/s are not the same load.
    let kind = |d: &crate::run_dir::Done| d.results.config["load"]["mode"].clone();
    let mut pairs = Vec::new();
    for pa in &sa {
        let Some(pb) = sb.iter().find(|p| p.load == pa.load && kind(p) == kind(pa)) else {
            continue;
        };
        pairs.push(Pair {
            label: Some(pa.label.clone()),
            changes: changes(
                (&values(pa), &pa.results),
                (&values(pb), &pb.results),
                settings,
            ),
            unlike: unlike(&pa.results, &pb.results),
        });
    }
    if pairs.is_empty() {
        let series = |s: &[crate::run_dir::Done]| match s.first().map(kind) {
            Some(k) if k == "open" => "a rate series",
            Some(k) if k == "closed" => "a concurrency series",
            _ => "a series",
        };
        return Err(Exit::usage(format!(
            "the sweeps {} ({}) and {} ({}) share no load: nothing to compare point by point",
            a.display(),
            series(&sa),
            b.display(),
            series(&sb)
        )));
    }
    let line = format!(
        "sweeps A {} · B {}: {} loads in common (A has {}, B has {})",
        a.display(),
        b.display(),
        pairs.len(),
        sa.len(),
        sb.len()
    );
    Ok((pairs, line))
}

/// `--lora` runs: each adapter both runs sent to, compared apart (its
/// requests only), labelled `adapter NAME`.
fn adapter_pairs(a: &Run, b: &Run, settings: &Settings) -> anyhow::Result<Vec<Pair>> {
    let mut pairs = Vec::new();
    for name in a.results.adapters.keys() {
        if !b.results.adapters.contains_key(name) {
            continue;
        }
        pairs.push(Pair {
            label: Some(format!("adapter {name}")),
            changes: changes(
                (&values_where(&a.dir, Some(name))?, &a.results),
                (&values_where(&b.dir, Some(name))?, &b.results),
                settings,
            ),
            unlike: Vec::new(),
        });
    }
    Ok(pairs)
}

fn print_pairs(
    pairs: &[Pair],
    settings: &Settings,
    args: &CompareArgs,
    gated: bool,
    failing: &[(Option<&String>, &MetricChange)],
) {
    let unlike: std::collections::BTreeSet<&String> =
        pairs.iter().flat_map(|p| &p.unlike).collect();
    if !unlike.is_empty() {
        crate::outln!(
            "UNLIKE RUNS: they measure different things, so a change below is not a regression:"
        );
        for u in &unlike {
            crate::outln!("  {u}");
        }
        if !gated {
            crate::outln!(
                "  (--fail-on-regression does not judge unlike runs; --allow-unlike makes it)"
            );
        }
    }
    for p in pairs {
        if let Some(l) = &p.label {
            crate::outln!("\n{l}");
        }
        table(&p.changes, settings);
    }
    crate::outln!(
        "\nsignificant: the interval excludes 0 and |change| > {} % (noise threshold); bootstrap over requests, {} resamples",
        settings.noise_threshold_pct, settings.resamples
    );
    if let Some(note) = pairs
        .iter()
        .flat_map(|p| &p.changes)
        .find_map(|c| c.not_judged.as_ref())
    {
        crate::outln!("tail quantiles: {note}");
    }
    if let Some(limit) = args.fail_on_regression.filter(|_| gated) {
        if failing.is_empty() {
            crate::outln!("no regression of {limit} % or more");
        }
        for (label, c) in failing {
            let at = label.map_or(String::new(), |l| format!(" at {l}"));
            crate::outln!(
                "REGRESSION{at}: {} {:+.1} % (limit {limit} %)",
                c.metric,
                c.change_pct
            );
        }
    }
}

fn table(changes: &[MetricChange], settings: &Settings) {
    crate::outln!(
        "{:<30}{:>12}{:>12}{:>10}  {:<22}",
        "metric",
        "A",
        "B",
        "change",
        format!("{:.0} % interval", settings.confidence * 100.0)
    );
    for c in changes {
        let verdict = match (c.significant, c.is_regression()) {
            _ if c.not_judged.is_some() => "(too few requests to judge)",
            (false, _) => "",
            (true, true) => "significant · worse",
            (true, false) => "significant · better",
        };
        crate::outln!(
            "{:<30}{:>12.2}{:>12.2}{:>+9.1}%  [{:+.1}, {:+.1}] %  {verdict}",
            format!("{} ({})", c.metric, c.unit),
            c.a,
            c.b,
            c.change_pct,
            c.ci_low_pct,
            c.ci_high_pct
        );
    }
}

/// B against A, latency changes within the clients' own measured delay not judged.
fn changes(
    (va, a): (&RunValues, &RunResults),
    (vb, b): (&RunValues, &RunResults),
    settings: &Settings,
) -> Vec<MetricChange> {
    let delay = |r: &RunResults| r.client.loop_delay_ms.map_or(0.0, |d| d.p99 - d.min);
    let mut out = compare_values(va, vb, settings);
    within_resolution(&mut out, delay(a).max(delay(b)));
    out.retain(|c| not_measured(a, &c.metric).is_none() && not_measured(b, &c.metric).is_none());
    out
}

/// Why a run read from a peer's result has no such figure (`config.not_measured`:
/// a metric family, `ttft`, `itl`, or `throughput` for the rates, and the reason).
fn not_measured(r: &RunResults, metric: &str) -> Option<String> {
    let missing = r.config["not_measured"].as_object()?;
    missing.iter().find_map(|(family, why)| {
        let hit = match family.as_str() {
            "throughput" => metric.ends_with("_per_s"),
            f => metric.starts_with(&format!("{f}_")),
        };
        hit.then(|| why.as_str().unwrap_or("not measured").to_string())
    })
}

/// What a peer's result lets compare judge: where each side's figures came
/// from, and the metrics one side does not measure, with why.
fn sources(a: &RunResults, b: &RunResults) -> Vec<String> {
    let source = |r: &RunResults| match r.config["imported_from"].as_str() {
        Some(tool) => {
            format!("{tool}'s result, recomputed from its requests by tokenscope's definitions")
        }
        None => "tokenscope".into(),
    };
    let mut out = Vec::new();
    if source(a) != source(b) {
        out.push(format!("source differs: A {} · B {}", source(a), source(b)));
    }
    for (side, r) in [("A", a), ("B", b)] {
        for (family, why) in r.config["not_measured"].as_object().into_iter().flatten() {
            out.push(format!(
                "not compared: {family} ({side}: {})",
                why.as_str().unwrap_or("not measured")
            ));
        }
    }
    out
}
