//! `tokenscope bench`: one load test. The flags become a run spec, the
//! spec runs through the run pipeline, and the run is finished: summary,
//! history, exit code.

use crate::cli::BenchArgs;
use crate::exit::Exit;
use crate::run::builtin::with_runtime;
use crate::run::finish;
use crate::spec::RunSpec;
use tokenscope_core::slo::SloMetric;
use tokenscope_history::Kind;

pub fn run(args: BenchArgs) -> anyhow::Result<Exit> {
    check(&args)?;
    let spec = RunSpec::build(args)?;
    for warning in spec.warnings() {
        warning.say(spec.output.quiet);
    }
    let (target, client) = (spec.target.clone(), spec.client.clone());
    with_runtime(&target, spec.builtin, &client, |site| async move {
        let (results, dir) = crate::self_check::then_run(&spec, &site).await?;
        finish::conclude(Kind::Bench, &results, &dir, &spec.output)
    })
}

/// What a single run cannot be asked: a series of loads, or a streaming
/// figure of answers that come whole.
fn check(args: &BenchArgs) -> anyhow::Result<()> {
    if args.load.concurrency.len() > 1 || args.load.rate.len() > 1 {
        return Err(Exit::usage(
            "--concurrency and --rate take one value in bench; `tokenscope sweep` runs a series"
                .into(),
        ));
    }
    let no_stream = args.request.no_stream;
    if let Some(slo) = args.output.slo.as_ref().filter(|_| no_stream) {
        if let Some(o) = slo.objectives.iter().find(|o| o.metric != SloMetric::E2e) {
            return Err(Exit::usage(format!(
                "--slo {}_{}: --no-stream answers come whole, so only e2e can be judged",
                o.metric.name(),
                o.stat
            )));
        }
    }
    Ok(())
}
