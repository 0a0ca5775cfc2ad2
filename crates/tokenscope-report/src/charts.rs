//! Charts as inline SVG (plotters' SVG backend): line and step charts,
//! scatter plots with labelled marks, histograms. Each function returns the
//! `<svg>` text, or `None` when there is nothing to draw, so a page shows a
//! note instead of an empty frame.

use plotters::coord::Shift;
use plotters::prelude::*;

/// Chart size in pixels.
const SIZE: (u32, u32) = (560, 300);

/// The palette (colour-blind safe: Okabe–Ito).
pub const PALETTE: [RGBColor; 6] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
];

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Line,
    Points,
    LineAndPoints,
}

/// One named series of (x, y) points.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub style: Style,
}

impl Series {
    pub fn line(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
            style: Style::Line,
        }
    }
}

/// A labelled point drawn over the series (the knee, a recommendation).
pub struct Mark {
    pub label: String,
    pub at: (f64, f64),
}

/// Axes: titles, and whether x is logarithmic (load levels 1, 2, 4 … 256).
pub struct Axes<'a> {
    pub title: &'a str,
    pub x: &'a str,
    pub y: &'a str,
    pub log_x: bool,
}

fn finite(series: &[Series]) -> impl Iterator<Item = (f64, f64)> + '_ {
    series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(|(x, y)| x.is_finite() && y.is_finite())
}

/// A range that plotters can draw: never empty, starting at 0 for y.
fn padded(lo: f64, hi: f64) -> (f64, f64) {
    if hi > lo {
        (lo, hi + (hi - lo) * 0.05)
    } else {
        (
            lo - 0.5_f64.max(lo.abs() * 0.1),
            hi + 0.5_f64.max(hi.abs() * 0.1),
        )
    }
}

/// A line/scatter chart of the series with the marks labelled. A log x axis
/// is drawn as log2 with the loads as labels (1, 2, 4 … 256).
pub fn xy(axes: &Axes, series: &[Series], marks: &[Mark]) -> Option<String> {
    let log = axes.log_x && finite(series).all(|(x, _)| x > 0.0);
    let tx = |x: f64| if log { x.log2() } else { x };
    let series: Vec<Series> = series
        .iter()
        .map(|s| Series {
            name: s.name.clone(),
            points: s.points.iter().map(|&(x, y)| (tx(x), y)).collect(),
            style: s.style,
        })
        .collect();
    // Marks at the same point share one label.
    let mut merged: Vec<Mark> = Vec::new();
    for m in marks {
        let at = (tx(m.at.0), m.at.1);
        match merged.iter_mut().find(|x| x.at == at) {
            Some(x) => x.label = format!("{}, {}", x.label, m.label),
            None => merged.push(Mark {
                label: m.label.clone(),
                at,
            }),
        }
    }
    let pts: Vec<(f64, f64)> = finite(&series).collect();
    if pts.is_empty() {
        return None;
    }
    let (x0, x1) = pts
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
            (a.min(p.0), b.max(p.0))
        });
    let y1 = pts.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
    let y0 = pts.iter().map(|p| p.1).fold(0.0, f64::min);
    let (y0, y1) = padded(y0, y1);
    let (a, b) = padded(x0, x1);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        let frame = Frame {
            axes,
            log,
            x: a..b,
            y: y0..y1,
        };
        draw(&root, &frame, &series, &merged).ok()?;
        root.present().ok()?;
    }
    Some(svg)
}

type DrawResult = Result<(), Box<dyn std::error::Error>>;

struct Frame<'a> {
    axes: &'a Axes<'a>,
    log: bool,
    x: std::ops::Range<f64>,
    y: std::ops::Range<f64>,
}

fn draw(
    root: &DrawingArea<SVGBackend, Shift>,
    frame: &Frame,
    series: &[Series],
    marks: &[Mark],
) -> DrawResult {
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(root)
        .caption(frame.axes.title, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(frame.x.clone(), frame.y.clone())?;
    let log = frame.log;
    let label_x = move |v: &f64| tick(if log { 2f64.powf(*v) } else { *v });
    let label_y = |v: &f64| tick(*v);
    let ticks = if log {
        ((frame.x.end - frame.x.start).ceil() as usize + 1).clamp(2, 12)
    } else {
        10
    };
    chart
        .configure_mesh()
        .x_desc(frame.axes.x)
        .y_desc(frame.axes.y)
        .x_labels(ticks)
        .x_label_formatter(&label_x)
        .y_label_formatter(&label_y)
        .light_line_style(RGBColor(235, 235, 235))
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect();
        if matches!(s.style, Style::Line | Style::LineAndPoints) {
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
                .label(s.name.clone())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color));
        }
        if matches!(s.style, Style::Points | Style::LineAndPoints) {
            let drawn =
                chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
            if s.style == Style::Points {
                drawn
                    .label(s.name.clone())
                    .legend(move |(x, y)| Circle::new((x + 8, y), 4, color.filled()));
            }
        }
    }
    let mid = (frame.x.start + frame.x.end) / 2.0;
    for m in marks {
        chart.draw_series(std::iter::once(Circle::new(m.at, 7, BLACK.stroke_width(2))))?;
        // Labels on the right half go to the left of their point, so they stay inside.
        let dx = if m.at.0 > mid {
            -(7 * m.label.chars().count() as i32) - 10
        } else {
            10
        };
        chart.draw_series(std::iter::once(
            EmptyElement::at(m.at)
                + Text::new(
                    m.label.clone(),
                    (dx, 6),
                    ("sans-serif", 12).into_font().color(&BLACK),
                ),
        ))?;
    }
    if series.len() > 1 || series.iter().any(|s| !s.name.is_empty()) {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(RGBColor(200, 200, 200))
            .position(SeriesLabelPosition::UpperLeft)
            .draw()?;
    }
    Ok(())
}

/// An axis label: about four significant digits, no trailing zeros
/// (plotters prints the float as it is, and a step of 0.1 gives
/// `8.299999999999999`).
fn tick(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return "0".into();
    }
    let decimals = (3 - v.abs().log10().floor() as i32).clamp(0, 6) as usize;
    let text = format!("{v:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// The empirical CDF of `values` as a step line.
/// The CDF of `values`, with a vertical line at each `(label, x)` in `limits`
/// (the SLO limits on this metric).
pub fn cdf(
    title: &str,
    unit: &str,
    share: &str,
    values: &[f64],
    limits: &[(String, f64)],
) -> Option<String> {
    let pairs: Vec<(f64, f64)> = values.iter().map(|&v| (v, 1.0)).collect();
    cdf_weighted(title, unit, share, &pairs, limits)
}

/// The CDF of `(value, weight)` pairs: each value stands for `weight` samples
/// (a histogram's bucket, or an ITL gap split over several tokens).
pub fn cdf_weighted(
    title: &str,
    unit: &str,
    share: &str,
    pairs: &[(f64, f64)],
    limits: &[(String, f64)],
) -> Option<String> {
    let mut v: Vec<(f64, f64)> = pairs
        .iter()
        .copied()
        .filter(|(x, w)| x.is_finite() && *w > 0.0)
        .collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total: f64 = v.iter().map(|p| p.1).sum();
    // At most ~400 steps: enough for the eye, small for the page.
    let stride = (v.len() / 400).max(1);
    let mut pts = vec![(v[0].0, 0.0)];
    let mut cum = 0.0;
    for (i, (x, w)) in v.iter().enumerate() {
        cum += w;
        if i % stride == 0 {
            pts.push((*x, cum / total));
        }
    }
    let top = v[v.len() - 1].0;
    pts.push((top, 1.0));
    let name = if limits.is_empty() { "" } else { "measured" };
    let mut series = vec![Series::line(name, pts)];
    // A limit far right of the data would squash it: named, not drawn.
    for (label, x) in limits.iter().filter(|(_, x)| x.is_finite()) {
        if *x <= 3.0 * top {
            series.push(Series::line(label, vec![(*x, 0.0), (*x, 1.0)]));
        } else {
            series.push(Series::line(
                format!("{label} (far right of the data)"),
                Vec::new(),
            ));
        }
    }
    xy(
        &Axes {
            title,
            x: unit,
            y: share,
            log_x: false,
        },
        &series,
        &[],
    )
}

/// A histogram of `values` in up to 40 equal bins (weights: `weights`, or 1 each).
pub fn histogram(
    title: &str,
    unit: &str,
    values: &[f64],
    weights: Option<&[f64]>,
) -> Option<String> {
    let vals: Vec<(f64, f64)> = values
        .iter()
        .enumerate()
        .map(|(i, &v)| (v, weights.map_or(1.0, |w| w[i])))
        .filter(|(v, _)| v.is_finite())
        .collect();
    if vals.is_empty() {
        return None;
    }
    let lo = vals.iter().map(|v| v.0).fold(f64::INFINITY, f64::min);
    let hi = vals.iter().map(|v| v.0).fold(f64::NEG_INFINITY, f64::max);
    let bins = 40usize;
    let width = if hi > lo {
        (hi - lo) / bins as f64
    } else {
        1.0
    };
    let mut counts = vec![0.0; bins];
    for (v, w) in &vals {
        let i = (((v - lo) / width) as usize).min(bins - 1);
        counts[i] += w;
    }
    let top = counts.iter().copied().fold(0.0, f64::max);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        let drawn: DrawResult = (|| {
            root.fill(&WHITE)?;
            let mut chart = ChartBuilder::on(&root)
                .caption(title, ("sans-serif", 16))
                .margin(10)
                .x_label_area_size(36)
                .y_label_area_size(64)
                .build_cartesian_2d(lo..lo + width * bins as f64, 0.0..top * 1.05)?;
            chart
                .configure_mesh()
                .x_desc(unit)
                .y_desc(if weights.is_some() {
                    "tokens"
                } else {
                    "requests"
                })
                .x_label_formatter(&|v| tick(*v))
                .y_label_formatter(&|v| tick(*v))
                .light_line_style(RGBColor(235, 235, 235))
                .draw()?;
            chart.draw_series(counts.iter().enumerate().filter(|(_, c)| **c > 0.0).map(
                |(i, &c)| {
                    let x = lo + i as f64 * width;
                    Rectangle::new([(x, 0.0), (x + width, c)], PALETTE[0].mix(0.75).filled())
                },
            ))?;
            Ok(())
        })();
        drawn.ok()?;
        root.present().ok()?;
    }
    Some(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_short() {
        assert_eq!(tick(8.299_999_999_999_999), "8.3");
        assert_eq!(tick(2.499_999_999_9), "2.5");
        assert_eq!(tick(5000.0), "5000");
        assert_eq!(tick(0.000_12), "0.00012");
        assert_eq!(tick(0.0), "0");
        assert_eq!(tick(-1.5), "-1.5");
        assert_eq!(tick(123_456.0), "123456");
    }

    #[test]
    fn slo_limits_are_lines_on_the_cdf_unless_far_right_of_the_data() {
        let data = [3.0, 1.0, 2.0, 5.0];
        let limit = |label: &str, x: f64| [(label.to_string(), x)];
        let near = cdf(
            "TTFT",
            "ms",
            "share",
            &data,
            &limit("SLO ttft_p99 ≤ 4 ms", 4.0),
        )
        .unwrap();
        assert!(near.contains("SLO ttft_p99 ≤ 4 ms"));
        let far = cdf(
            "TTFT",
            "ms",
            "share",
            &data,
            &limit("SLO ttft_p99 ≤ 5 s", 5000.0),
        )
        .unwrap();
        assert!(far.contains("(far right of the data)"));
        assert!(
            !far.contains(">5000<"),
            "the axis is not stretched to the limit"
        );
        // The same legend in both; only the near limit draws its line.
        assert_eq!(
            near.matches("<polyline").count(),
            far.matches("<polyline").count() + 1
        );
    }

    #[test]
    fn charts_are_svg_with_their_data_and_empty_input_draws_nothing() {
        let svg = cdf("TTFT", "ms", "share", &[3.0, 1.0, 2.0, 5.0], &[]).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("<polyline"),
            "{svg}"
        );
        let h = histogram("TTFT", "ms", &[1.0, 1.0, 2.0, 9.0], None).unwrap();
        assert!(h.contains("<rect"));
        assert!(cdf("x", "ms", "share", &[], &[]).is_none());
        assert!(cdf("x", "ms", "share", &[f64::NAN], &[]).is_none());
        // A single value and a log axis still draw.
        let one = xy(
            &Axes {
                title: "t",
                x: "load",
                y: "tok/s",
                log_x: true,
            },
            &[Series {
                name: "a".into(),
                points: vec![(4.0, 10.0)],
                style: Style::Points,
            }],
            &[Mark {
                label: "knee".into(),
                at: (4.0, 10.0),
            }],
        )
        .unwrap();
        assert!(one.contains("<circle") && one.contains("knee"));
    }
}
