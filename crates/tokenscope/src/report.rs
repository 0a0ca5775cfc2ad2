//! `tokenscope report DIR`: re-renders a run or a sweep as HTML, Markdown,
//! CSV or the terminal summary; and the `report.html` that `bench`, `sweep`
//! and `sim plan` write at the end of each run.

use crate::cli::{ReportArgs, ReportFormat};
use crate::exit::Exit;
use crate::sweep;
use anyhow::Context;
use std::path::{Path, PathBuf};
use tokenscope_report::run_dir::{Report, Run, Sweep};
use tokenscope_report::{export, html, markdown, terminal};

fn write(path: PathBuf, text: &str) -> anyhow::Result<PathBuf> {
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Writes `DIR/report.html` for a run or sweep directory.
pub fn write_html(dir: &Path) -> anyhow::Result<PathBuf> {
    let page = match Report::read(dir)? {
        Report::Run(run) => html::run_page(&run),
        Report::Sweep(s) => html::sweep_page(&s),
    };
    write(dir.join("report.html"), &page)
}

/// `report.html` at the end of a run: a failure to render is a warning, never
/// a lost run.
pub fn write_html_after_run(dir: &Path, quiet: bool) {
    match write_html(dir) {
        Ok(path) if !quiet => eprintln!("tokenscope: report {}", path.display()),
        Ok(_) => {}
        Err(e) => eprintln!("tokenscope: warning: no report.html: {e:#}"),
    }
}

pub fn run(args: ReportArgs) -> anyhow::Result<Exit> {
    let dir = &args.dir;
    let mut report = Report::read(dir).map_err(|e| Exit::usage(e.to_string()))?;
    // A sweep re-reported against other objectives or another SLO.
    if let Report::Sweep(s) = &mut report {
        if args.slo.is_some() || args.series.target_load.is_some() || args.objectives_given() {
            let points = sweep::read_series(dir)?;
            s.analysis = sweep::analyse(&points, &args.output(), &args.series);
            if let Some(slo) = &args.slo {
                eprintln!(
                    "tokenscope report: re-judged against --slo {} from each point's requests (sweep.json is unchanged)",
                    slo.describe()
                );
            }
        }
    }
    // A run re-judged against another SLO, by the same rule as when it ran.
    if let (Report::Run(run), Some(slo)) = (&mut report, &args.slo) {
        let measured = tokenscope_core::metrics::measure(&run.records, Some(slo), None);
        run.results.slo = measured.slo;
        run.results.throughput.goodput_requests_per_s = measured.throughput.goodput_requests_per_s;
        run.results.throughput.goodput_output_tokens_per_s =
            measured.throughput.goodput_output_tokens_per_s;
        eprintln!(
            "tokenscope report: re-judged against --slo {} from requests.jsonl (results.json is unchanged)",
            slo.describe()
        );
    }
    match (args.format, &report) {
        (ReportFormat::Html, Report::Run(run)) => {
            done(write(out(&args, "report.html"), &html::run_page(run))?)
        }
        (ReportFormat::Html, Report::Sweep(s)) => {
            done(write(out(&args, "report.html"), &html::sweep_page(s))?)
        }
        (ReportFormat::Md, _) => {
            let text = match &report {
                Report::Run(run) => markdown::run(&run.results),
                Report::Sweep(s) => markdown::sweep(s),
            };
            match &args.out {
                Some(path) => done(write(path.clone(), &text)?),
                None => print!("{text}"),
            }
        }
        (ReportFormat::Csv, Report::Run(run)) => done(write(
            out(&args, "requests.csv"),
            &export::requests_csv(run)?,
        )?),
        (ReportFormat::Csv, Report::Sweep(s)) => {
            done(write(out(&args, "sweep.csv"), &export::sweep_csv(s)?)?)
        }
        (ReportFormat::Terminal, Report::Run(run)) => print!("{}", terminal::summary(&run.results)),
        (ReportFormat::Terminal, Report::Sweep(s)) => print_sweep(s),
    }
    Ok(Exit::Success)
}

fn out(args: &ReportArgs, name: &str) -> PathBuf {
    args.out.clone().unwrap_or_else(|| args.dir.join(name))
}

fn done(path: PathBuf) {
    println!("{}", path.display());
}

fn print_sweep(s: &Sweep) {
    let labelled: Vec<(String, tokenscope_core::results::RunResults)> = s
        .points
        .iter()
        .map(|p| (p.point.clone(), p.results.clone()))
        .collect();
    print!("{}", terminal::series_table(&labelled));
    print!("{}", terminal::analysis(&s.analysis));
}

/// Reads a run directory for `compare`.
pub fn read_run(dir: &Path) -> anyhow::Result<Run> {
    Run::read(dir).map_err(|e| Exit::usage(e.to_string()))
}
