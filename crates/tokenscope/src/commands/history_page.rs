//! `history trend --html`: one configuration's figures over time, one chart
//! per figure, change points marked.

use tokenscope_history::metrics::METRICS;
use tokenscope_history::RunEntry;
use tokenscope_history::{judge, Rule, StoredRun, Verdict};
use tokenscope_report::charts::{self, Axes, Mark, Series};
use tokenscope_report::html::{esc, page};

pub fn trend_page(runs: &[StoredRun], key: &str) -> String {
    let rule = Rule::default();
    let mut body = format!("<h1>Trend of configuration {}</h1>\n", esc(key));
    if let Some(r) = runs.last() {
        body.push_str(&format!("<p>{}</p>\n", esc(&describe_config(&r.entry))));
    }
    body.push_str(&format!(
        "<p class=\"note\">{} runs, {} → {}. x: the runs in order (#id). Change points are marked: {}.</p>\n",
        runs.len(),
        esc(runs.first().map_or("", |r| r.entry.started_at.as_str())),
        esc(runs.last().map_or("", |r| r.entry.started_at.as_str())),
        esc(&rule.describe())
    ));
    for m in METRICS.iter() {
        let judged = judge(runs, m, &rule);
        if judged.is_empty() {
            continue;
        }
        let points: Vec<(f64, f64)> = judged.iter().map(|j| (j.run_id as f64, j.value)).collect();
        let marks: Vec<Mark> = judged
            .iter()
            .filter_map(|j| match j.verdict {
                Verdict::Change { regression } => Some(Mark {
                    label: format!(
                        "#{} {}",
                        j.run_id,
                        if regression {
                            "regression"
                        } else {
                            "improvement"
                        }
                    ),
                    at: (j.run_id as f64, j.value),
                }),
                _ => None,
            })
            .collect();
        let y = format!("{} ({})", m.name, m.unit);
        let axes = Axes {
            title: m.about,
            x: "run id",
            y: &y,
            log_x: false,
        };
        let mut series = Series::line(m.name, points);
        series.style = charts::Style::LineAndPoints;
        if let Some(svg) = charts::xy(&axes, &[series], &marks) {
            body.push_str(&format!(
                "<h2>{}</h2>\n<div class=\"chart\">{svg}</div>\n",
                esc(m.name)
            ));
        }
    }
    page(&format!("tokenscope history: {key}"), &body)
}

/// `bench · built-in: … · llama-3.1-8b · closed loop, concurrency 4 · input 256, output 128`.
pub fn describe_config(e: &RunEntry) -> String {
    let c = &e.config;
    let load = &c["load"];
    let load_text = match (load["mode"].as_str(), &load["series"]) {
        (Some(mode), serde_json::Value::Array(s)) => format!("{mode}-loop series {s:?}"),
        (Some("closed"), _) => format!("closed loop, concurrency {}", load["concurrency"]),
        (Some("open"), _) => format!(
            "open loop, {} req/s {}",
            load["rate"],
            load["arrival"].as_str().unwrap_or("")
        ),
        _ => load.to_string(),
    };
    format!(
        "{} · {} · {} · {load_text} · input {}, output {}",
        e.kind.name(),
        e.target,
        e.model,
        c["input_tokens"].as_str().unwrap_or("-"),
        c["output_tokens"].as_str().unwrap_or("-"),
    )
}
