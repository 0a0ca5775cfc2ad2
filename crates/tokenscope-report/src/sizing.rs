//! `sim size`: the options that meet an SLO at a load, cheapest first — as
//! rows on the terminal and as `report.html` (cost per hour against the SLO
//! capacity each option showed, and the table).

use crate::charts::{self, Axes, Mark, Series, Style};
use crate::html::{esc, page};

/// One deployment that met the SLO.
pub struct SizedOption {
    /// `2 × h100-sxm TP 1 bf16 on vllm`.
    pub label: String,
    pub replicas: u32,
    pub gpus: u32,
    pub usd_per_hour: f64,
    pub usd_per_million_output_tokens: f64,
    /// Requests/s it holds within the SLO.
    pub slo_capacity_rps: f64,
    /// How far under its limit the worst objective is, %.
    pub margin_pct: f64,
    /// The objectives as the fleet met them (`ttft_p99 412 ms, …`).
    pub objectives: String,
    /// What stops one replica fewer.
    pub binding: String,
    /// The `sim plan` command that reproduces it.
    pub command: String,
}

/// What was sized, and the options found.
pub struct SizingView {
    pub model: String,
    /// Requests/s asked for.
    pub rate: f64,
    pub slo: String,
    pub router: String,
    pub options: Vec<SizedOption>,
}

/// The options as terminal rows, with a header; a line saying so when there
/// is none.
pub fn options_table(v: &SizingView) -> String {
    if v.options.is_empty() {
        return "No deployment meets the SLO at this load within the search.\n".into();
    }
    let mut out = format!(
        "{:<54} {:>8} {:>5} {:>9} {:>12} {:>9} {:>9}  {:<34} binding\n",
        "deployment",
        "replicas",
        "GPUs",
        "$/hour",
        "$/1M out tok",
        "capacity",
        "margin",
        "SLO (fleet at the full rate)"
    );
    for o in &v.options {
        out.push_str(&format!(
            "{:<54} {:>8} {:>5} {:>9.2} {:>12.3} {:>5.1}/s {:>8.0} %  {:<34} {}\n",
            o.label,
            o.replicas,
            o.gpus,
            o.usd_per_hour,
            o.usd_per_million_output_tokens,
            o.slo_capacity_rps,
            o.margin_pct,
            o.objectives,
            o.binding
        ));
    }
    out.push_str("\nre-run an option (the fleet behind the router at the full rate):\n");
    for o in &v.options {
        out.push_str(&format!("  {}\n", o.command));
    }
    out
}

/// `report.html` of a sizing.
pub fn sizing_page(v: &SizingView) -> String {
    let points: Vec<(f64, f64)> = v
        .options
        .iter()
        .map(|o| (o.slo_capacity_rps, o.usd_per_hour))
        .collect();
    let marks: Vec<Mark> = v
        .options
        .iter()
        .zip(&points)
        .map(|(o, &at)| Mark {
            label: format!("{} ×{}", o.label, o.replicas),
            at,
        })
        .collect();
    let axes = Axes {
        title: "cost against SLO capacity",
        x: "SLO capacity (req/s within the SLO)",
        y: "$ per hour",
        log_x: false,
    };
    let series = Series {
        name: "options".into(),
        points,
        style: Style::Points,
    };
    let chart = charts::xy(&axes, &[series], &marks).unwrap_or_default();
    let mut rows = String::new();
    for o in &v.options {
        rows.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{:.3}</td><td>{:.1} req/s</td><td>{:.0} %</td><td>{}</td><td><code>{}</code></td></tr>\n",
            esc(&o.label),
            o.replicas,
            o.gpus,
            o.usd_per_hour,
            o.usd_per_million_output_tokens,
            o.slo_capacity_rps,
            o.margin_pct,
            esc(&o.binding),
            esc(&o.command)
        ));
    }
    let body = format!(
        "<h1>Sizing {} at {} req/s</h1>\n<p>SLO: {} · router {}</p>\n<div class=\"chart\">{chart}</div>\n\
<table><tr><th>deployment</th><th>replicas</th><th>GPUs</th><th>$/hour</th><th>$/1M output tokens</th><th>SLO capacity</th><th>margin</th><th>binding</th><th>re-run</th></tr>\n{rows}</table>\n\
<p class=\"note\">Simulated on tokenscope's engine model; each option met the SLO in the fleet simulation at the full rate.</p>",
        esc(&v.model),
        v.rate,
        esc(&v.slo),
        esc(&v.router),
    );
    page("tokenscope sim size", &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(options: Vec<SizedOption>) -> SizingView {
        SizingView {
            model: "llama-3.1-70b".into(),
            rate: 20.0,
            slo: "ttft_p99=1s".into(),
            router: "least-outstanding".into(),
            options,
        }
    }

    #[test]
    fn each_option_is_a_row_with_its_command() {
        let option = SizedOption {
            label: "1 × h200 TP 2 fp8 on vllm".into(),
            replicas: 2,
            gpus: 4,
            usd_per_hour: 25.4,
            usd_per_million_output_tokens: 1.234,
            slo_capacity_rps: 22.5,
            margin_pct: 12.0,
            objectives: "ttft_p99 812 ms".into(),
            binding: "queueing".into(),
            command: "tokenscope sim plan --gpu h200 <x>".into(),
        };
        let v = view(vec![option]);
        let table = options_table(&v);
        assert!(table.lines().nth(1).unwrap().contains("25.40"), "{table}");
        assert!(table.contains("tokenscope sim plan --gpu h200 <x>"));
        let html = sizing_page(&v);
        assert!(html.contains("&lt;x&gt;") && html.contains("<svg"));
        assert!(options_table(&view(Vec::new())).starts_with("No deployment"));
    }
}
