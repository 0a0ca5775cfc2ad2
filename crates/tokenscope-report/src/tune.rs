//! A tune's `report.html`, from its `tune.json`: the recommendation per
//! service with what it rests on, every setting side by side (each linked
//! to its own series report), and the plan against the measurement.
//! Read from the JSON document, so this crate needs nothing of the
//! application's types, and an older `tune.json` still renders.

use crate::html::{esc, page as html_page};
use serde_json::Value;
use std::fmt::Write;

/// The whole page.
pub fn page(doc: &Value) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<h1>tune</h1><p class=\"meta\">{} · SLO {}{}</p>",
        esc(text(&doc["serve"])),
        esc(text(&doc["slo"])),
        if doc["interrupted"] == true {
            " · <b>interrupted</b>: the settings after the stop were not run"
        } else {
            ""
        }
    );
    recommendations(&mut out, doc);
    settings(&mut out, doc);
    planned(&mut out, doc);
    out.push_str(
        "<p class=\"note\">A setting's capacity is the highest load measured to meet the SLO \
at every objective's upper 95 % bound; its bracket runs to the lowest load measured to miss \
it (or the maximum-throughput probe's figure). Each setting's search is in its directory \
(find.json, sweep.json, report.html); the rule is in docs/metrics.md, \
\"The SLO capacity by search\".</p>",
    );
    html_page("tokenscope tune", &out)
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

fn num(v: &Value) -> String {
    match v.as_f64() {
        Some(x) if x.fract() == 0.0 && x.abs() < 1e15 => format!("{x:.0}"),
        Some(x) if x.abs() >= 100.0 => format!("{x:.0}"),
        Some(x) => format!("{x:.3}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string(),
        None => "–".into(),
    }
}

fn recommendations(out: &mut String, doc: &Value) {
    out.push_str("<h2>Recommended settings</h2><table><tr><th>service</th><th>setting</th><th>rests on</th></tr>");
    for r in doc["recommendations"].as_array().into_iter().flatten() {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td style=\"text-align:left\">{}</td></tr>",
            esc(text(&r["service"])),
            esc(r["setting"].as_str().unwrap_or("none")),
            esc(text(&r["why"]))
        );
    }
    out.push_str("</table>");
}

fn settings(out: &mut String, doc: &Value) {
    out.push_str(
        "<h2>Settings</h2><table><tr><th>setting</th><th>ready s</th><th>capacity</th>\
<th>bracket</th><th>max output tok/s</th><th>frontier</th><th>points</th><th>requests</th><th>planned</th>\
<th style=\"text-align:left\">notes</th></tr>",
    );
    for s in doc["settings"].as_array().into_iter().flatten() {
        let name = esc(text(&s["name"]));
        let measured = s["measured"] != false && s["find"].is_object();
        let link = match measured {
            true => format!(
                "<a href=\"{}/report.html\">{name}</a>",
                esc(text(&s["dir"]))
            ),
            false => name,
        };
        let capacity = match (s["at_least"] == true, s["capacity"].is_null()) {
            (_, true) => "none".to_string(),
            (true, false) => format!("≥ {}", num(&s["capacity"])),
            (false, false) => num(&s["capacity"]),
        };
        let bracket = s["bracket"]
            .as_array()
            .map_or("–".into(), |b| format!("{}–{}", num(&b[0]), num(&b[1])));
        let notes: Vec<&str> = s["error"]
            .as_str()
            .into_iter()
            .chain(
                s["notes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str),
            )
            .collect();
        let _ = write!(
            out,
            "<tr><td>{link}</td><td>{}</td><td>{}</td><td>{bracket}</td><td>{}</td><td>{}</td><td>{}</td>\
<td>{}</td><td>{}</td><td style=\"text-align:left\">{}</td></tr>",
            num(&s["ready_s"]),
            if measured { capacity } else { "–".into() },
            num(&s["max_output_tokens_per_s"]),
            if s["on_frontier"] == true { "yes" } else { "–" },
            s["find"]["points"]
                .as_array()
                .map_or("–".into(), |p| p.len().to_string()),
            num(&s["find"]["requests"]),
            num(&s["planned"]["bracket"]["capacity"]),
            esc(&notes.join("; "))
        );
    }
    out.push_str("</table>");
}

/// Planned against measured, where both are there.
fn planned(out: &mut String, doc: &Value) {
    let rows: Vec<String> = doc["settings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| {
            let p = s["planned"]["bracket"]["capacity"].as_f64()?;
            let m = s["capacity"].as_f64().filter(|_| s["measured"] != false)?;
            Some(format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:+.0} %</td></tr>",
                esc(text(&s["name"])),
                num(&s["planned"]["bracket"]["capacity"]),
                num(&s["capacity"]),
                (p / m - 1.0) * 100.0
            ))
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    out.push_str("<h2>Planned against measured</h2><table><tr><th>setting</th><th>planned capacity</th><th>measured</th><th>plan error</th></tr>");
    out.push_str(&rows.concat());
    out.push_str("</table>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tune_page_holds_every_setting_and_escapes_what_it_shows() {
        let doc = serde_json::json!({
            "serve": "srv --port {port} -np {slots} <x>",
            "slo": "ttft_p90 ≤ 60 ms",
            "interrupted": false,
            "settings": [
                {"name": "slots=1", "dir": "slots-1", "measured": true, "capacity": 10.5,
                 "bracket": [10.5, 11.0], "at_least": false, "ready_s": 0.1,
                 "find": {"points": [{}, {}], "requests": 120},
                 "planned": {"bracket": {"capacity": 10.0}}, "notes": []},
                {"name": "slots=0", "dir": "slots-0", "measured": true, "capacity": null,
                 "error": "did not start: <boom>", "notes": []},
            ],
            "recommendations": [{"service": "chat", "setting": "slots=1", "why": "the highest"}],
        });
        let html = page(&doc);
        assert!(
            html.contains("<a href=\"slots-1/report.html\">slots=1</a>"),
            "{html}"
        );
        assert!(html.contains("&lt;boom&gt;") && !html.contains("<boom>"));
        assert!(html.contains("&lt;x&gt;"));
        assert!(
            html.contains("Planned against measured") && html.contains("-5 %"),
            "{html}"
        );
        // A document missing its parts still renders.
        assert!(page(&serde_json::json!({})).contains("<h1>tune</h1>"));
    }
}
