//! `history trend --html`: one configuration's figures over time, one chart
//! per figure, change points marked. The history command judges the runs;
//! this renders what it found.

use crate::charts::{self, Axes, Mark, Series};
use crate::html::{esc, page};

/// One figure over the runs of a configuration.
pub struct TrendChart {
    /// `tpot_p50`.
    pub name: String,
    /// What it is, in words (the chart's title).
    pub about: String,
    pub unit: String,
    /// (run id, value), in order.
    pub points: Vec<(u64, f64)>,
    /// Change points: (run id, value, a regression rather than an improvement).
    pub changes: Vec<(u64, f64, bool)>,
}

/// A configuration's history, judged.
pub struct TrendView {
    /// The configuration's key.
    pub key: String,
    /// The configuration in words.
    pub description: Option<String>,
    pub runs: usize,
    /// First and last runs' start times.
    pub first: String,
    pub last: String,
    /// The change-point rule in words.
    pub rule: String,
    pub charts: Vec<TrendChart>,
}

/// The whole page.
pub fn trend_page(v: &TrendView) -> String {
    let mut body = format!("<h1>Trend of configuration {}</h1>\n", esc(&v.key));
    if let Some(d) = &v.description {
        body.push_str(&format!("<p>{}</p>\n", esc(d)));
    }
    body.push_str(&format!(
        "<p class=\"note\">{} runs, {} → {}. x: the runs in order (#id). Change points are marked: {}.</p>\n",
        v.runs,
        esc(&v.first),
        esc(&v.last),
        esc(&v.rule)
    ));
    for c in &v.charts {
        if let Some(svg) = chart(c) {
            body.push_str(&format!(
                "<h2>{}</h2>\n<div class=\"chart\">{svg}</div>\n",
                esc(&c.name)
            ));
        }
    }
    page(&format!("tokenscope history: {}", v.key), &body)
}

fn chart(c: &TrendChart) -> Option<String> {
    let points: Vec<(f64, f64)> = c.points.iter().map(|&(id, v)| (id as f64, v)).collect();
    let marks: Vec<Mark> = c
        .changes
        .iter()
        .map(|&(id, value, regression)| Mark {
            label: format!(
                "#{id} {}",
                if regression {
                    "regression"
                } else {
                    "improvement"
                }
            ),
            at: (id as f64, value),
        })
        .collect();
    let y = format!("{} ({})", c.name, c.unit);
    let axes = Axes {
        title: &c.about,
        x: "run id",
        y: &y,
        log_x: false,
    };
    let mut series = Series::line(c.name.clone(), points);
    series.style = charts::Style::LineAndPoints;
    charts::xy(&axes, &[series], &marks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trend_page_marks_its_change_points_and_escapes_its_text() {
        let v = TrendView {
            key: "k<1>".into(),
            description: Some("bench · a & b".into()),
            runs: 3,
            first: "2026-12-01".into(),
            last: "2026-12-03".into(),
            rule: "rule".into(),
            charts: vec![TrendChart {
                name: "tpot_p50".into(),
                about: "TPOT p50".into(),
                unit: "ms".into(),
                points: vec![(1, 10.0), (2, 10.5), (3, 20.0)],
                changes: vec![(3, 20.0, true)],
            }],
        };
        let html = trend_page(&v);
        assert!(html.contains("k&lt;1&gt;") && html.contains("a &amp; b"));
        assert!(html.contains("#3 regression"), "the change point is marked");
        assert!(html.contains("<svg"));
    }
}
