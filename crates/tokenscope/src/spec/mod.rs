//! The run specification: everything one run needs to know, built once from
//! the flags (with `--config` already merged in) before any request is sent.
//!
//! The flags are never changed after they are read: a shard's part of the
//! load, the built-in engine's price and the files of the workload are
//! worked out here, into a [`RunSpec`] the run pipeline only reads.

pub mod pricing;
pub mod shard;
pub mod workload;

use crate::cli::{
    BenchArgs, BuiltinChoice, ClientArgs, GpuSource, LoadArgs, MetricsArgs, OutputArgs,
    RequestArgs, TargetArgs,
};
use crate::exit::Exit;
use crate::warnings::Warning;
use serde_json::json;
use shard::ShardSpec;
use tokenscope_load::runner::RunPlan;
use tokenscope_workload::arrival::Process;

/// One run, as specified.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// The server (`--url`, `--api`, `--model`); no URL: the built-in one.
    pub target: TargetArgs,
    pub builtin: BuiltinChoice,
    /// How each request is made.
    pub request: RequestArgs,
    /// This process's load: the whole run's, or a shard's part of it, with
    /// its dataset and tokenizer loaded.
    pub load: LoadArgs,
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
    pub fn build(mut args: BenchArgs) -> anyhow::Result<RunSpec> {
        pricing::price_builtin(&mut args);
        let BenchArgs {
            target,
            mut load,
            request,
            mut metrics,
            output,
            client,
            shard,
            builtin,
        } = args;
        workload::load_workload_files(&mut load, output.quiet || output.json)?;
        let shard = match shard.resolve().map_err(Exit::usage)? {
            None => None,
            Some(part) => {
                let whole = run_config(&load, &request, &output);
                let arrival = (!load.rate.is_empty() && !matches!(load.arrival, Process::Poisson))
                    .then(|| load.arrival.to_string());
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
                    split_arrival: arrival,
                })
            }
        };
        let plan = workload::plan(&load);
        let config = run_config(&load, &request, &output);
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

    /// The doubts this run's set-up raises, in the order they are said:
    /// an arrival process that shards do not add up to, and an SLO that
    /// the requests sent cannot judge on their own.
    pub fn warnings(&self) -> Vec<Warning> {
        let mut out = Vec::new();
        if let Some(s) = &self.shard {
            if let Some(arrival) = &s.split_arrival {
                out.push(Warning::ArrivalSplit {
                    arrival: arrival.clone(),
                    shards: s.shard.count,
                });
            }
        }
        if let (Some(slo), Some(n)) = (&self.output.slo, self.plan.requests) {
            out.extend(crate::warnings::slo_sample_size(slo, n, false));
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
fn run_config(load: &LoadArgs, request: &RequestArgs, output: &OutputArgs) -> serde_json::Value {
    workload::merge(
        workload::config_json(load, &workload::plan(load), output),
        json!({
            "ignore_eos": request.ignore_eos,
            "stream": !request.no_stream,
            "system_prompt": request.system_prompt,
            "temperature": request.temperature,
            "extra_body_keys": request.extra_body.as_ref().map(|m| m.keys().cloned().collect::<Vec<_>>()),
            "headers": request.headers.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
            "api_key_env": request.api_key_env,
            "timeout_s": request.timeout.as_secs_f64(),
            "idle_timeout_s": request.idle_timeout.as_secs_f64(),
        }),
    )
}
