//! `tokenscope compare A B`: whether B differs from A, metric by metric, with
//! bootstrap confidence intervals from the per-request records.

use crate::cli::CompareArgs;
use crate::exit::Exit;
use crate::report::read_run;
use serde_json::json;
use tokenscope_core::compare::{compare, MetricChange, Settings};

pub fn run(args: CompareArgs) -> anyhow::Result<Exit> {
    let (a, b) = (read_run(&args.a)?, read_run(&args.b)?);
    let settings = Settings {
        resamples: args.resamples as usize,
        confidence: args.confidence,
        noise_threshold_pct: args.noise_threshold,
        seed: 0,
    };
    let changes = compare(&a.records, &b.records, &settings);
    if changes.is_empty() {
        return Err(Exit::usage(
            "nothing to compare: one of the runs has no successful request".into(),
        ));
    }
    let failing: Vec<&MetricChange> = changes
        .iter()
        .filter(|c| {
            c.is_regression()
                && args
                    .fail_on_regression
                    .is_some_and(|limit| c.change_pct.abs() >= limit)
        })
        .collect();
    if args.json {
        let doc = json!({
            "a": args.a, "b": args.b,
            "settings": settings,
            "metrics": changes,
            "fail_on_regression_pct": args.fail_on_regression,
            "regressions": failing.iter().map(|c| &c.metric).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!(
            "A {}  ({}, {} requests)",
            args.a.display(),
            a.results.target.model,
            a.results.counts.requests
        );
        println!(
            "B {}  ({}, {} requests)",
            args.b.display(),
            b.results.target.model,
            b.results.counts.requests
        );
        for key in ["load", "input_tokens", "output_tokens"] {
            let (x, y) = (&a.results.config[key], &b.results.config[key]);
            if x != y {
                println!("  note: {key} differs: A {x} · B {y}");
            }
        }
        println!(
            "\n{:<30}{:>12}{:>12}{:>10}  {:<22}",
            "metric",
            "A",
            "B",
            "change",
            format!("{:.0} % interval", settings.confidence * 100.0)
        );
        for c in &changes {
            let verdict = match (c.significant, c.is_regression()) {
                _ if c.not_judged.is_some() => "(too few requests to judge)",
                (false, _) => "",
                (true, true) => "significant · worse",
                (true, false) => "significant · better",
            };
            println!(
                "{:<30}{:>12.2}{:>12.2}{:>+9.1}%  [{:+.1}, {:+.1}] %  {verdict}",
                format!("{} ({})", c.metric, c.unit),
                c.a,
                c.b,
                c.change_pct,
                c.ci_low_pct,
                c.ci_high_pct
            );
        }
        println!(
            "\nsignificant: the interval excludes 0 and |change| > {} % (noise threshold); bootstrap over requests, {} resamples",
            settings.noise_threshold_pct, settings.resamples
        );
        if let Some(note) = changes.iter().find_map(|c| c.not_judged.as_ref()) {
            println!("tail quantiles: {note}");
        }
        if let Some(limit) = args.fail_on_regression {
            if failing.is_empty() {
                println!("no regression of {limit} % or more");
            } else {
                for c in &failing {
                    println!(
                        "REGRESSION: {} {:+.1} % (limit {limit} %)",
                        c.metric, c.change_pct
                    );
                }
            }
        }
    }
    Ok(if failing.is_empty() {
        Exit::Success
    } else {
        Exit::Regression
    })
}
