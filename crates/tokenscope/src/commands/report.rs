//! `tokenscope report DIR`: re-renders a run or a sweep as HTML, Markdown,
//! CSV or the terminal summary; and the `report.html` that `bench`, `sweep`
//! and `sim plan` write at the end of each run.

use crate::cli::{ReportArgs, ReportFormat};
use crate::exit::Exit;
use crate::run_dir::write_file;
use crate::run_dir::{for_each_record, Report, Run, Sweep};
use anyhow::Context;
use std::path::{Path, PathBuf};
use tokenscope_report::{export, html, markdown, terminal};

/// A run killed before it wrote `results.json` (SIGKILL, a crash): its
/// figures rebuilt from the requests on disk, marked partial.
fn rebuild_killed_run(dir: &Path, output: &crate::cli::OutputArgs) -> anyhow::Result<Run> {
    let mut requests = crate::spec::pricing::aggregator(output);
    let n = for_each_record(dir, |r| requests.add(&r)).map_err(|e| Exit::usage(e.to_string()))?;
    let facts = crate::run::collect::RunFacts {
        started_at: "unknown (the run was killed before it wrote results.json)".into(),
        partial: true,
        target: tokenscope_core::results::Target {
            url: "unknown (killed run: rebuilt from requests.jsonl)".into(),
            api: "unknown".into(),
            model: "unknown".into(),
            builtin: None,
        },
        config: serde_json::json!({"rebuilt_from": "requests.jsonl"}),
        server: Default::default(),
        kv_cache: None,
        client_cpu: None,
        client: Default::default(),
        extra_findings: Vec::new(),
        simulated: None,
        telemetry: None,
    };
    let results = crate::run::collect::assemble(requests.finish(), facts);
    eprintln!(
        "tokenscope report: {} has no results.json (the run was killed): {n} requests rebuilt from requests.jsonl, marked partial; server metrics and settings are not known",
        dir.display(),
    );
    Ok(Run {
        dir: dir.into(),
        results,
        requests,
        timeseries: Vec::new(),
    })
}

pub fn run(mut args: ReportArgs) -> anyhow::Result<Exit> {
    // A peer's result (vLLM, AIPerf, GuideLLM) is read as a run directory.
    args.dir = crate::peer_results::resolve(&args.dir)?;
    let dir = &args.dir;
    let killed = crate::run_dir::holds_killed_run(dir);
    let mut report = if killed {
        Report::Run(Box::new(rebuild_killed_run(dir, &args.output())?))
    } else {
        Report::read(dir).map_err(|e| Exit::usage(e.to_string()))?
    };
    rejudge(&args, &mut report)?;
    write(&args, &report)?;
    Ok(Exit::Success)
}

/// The report in the format asked for: a file (its path said), or the
/// terminal's.
fn write(args: &ReportArgs, report: &Report) -> anyhow::Result<()> {
    let dir = &args.dir;
    match (args.format, report) {
        (ReportFormat::Html, Report::Run(run)) => done(write_file(
            out(args, crate::run_dir::REPORT),
            &html::run_page(run),
        )?),
        (ReportFormat::Html, Report::Sweep(s)) => done(write_file(
            out(args, crate::run_dir::REPORT),
            &html::sweep_page(s),
        )?),
        (ReportFormat::Md, _) => {
            let text = match report {
                Report::Run(run) => markdown::run(&run.results),
                Report::Sweep(s) => markdown::sweep(s),
            };
            match &args.out {
                Some(path) => done(write_file(path.clone(), &text)?),
                None => crate::output::to_stdout(&text),
            }
        }
        (ReportFormat::Csv, Report::Run(run)) => {
            let path = out(args, "requests.csv");
            let file = std::fs::File::create(&path)
                .with_context(|| format!("writing {}", path.display()))?;
            export::requests_csv(&run.dir, std::io::BufWriter::new(file))
                .with_context(|| format!("writing {}", path.display()))?;
            done(path)
        }
        (ReportFormat::Csv, Report::Sweep(s)) => {
            done(write_file(out(args, "sweep.csv"), &export::sweep_csv(s)?)?)
        }
        (ReportFormat::Terminal, Report::Run(run)) => {
            crate::output::to_stdout(&terminal::summary(&run.results))
        }
        (ReportFormat::Terminal, Report::Sweep(s)) => print_sweep(s),
        (ReportFormat::Vllm | ReportFormat::Aiperf | ReportFormat::Guidellm, Report::Run(run)) => {
            done(write_dialect(args, run)?)
        }
        (ReportFormat::Vllm | ReportFormat::Aiperf | ReportFormat::Guidellm, Report::Sweep(_)) => {
            return Err(Exit::usage(format!(
                "{}: a sweep; export each point's run directory ({}/<point>) instead",
                dir.display(),
                dir.display()
            )))
        }
    }
    Ok(())
}

/// A sweep re-reported against other objectives or another SLO, or a run
/// against another SLO (by the same rule as when it ran), from the
/// records; the files on disk are left as they are.
fn rejudge(args: &ReportArgs, report: &mut Report) -> anyhow::Result<()> {
    let dir = &args.dir;
    if let Report::Sweep(s) = report {
        if args.slo.is_some() || args.series.target_load.is_some() || args.objectives_given() {
            let points = crate::run_dir::read_series(dir)?;
            s.analysis = crate::series::analyse(&points, &args.output(), &args.series);
            if let Some(slo) = &args.slo {
                eprintln!(
                    "tokenscope report: re-judged against --slo {} from each point's requests (sweep.json is unchanged)",
                    slo.describe()
                );
            }
        }
    }
    if let (Report::Run(run), Some(slo)) = (report, &args.slo) {
        let mut again = tokenscope_core::metrics::Aggregator::new(Some(slo.clone()), None);
        for_each_record(dir, |r| again.add(&r)).map_err(|e| Exit::usage(e.to_string()))?;
        let measured = again.finish();
        run.results.slo = measured.slo;
        run.results.throughput.goodput_requests_per_s = measured.throughput.goodput_requests_per_s;
        run.results.throughput.goodput_output_tokens_per_s =
            measured.throughput.goodput_output_tokens_per_s;
        eprintln!(
            "tokenscope report: re-judged against --slo {} from requests.jsonl (results.json is unchanged)",
            slo.describe()
        );
    }
    Ok(())
}

/// A run in a peer tool's JSON dialect, under that tool's own file name
/// (AIPerf's per-request records beside its summary).
fn write_dialect(args: &ReportArgs, run: &Run) -> anyhow::Result<PathBuf> {
    use tokenscope_report::dialects::{aiperf, guidellm, samples, vllm};
    let samples = samples::read(&run.dir).map_err(|e| Exit::usage(e.to_string()))?;
    let (name, doc) = match args.format {
        ReportFormat::Vllm => ("vllm-result.json", vllm::export(&run.results, &samples)),
        ReportFormat::Aiperf => {
            let path =
                out(args, "profile_export_aiperf.json").with_file_name("profile_export.jsonl");
            let file =
                std::fs::File::create(&path).with_context(|| format!("{}", path.display()))?;
            aiperf::write_records(&run.results, &samples, std::io::BufWriter::new(file))
                .with_context(|| format!("{}", path.display()))?;
            (
                "profile_export_aiperf.json",
                aiperf::export(&run.results, &samples),
            )
        }
        _ => ("benchmarks.json", guidellm::export(&run.results, &samples)),
    };
    write_file(
        out(args, name),
        &(serde_json::to_string_pretty(&doc)? + "\n"),
    )
}

fn out(args: &ReportArgs, name: &str) -> PathBuf {
    args.out.clone().unwrap_or_else(|| args.dir.join(name))
}

fn done(path: PathBuf) {
    crate::output::to_stdout(&format!("{}\n", path.display()));
}

fn print_sweep(s: &Sweep) {
    let labelled: Vec<(String, tokenscope_core::results::RunResults)> = s
        .points
        .iter()
        .map(|p| (p.point.clone(), p.results.clone()))
        .collect();
    crate::output::to_stdout(&terminal::series(&labelled, &s.analysis));
}
