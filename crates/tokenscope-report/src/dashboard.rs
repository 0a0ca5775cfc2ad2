//! The live dashboard (ratatui): what `bench` and `sweep` show while they
//! run on a terminal, and what `watch` shows of a production server. It draws
//! a [`View`] — plain numbers gathered by the caller — so the same panels
//! serve a load run (client figures and the server's) and `watch` (the
//! server's alone).

use crate::health::{self, Health};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Gauge, Paragraph, Sparkline};
use ratatui::Frame;

/// The server's side, from its `/metrics` (and the GPU).
#[derive(Debug, Clone, Default)]
pub struct ServerView {
    pub kind: Option<String>,
    pub running: Option<f64>,
    pub waiting: Option<f64>,
    pub kv_usage: Option<f64>,
    pub preemptions: Option<f64>,
    pub queue_time_ms: Option<f64>,
    pub gpu_util_pct: Option<f64>,
    pub gpu_power_w: Option<f64>,
    /// Why there are no server figures, when there are none.
    pub missing: Option<String>,
}

/// One frame's numbers.
#[derive(Debug, Clone, Default)]
pub struct View {
    pub title: String,
    /// Requests done of total, when the run has a count.
    pub progress: Option<(u64, u64)>,
    pub elapsed_s: f64,
    /// Duration-bounded runs: the planned length.
    pub planned_s: Option<f64>,
    /// (label, p50 ms, p99 ms) rows: TTFT, TPOT, queue time …
    pub latency: Vec<(String, Option<f64>, Option<f64>)>,
    /// Output tokens/s, oldest first (the sparkline); the last is "now".
    pub tokens_per_s: Vec<u64>,
    pub requests_per_s: Option<f64>,
    pub done: u64,
    pub failed: u64,
    pub in_flight: Option<u64>,
    pub errors: Vec<(String, u64)>,
    pub server: ServerView,
    /// `--slo` so far: (objective, its figure now, standing) per objective.
    pub slo: Vec<(String, String, Health)>,
    /// Statements from the diagnosis rules (`watch`).
    pub findings: Vec<String>,
    pub footer: String,
}

fn color(h: Health) -> Color {
    match h {
        Health::Unknown => Color::Gray,
        Health::Good => Color::Green,
        Health::Warn => Color::Yellow,
        Health::Bad => Color::Red,
    }
}

fn ms(v: Option<f64>) -> String {
    match v {
        Some(v) if v >= 100.0 => format!("{v:.0} ms"),
        Some(v) => format!("{v:.1} ms"),
        None => "—".into(),
    }
}

/// A name, its value (coloured by health) and a note; 19 columns before the
/// note, so three panels fit an 80-column terminal with every figure.
fn row<'a>(name: &'a str, value: String, h: Health, note: &'a str) -> Line<'a> {
    Line::from(vec![
        Span::raw(format!("{name:<11}")),
        Span::styled(
            format!("{value:>8}"),
            Style::default().fg(color(h)).add_modifier(Modifier::BOLD),
        ),
        Span::styled(format!("  {note}"), Style::default().fg(Color::Gray)),
    ])
}

/// Seconds as `1m05s`.
fn clock(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// Draws the whole dashboard.
pub fn draw(f: &mut Frame, v: &View) {
    // 3 + 9 + 5 + ≥3 + 1 rows: fits 80×24 with the errors panel.
    let [top, middle, spark, bottom, footer] = Layout::vertical([
        Constraint::Length(3),
        Constraint::Length(9),
        Constraint::Length(5),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(f.area());
    progress(f, top, v);
    let [lat, thr, srv] = Layout::horizontal([
        Constraint::Percentage(33),
        Constraint::Percentage(30),
        Constraint::Percentage(37),
    ])
    .areas(middle);
    latency(f, lat, v);
    throughput(f, thr, v);
    server(f, srv, v);
    let now = v.tokens_per_s.last().copied().unwrap_or(0);
    let max = v.tokens_per_s.iter().copied().max().unwrap_or(0);
    f.render_widget(
        Sparkline::default()
            .block(
                Block::default()
                    .borders(Borders::ALL)
                    .title(format!(" output tokens/s — now {now}, peak {max} ")),
            )
            .data(v.tokens_per_s.iter().copied().map(Some).collect::<Vec<_>>())
            .style(Style::default().fg(Color::Cyan)),
        spark,
    );
    let mut lines: Vec<Line> = Vec::new();
    if v.errors.is_empty() {
        lines.push(Line::styled("no errors", Style::default().fg(Color::Green)));
    } else {
        lines.push(Line::from(
            v.errors
                .iter()
                .map(|(k, n)| Span::styled(format!("{k}: {n}   "), Style::default().fg(Color::Red)))
                .collect::<Vec<_>>(),
        ));
    }
    for s in &v.findings {
        lines.push(Line::styled(
            format!("• {s}"),
            Style::default().fg(Color::Yellow),
        ));
    }
    f.render_widget(
        Paragraph::new(lines)
            .wrap(ratatui::widgets::Wrap { trim: true })
            .block(
                Block::default()
                    .borders(Borders::ALL)
                    .title(" Errors and diagnosis "),
            ),
        bottom,
    );
    f.render_widget(
        Paragraph::new(v.footer.as_str()).style(Style::default().fg(Color::Gray)),
        footer,
    );
}

fn progress(f: &mut Frame, area: Rect, v: &View) {
    let block = Block::default()
        .borders(Borders::ALL)
        .title(format!(" {} ", v.title));
    let (ratio, label) = match (v.progress, v.planned_s) {
        (Some((done, total)), _) if total > 0 => {
            let r = (done as f64 / total as f64).clamp(0.0, 1.0);
            let eta = if done > 0 {
                clock(v.elapsed_s / done as f64 * (total - done.min(total)) as f64)
            } else {
                "—".into()
            };
            (
                r,
                format!(
                    "{done}/{total} requests · {} elapsed · ETA {eta}",
                    clock(v.elapsed_s)
                ),
            )
        }
        (_, Some(planned)) if planned > 0.0 => {
            let r = (v.elapsed_s / planned).clamp(0.0, 1.0);
            (
                r,
                format!(
                    "{} of {} · ETA {}",
                    clock(v.elapsed_s),
                    clock(planned),
                    clock(planned - v.elapsed_s)
                ),
            )
        }
        _ => (0.0, format!("{} elapsed", clock(v.elapsed_s))),
    };
    f.render_widget(
        Gauge::default()
            .block(block)
            .gauge_style(Style::default().fg(Color::Blue))
            .ratio(ratio)
            .label(label),
        area,
    );
}

fn latency(f: &mut Frame, area: Rect, v: &View) {
    let mut lines = vec![Line::styled(
        format!("{:<6}{:>9}{:>9}", "", "p50", "p99"),
        Style::default().fg(Color::Gray),
    )];
    for (name, p50, p99) in &v.latency {
        lines.push(Line::from(vec![
            Span::raw(format!("{name:<6}")),
            Span::styled(
                format!("{:>9}", ms(*p50)),
                Style::default().add_modifier(Modifier::BOLD),
            ),
            Span::styled(
                format!("{:>9}", ms(*p99)),
                Style::default().add_modifier(Modifier::BOLD),
            ),
        ]));
    }
    // Two lines an objective, so 80 columns keep its figure whole.
    for (objective, value, h) in &v.slo {
        lines.push(Line::raw(format!("SLO {objective}")));
        lines.push(Line::styled(
            format!("  {value}"),
            Style::default().fg(color(*h)).add_modifier(Modifier::BOLD),
        ));
    }
    f.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(" Latency ")),
        area,
    );
}

fn throughput(f: &mut Frame, area: Rect, v: &View) {
    let now = v.tokens_per_s.last().copied().unwrap_or(0);
    let mut lines = vec![row("tokens/s", now.to_string(), Health::Unknown, "")];
    if let Some(r) = v.requests_per_s {
        lines.push(row("requests/s", format!("{r:.2}"), Health::Unknown, ""));
    }
    if v.done > 0 || v.failed > 0 {
        lines.push(row("done", v.done.to_string(), Health::Unknown, ""));
        lines.push(row(
            "failed",
            v.failed.to_string(),
            health::failures(v.failed, v.done.max(1)),
            "",
        ));
    }
    if let Some(n) = v.in_flight {
        lines.push(row("in flight", n.to_string(), Health::Unknown, ""));
    }
    f.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(" Throughput ")),
        area,
    );
}

fn server(f: &mut Frame, area: Rect, v: &View) {
    let s = &v.server;
    let title = format!(
        " Server{} ",
        s.kind
            .as_ref()
            .map(|k| format!(": {k}"))
            .unwrap_or_default()
    );
    let mut lines = Vec::new();
    if let Some(why) = &s.missing {
        lines.push(Line::styled(why.clone(), Style::default().fg(Color::Gray)));
    }
    if let Some(r) = s.running {
        lines.push(row("running", format!("{r:.0}"), Health::Unknown, ""));
    }
    if let Some(w) = s.waiting {
        lines.push(row(
            "waiting",
            format!("{w:.0}"),
            health::waiting(w),
            if w > 0.0 { "queueing" } else { "" },
        ));
    }
    if let Some(q) = s.queue_time_ms {
        lines.push(row(
            "queue time",
            ms(Some(q)),
            Health::Unknown,
            "mean, last interval",
        ));
    }
    if let Some(k) = s.kv_usage {
        let (h, why) = health::kv_cache(k, s.preemptions.unwrap_or(0.0));
        lines.push(row("KV usage", format!("{:.0} %", k * 100.0), h, why));
    }
    if let Some(p) = s.preemptions {
        lines.push(row(
            "preemptions",
            format!("{p:.0}"),
            if p > 0.0 { Health::Bad } else { Health::Good },
            "",
        ));
    }
    if let Some(u) = s.gpu_util_pct {
        let (h, why) = health::gpu_util(u);
        lines.push(row("GPU util", format!("{u:.0} %"), h, why));
    }
    if let Some(p) = s.gpu_power_w {
        lines.push(row("GPU power", format!("{p:.0} W"), Health::Unknown, ""));
    }
    f.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(title)),
        area,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    fn lines(text: &str, width: u16) -> String {
        text.chars()
            .collect::<Vec<_>>()
            .chunks(width as usize)
            .map(|l| l.iter().collect::<String>())
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn panels_show_the_numbers() {
        panels_show_the_numbers_at(120, 32);
    }

    #[test]
    fn an_80_by_24_terminal_loses_no_figure() {
        panels_show_the_numbers_at(80, 24);
    }

    fn panels_show_the_numbers_at(width: u16, height: u16) {
        let mut t = Terminal::new(TestBackend::new(width, height)).unwrap();
        let v = View {
            title: "tokenscope bench".into(),
            progress: Some((50, 200)),
            elapsed_s: 10.0,
            latency: vec![("TTFT".into(), Some(52.0), Some(140.0))],
            tokens_per_s: vec![100, 200, 1234],
            done: 50,
            in_flight: Some(8),
            requests_per_s: Some(12.5),
            failed: 2,
            server: ServerView {
                kv_usage: Some(0.42),
                waiting: Some(3.0),
                running: Some(64.0),
                gpu_util_pct: Some(87.0),
                ..Default::default()
            },
            slo: vec![("ttft_p99≤200ms".into(), "140 ms ok".into(), Health::Good)],
            ..Default::default()
        };
        t.draw(|f| draw(f, &v)).unwrap();
        let text: String = t
            .backend()
            .buffer()
            .content()
            .iter()
            .map(|c| c.symbol())
            .collect();
        for want in [
            "50/200 requests",
            "ETA 30s",
            "52.0 ms",
            "140 ms",
            "now 1234",
            "42 %",
            "waiting",
            "12.50",
            "1234",
            "GPU util",
            "87 %",
            "running",
            "64",
            "SLO ttft_p99≤200ms",
            "140 ms ok",
        ] {
            assert!(
                text.contains(want),
                "{width}×{height}: missing {want}\n{}",
                lines(&text, width)
            );
        }
    }
}
