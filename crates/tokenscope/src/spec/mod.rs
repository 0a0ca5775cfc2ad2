//! The run specification: everything one run needs to know, built once from
//! the flags (with `--config` already merged in) before any request is sent.
//!
//! The flags are never changed after they are read: a shard's part of the
//! load, the built-in engine's price and the files of the workload are
//! worked out here, into a [`RunSpec`] the run pipeline only reads.

pub mod pricing;
pub mod records;
pub mod shard;
pub mod workload;

use crate::cli::{
    BenchArgs, BuiltinChoice, ClientArgs, GpuSource, MetricsArgs, OutputArgs, RequestArgs,
    TargetArgs,
};
use crate::exit::Exit;
use crate::warnings::Warning;
use serde_json::json;
use shard::ShardSpec;
use tokenscope_load::runner::RunPlan;
use workload::Load;

/// One run, as specified.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// The server (`--url`, `--api`, `--model`); no URL: the built-in one.
    pub target: TargetArgs,
    pub builtin: BuiltinChoice,
    /// How each request is made.
    pub request: RequestArgs,
    /// This process's load: the whole run's, or a shard's part of it, with
    /// its dataset and tokenizer read.
    pub load: Load,
    /// What to send and when, built from `load`.
    pub plan: RunPlan,
    /// Where results go and how they are judged and priced.
    pub output: OutputArgs,
    /// What is read beside the load: none on shards past 0, whose server
    /// and GPUs shard 0 reads.
    pub metrics: MetricsArgs,
    pub client: ClientArgs,
    /// `Some` for one shard of a sharded run.
    pub shard: Option<ShardSpec>,
    /// The settings `results.json` records as `config`.
    pub config: serde_json::Value,
}

impl RunSpec {
    /// The spec of the run `args` describe. The workload's files are read
    /// here unless `args` already carries them (a sweep's points share
    /// one reading); `quiet` keeps what is said about them off stderr.
    pub fn build(args: BenchArgs) -> anyhow::Result<RunSpec> {
        let quiet = args.output.quiet || args.output.json;
        let load = Load::read(args.load.clone(), quiet)?;
        RunSpec::with_load(args, load)
    }

    /// The spec of the run `args` describe over a load whose files are read
    /// already (a sweep's point: `load` replaces `args.load`).
    pub fn with_load(mut args: BenchArgs, mut load: Load) -> anyhow::Result<RunSpec> {
        pricing::price_builtin(&mut args);
        let BenchArgs {
            target,
            load: _,
            request,
            mut metrics,
            output,
            client,
            shard,
            builtin,
        } = args;
        let shard = match shard.resolve().map_err(Exit::usage)? {
            None => None,
            Some(part) => {
                let whole = run_config(&load, &load.plan(), &request, &output);
                part.apply(&mut load).map_err(Exit::usage)?;
                // Shards past 0 leave the server's metrics and the GPUs to
                // shard 0, so the server is not scraped N times.
                if part.index > 0 {
                    metrics.no_metrics = true;
                    metrics.metrics_urls.clear();
                    metrics.gpu = GpuSource::None;
                }
                Some(ShardSpec {
                    shard: part,
                    whole,
                    start_at: shard.start_at,
                })
            }
        };
        let plan = load.plan();
        let config = run_config(&load, &plan, &request, &output);
        Ok(RunSpec {
            target,
            builtin,
            request,
            load,
            plan,
            output,
            metrics,
            client,
            shard,
            config,
        })
    }

    /// The doubts this run's set-up raises: an SLO that the requests sent
    /// cannot judge on their own.
    pub fn warnings(&self) -> Vec<Warning> {
        let mut out = Vec::new();
        if let (Some(slo), Some(n)) = (&self.output.slo, self.plan.requests) {
            out.extend(crate::warnings::slo_sample_size(slo, n));
        }
        out
    }

    /// Whether nothing but the results document (or nothing at all) may be
    /// said on the terminal.
    pub fn quiet(&self) -> bool {
        self.output.quiet || self.output.json
    }
}

/// The settings a run records: its load (this shard's part, for a shard)
/// and how it asked.
fn run_config(
    load: &Load,
    plan: &RunPlan,
    request: &RequestArgs,
    output: &OutputArgs,
) -> serde_json::Value {
    workload::merge(
        load.config_json(plan, output),
        json!({
            "ignore_eos": request.ignore_eos,
            "stream": !request.no_stream,
            "audio_chunk_ms": request.audio_chunk_ms,
            "audio_pace": request.audio_pace,
            "system_prompt": request.system_prompt,
            "temperature": request.temperature,
            "reasoning_parser": request.reasoning_parser.name(),
            "extra_body_keys": request.extra_body.as_ref().map(|m| m.keys().cloned().collect::<Vec<_>>()),
            "headers": request.headers.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
            "api_key_env": request.api_key_env,
            "timeout_s": request.timeout.as_secs_f64(),
            "idle_timeout_s": request.idle_timeout.as_secs_f64(),
            "batch_size": (request.batch_size > 1).then_some(request.batch_size),
            "response_format": request.response_format.as_ref().map(|f| f.label()),
            "tools": (request.tools.is_some() || request.tool_choice.is_some()).then(|| json!({
                "offered": request.tools.as_ref().map(|t| t.len()),
                "choice": request.tool_choice.as_ref().map_or("auto", |c| c.label()),
            })),
            "grade": request.grade.as_ref().map(|g| g.label()),
            "keep_text": request.keep_text.then_some(true),
            "request_id_header": request.request_id_header,
            "classes": (!request.classes.is_empty()).then(|| request.classes.iter().map(|c| json!({
                "name": c.name,
                "share": c.share,
                "priority": c.priority,
                "headers": c.headers.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
                "slo": c.slo,
            })).collect::<Vec<_>>()),
            "trace_context": request.trace_context.then_some(true),
            "cancel": request.cancel.zip(request.cancel_after).map(|(share, after)| json!({
                "share": share,
                "after": after.label(),
                "in_latency": request.abandoned_in_latency,
            })),
            "lora": (!request.lora.is_empty()).then(|| json!({
                "adapters": request.lora,
                "assignment": request.lora_assignment.to_string(),
            })),
        }),
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Argv {
        #[command(flatten)]
        bench: BenchArgs,
    }

    /// `bench`'s flags as a command line would give them.
    pub(crate) fn bench_args(flags: &str) -> BenchArgs {
        let argv = std::iter::once("bench").chain(flags.split_whitespace());
        Argv::try_parse_from(argv).expect("valid flags").bench
    }

    #[test]
    fn the_plan_is_built_once_from_the_flags() {
        let spec = RunSpec::build(bench_args(
            "--url http://h:1 --concurrency 8 --requests 40 --input-tokens 64 --quiet",
        ))
        .unwrap();
        assert_eq!(spec.plan.requests, Some(40));
        assert_eq!(spec.plan.pattern.max_in_flight(), Some(8));
        assert_eq!(spec.config["load"]["concurrency"], 8);
        assert_eq!(spec.config["input_tokens"], "64");
        assert!(spec.shard.is_none());
        assert!(spec.warnings().is_empty());
    }

    #[test]
    fn a_shard_is_part_of_the_spec_and_leaves_the_metrics_to_shard_0() {
        let flags = "--url http://h:1 --concurrency 10 --requests 101 --shard 1/4 --quiet";
        let spec = RunSpec::build(bench_args(flags)).unwrap();
        let shard = spec.shard.as_ref().expect("a shard");
        assert_eq!((shard.shard.index, shard.shard.count), (1, 4));
        // Its part: 10 = 3+3+2+2, 101 = 26+25+25+25.
        assert_eq!(spec.plan.pattern.max_in_flight(), Some(3));
        assert_eq!(spec.plan.requests, Some(25));
        assert_eq!(shard.whole["load"]["concurrency"], 10);
        assert_eq!(spec.config["load"]["concurrency"], 3);
        assert!(spec.metrics.no_metrics && spec.metrics.metrics_urls.is_empty());
        let first = RunSpec::build(bench_args(&flags.replace("1/4", "0/4"))).unwrap();
        assert!(!first.metrics.no_metrics, "shard 0 reads the server");
        assert_eq!(first.plan.requests, Some(26));
    }

    #[test]
    fn a_shard_that_would_get_nothing_is_a_usage_error() {
        let err =
            RunSpec::build(bench_args("--url http://h:1 --concurrency 2 --shard 3/4")).unwrap_err();
        assert!(err.to_string().contains("cannot be split"), "{err}");
    }

    #[test]
    fn the_doubts_of_a_set_up_are_warnings_with_advice() {
        let flags = "--url http://h:1 --rate 8 --arrival constant --requests 200 --shard 0/2 --slo ttft_p99=1s";
        let spec = RunSpec::build(bench_args(flags)).unwrap();
        let kinds: Vec<_> = spec.warnings().iter().map(|w| w.kind()).collect();
        assert_eq!(kinds, ["slo_sample_size"], "constant shards add up too");
        // The shard walks the whole schedule, every second arrival of it.
        let share = spec.plan.share.unwrap();
        assert_eq!((share.index, share.count, share.rate), (0, 2, 8.0));
        assert_eq!(spec.config["load"]["rate"], 4.0, "its own rate");
    }

    #[test]
    fn the_builtin_engine_is_priced_and_a_url_is_not() {
        let builtin = RunSpec::build(bench_args("--quiet")).unwrap();
        assert_eq!(
            builtin.output.gpu_type.as_deref(),
            Some(pricing::BUILTIN_GPU)
        );
        assert!(builtin.config["gpu_price_source"].is_string());
        let remote = RunSpec::build(bench_args("--url http://h:1 --quiet")).unwrap();
        assert!(remote.output.gpu_type.is_none());
        let exact = RunSpec::build(bench_args("--builtin exact --quiet")).unwrap();
        assert!(
            exact.output.gpu_type.is_none(),
            "the exact server models no GPU"
        );
    }
}
