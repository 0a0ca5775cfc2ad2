//! `tokenscope sim plan` and `sim list`: the engine on a virtual clock.

use crate::cli::{PlanArgs, Sweep};
use crate::engine::{engine_config, plan_load, read_replay};
use crate::exit::Exit;
use crate::run::collect::RunFacts;
use crate::spec::workload::Load;
use anyhow::Context;
use serde_json::{json, Value};
use std::path::Path;
use tokenscope_core::record::RequestRecord;
use tokenscope_core::results::{self, RunResults, Server};
use tokenscope_core::stats::Distribution;
use tokenscope_history::Kind;
use tokenscope_load::recorder::Recorded;
use tokenscope_sim::engine::EngineConfig;
use tokenscope_sim::plan::{simulate_into, EngineSummary, PlanLoad, Sample};

/// What the simulated engine was, for `results.json`.
fn deployment_json(
    cfg: &EngineConfig,
    fleet: tokenscope_sim::router::Fleet,
    summary: &EngineSummary,
) -> serde_json::Value {
    json!({
        "engine": format!("tokenscope-sim ({})", cfg.engine.describe()),
        "engine_rules": cfg.engine.name(),
        "num_scheduler_steps": cfg.num_scheduler_steps,
        "replicas": fleet.replicas,
        "router": (fleet.replicas > 1 || fleet.autoscale.is_some()).then(|| fleet.router.name()),
        "disaggregate": fleet.disaggregate.map(|d| json!({
            "prefill": d.prefill,
            "decode": d.decode,
            "kv_transfer_gbs": d.transfer_gbs,
        })),
        "model": cfg.model.name,
        "gpu": cfg.gpu.name,
        "tp": cfg.tp,
        "weights": cfg.weights,
        "kv_dtype": cfg.kv_dtype,
        "gpu_memory_utilization": cfg.gpu_memory_utilization,
        "prefix_caching": cfg.prefix_caching,
        "efficiency": cfg.efficiency,
        "engine_summary": summary,
    })
}

/// `--spec-decode`: the rule, what it should give, where it stops paying
/// (at the load's mean context), and what the simulation counted.
fn spec_json(
    cfg: &EngineConfig,
    summary: &EngineSummary,
    load: &Load,
) -> Option<serde_json::Value> {
    let spec = cfg.spec.as_ref()?;
    let counted = summary.spec_decode.as_ref()?;
    let context = load.flags.input_tokens.mean() + load.flags.output_tokens.mean() / 2.0;
    let cost = cfg.cost_model();
    let max_batch = cfg.limits().max_num_seqs;
    let per_token_ms = |b: u32| {
        let with = tokenscope_sim::engine::cost::decode_time_per_token(&cost, b, context);
        let plain = tokenscope_sim::engine::cost::CostModel {
            spec: None,
            ..cost.clone()
        };
        let without = tokenscope_sim::engine::cost::decode_time_per_token(&plain, b, context);
        json!({"batch": b, "with_ms": with * 1e3, "without_ms": without * 1e3})
    };
    let batches = [1, 8, 32, 128, 512].into_iter().filter(|&b| b <= max_batch);
    let time_per_token: Vec<_> = batches.map(per_token_ms).collect();
    Some(json!({
        "rule": spec.describe(),
        "k": spec.k,
        "acceptance_rate_given": spec.acceptance_rate(),
        "mean_accepted_length_expected": spec.tokens_per_step(),
        "acceptance_rate": counted.acceptance_rate(),
        "mean_accepted_length": counted.mean_accepted_length(),
        "acceptance_by_position": counted.acceptance_by_position(spec.k),
        "break_even_batch": tokenscope_sim::engine::cost::break_even_batch(&cost, context, max_batch),
        "break_even_context_tokens": context,
        "time_per_token": time_per_token,
    }))
}

/// The engine's queue time of a measured request, µs.
fn queue_us(r: &RequestRecord) -> Option<f64> {
    let ms = r.server_timings.as_ref()?["queue_ms"].as_f64();
    ms.filter(|_| !r.warmup).map(|q| q * 1e3)
}

/// The engine's own metrics over the run in the shape a real server's
/// telemetry gives them (`ServerSummary`: `running`, `waiting`, `kv_usage`,
/// `queue_time`, …), so every reader of `server.metrics` reads a plan as it
/// reads a measured run; plus the engine's `steps` and `busy_s`.
fn server_metrics(
    queue: &Distribution,
    s: &[Sample],
    summary: &EngineSummary,
) -> serde_json::Value {
    use tokenscope_telemetry::window::{GaugeSummary, HistSummary, ServerSummary};
    let gauge = |f: &dyn Fn(&Sample) -> f64| {
        GaugeSummary::of(&s.iter().map(|x| (x.t_s, f(x))).collect::<Vec<_>>())
    };
    let (window_s, generated) = match (s.first(), s.last()) {
        (Some(a), Some(b)) => (
            b.t_s - a.t_s,
            Some((b.output_tokens_total - a.output_tokens_total) as f64),
        ),
        _ => (0.0, None),
    };
    let m = ServerSummary {
        scrapes: s.len(),
        window_s,
        running: gauge(&|x| x.state.running as f64),
        waiting: gauge(&|x| x.state.waiting as f64),
        kv_usage: gauge(&|x| x.state.kv_usage),
        kv_capacity_tokens: Some(summary.kv_capacity_tokens as f64),
        generation_tokens: generated,
        generation_tokens_per_s: generated.filter(|_| window_s > 0.0).map(|g| g / window_s),
        prefix_cache_hit_rate: (summary.prefix_cache_queries_tokens > 0).then(|| {
            summary.prefix_cache_hits_tokens as f64 / summary.prefix_cache_queries_tokens as f64
        }),
        preemptions: Some(summary.preemptions_total as f64),
        // The engine's own queue times, exact (no buckets).
        queue_time: queue.summary(1e-3).map(|q| HistSummary {
            count: q.count as f64,
            mean_ms: q.mean,
            first_bucket_ms: 0.0,
            p50_ms: q.p50,
            p90_ms: q.p90,
            p99_ms: q.p99,
        }),
        ..ServerSummary::default()
    };
    let mut v = serde_json::to_value(m).expect("a summary serializes");
    if let Some(s) = &summary.spec_decode {
        // As a real server's telemetry reads it (tokenscope_telemetry::spec_decode).
        v["spec_decode"] = json!({
            "drafts": s.drafts,
            "draft_tokens": s.draft_tokens,
            "accepted_tokens": s.accepted_tokens,
            "acceptance_rate": s.acceptance_rate(),
            "mean_accepted_length": s.mean_accepted_length(),
            "acceptance_by_position": s.acceptance_by_position(s.accepted_per_position.len().max(1) as u32),
        });
    }
    v["steps"] = json!(summary.steps);
    v["busy_s"] = json!(summary.busy_s);
    v
}

/// An autoscaled fleet is paid for by its GPU-seconds (each replica from
/// its start, loading included, to its retirement), not by a fixed count
/// over the window: the cost's dollars scale to them.
fn pay_replica_seconds(c: &mut tokenscope_core::cost::Cost, gpu_seconds: f64, window_s: f64) {
    let counted = c.gpus as f64 * window_s;
    if counted <= 0.0 {
        return;
    }
    let k = gpu_seconds / counted;
    c.window_usd *= k;
    for v in c.per_unit_mut() {
        *v *= k;
    }
}

/// The replicas, their routing and, with `--autoscale`, the policy with the
/// fleet's bounds and a new replica's start-up.
fn fleet(cfg: &EngineConfig, args: &PlanArgs) -> anyhow::Result<tokenscope_sim::router::Fleet> {
    let (min, max) = args.replicas;
    let autoscale = match args.autoscale {
        None if min != max => {
            return Err(Exit::usage(format!(
                "--replicas {min}..{max} is a range for --autoscale; without it give a count"
            )))
        }
        None => None,
        Some(policy) => {
            let startup_s = match args.startup.as_str() {
                "auto" => tokenscope_sim::autoscale::startup_s(cfg, args.load_bandwidth, 40.0),
                d => humantime::parse_duration(d)
                    .map_err(|e| Exit::usage(format!("--startup `{d}`: {e} (auto or a duration)")))?
                    .as_secs_f64(),
            };
            Some(tokenscope_sim::autoscale::Policy {
                min,
                max,
                startup_s,
                ..policy
            })
        }
    };
    let disaggregate =
        args.disaggregate
            .map(|(prefill, decode)| tokenscope_sim::router::Disaggregation {
                prefill,
                decode,
                transfer_gbs: args.kv_transfer_gbs,
            });
    Ok(tokenscope_sim::router::Fleet {
        replicas: disaggregate.map_or(min, |d| d.prefill + d.decode),
        router: args.router,
        autoscale,
        disaggregate,
    })
}

/// The config, with the reasoning simulated (`--reasoning-tokens`) when given.
fn with_reasoning(mut config: serde_json::Value, args: &PlanArgs) -> serde_json::Value {
    if let (Some(spec), Some(obj)) = (args.reasoning_tokens, config.as_object_mut()) {
        obj.insert("reasoning_tokens".into(), json!(spec.to_string()));
    }
    config
}

/// The config, with the images planned (`--images`) and the encoder that charged them.
fn with_images(
    mut config: serde_json::Value,
    images: Option<&tokenscope_sim::plan::Images>,
) -> serde_json::Value {
    if let Some(m) = images {
        let sizes: Vec<String> = m.sizes.iter().map(|(w, h)| format!("{w}x{h}")).collect();
        config["media"] = json!({
            "images": m.per_request,
            "image_sizes": sizes,
            "encoder": m.encoder.name,
            "encoder_params_b": m.encoder.params_b,
            "encoder_source": m.encoder.source,
        });
    }
    config
}

/// A closed loop of fixed lengths simulated with its users' other start
/// (together or staggered): both TTFTs, and a warning when they differ
/// (`tokenscope_sim::phase`). `None` for any other load.
fn phase_check(
    cfg: &EngineConfig,
    load: &PlanLoad,
    measured: &tokenscope_core::metrics::Measured,
) -> anyhow::Result<Option<tokenscope_sim::phase::PhaseCheck>> {
    let (Some(ttft), Some(e2e)) = (&measured.latency.ttft_ms, &measured.latency.e2e_ms) else {
        return Ok(None);
    };
    let lifetime_s = e2e.mean / 1e3 + 2.0 * load.network_delay_s;
    tokenscope_sim::phase::check(cfg, load, ttft, lifetime_s).map_err(Exit::usage)
}

/// Simulates the load into `dir`'s records: each written and counted as the
/// simulation finishes it, and dropped, so only the requests in flight are
/// held. The writer's queue is bounded, so a simulation never runs ahead of
/// the disk. Returns the records' figures, the engine's samples and summary,
/// and the requests' queue times.
fn simulate_to(
    dir: &Path,
    cfg: &EngineConfig,
    plan_load: &PlanLoad,
    args: &PlanArgs,
    duration: Option<std::time::Duration>,
) -> anyhow::Result<(Recorded, Vec<Sample>, EngineSummary, Distribution)> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating the run directory {}", dir.display()))?;
    let path = dir.join(crate::run_dir::REQUESTS);
    let (hand_back, written) = std::sync::mpsc::sync_channel(256 / BATCH);
    let options = tokenscope_load::recorder::Options {
        hand_back: Some(hand_back),
        rotation: args.output.records.rotation(duration),
        windows: (args.output.records.window_us(duration)).map(|us| (us, args.output.slo.clone())),
        // A few hundred records (~1 MB of 256-token ones) in batches of
        // `BATCH`: enough that the writer never waits, few enough not to be
        // the plan's peak memory.
        bounded: Some(256 / BATCH),
        ..Default::default()
    };
    let recorder = tokenscope_load::recorder::Recorder::create_with(
        &path,
        tokio_util::sync::CancellationToken::new(),
        crate::spec::pricing::aggregator(&args.output),
        options,
    )?;
    let sink = recorder.sink();
    let mut queue = Distribution::new();
    let mut batch = Vec::with_capacity(BATCH);
    let simulated = simulate_into(cfg, plan_load, 1.0, &mut |r| {
        if let Some(q) = queue_us(&r) {
            queue.record(q);
        }
        batch.push(r);
        // Written batches are freed here, where they were made.
        written.try_iter().for_each(drop);
        if batch.len() == BATCH {
            sink.record_all(std::mem::replace(&mut batch, Vec::with_capacity(BATCH)));
        }
    });
    sink.record_all(batch);
    drop(sink);
    let recorded = recorder.finish();
    let (samples, summary) = simulated.map_err(Exit::usage)?;
    if let Some(e) = recorded.error {
        return Err(anyhow::Error::new(e).context("writing the simulated run's records"));
    }
    Ok((recorded, samples, summary, queue))
}

/// Records handed to the writer at once: one wake of its thread for this many.
const BATCH: usize = 64;

/// Simulates one load (replaying `trace` lengths when given) and writes its run directory.
fn one_point(
    cfg: &EngineConfig,
    args: &PlanArgs,
    load: &Load,
    trace: Option<Vec<(u64, u64)>>,
    dir: &Path,
) -> anyhow::Result<RunResults> {
    let plan = load.plan();
    let plan_load = PlanLoad {
        trace,
        fleet: fleet(cfg, args)?,
        reasoning: args.reasoning_tokens,
        images: crate::engine::plan_images(&cfg.model, &args.load)?,
        ..plan_load(load, args.network_delay)
    };
    let started_at = crate::run_dir::now_rfc3339();
    let (recorded, samples, summary, queue) =
        simulate_to(dir, cfg, &plan_load, args, plan.duration)?;
    let mut figures = recorded.figures;
    let measured = figures.finish();
    let phase = phase_check(cfg, &plan_load, &measured)?;
    crate::run_dir::write_jsonl(&dir.join(crate::run_dir::TIMESERIES), &samples)?;
    let metrics = server_metrics(&queue, &samples, &summary);
    let kv = kv_json(&summary, &metrics);
    let facts = RunFacts {
        started_at,
        partial: false,
        target: results::Target {
            url: format!("sim://{}@{}x{}", cfg.model.name, cfg.tp, cfg.gpu.name),
            api: "simulated".into(),
            model: cfg.model.name.clone(),
            builtin: Some(format!("simulated on a virtual clock: {}", cfg.describe())),
        },
        config: with_images(
            with_reasoning(load.config_json(&plan, &args.output), args),
            plan_load.images.as_ref(),
        ),
        server: Server {
            kind: Some("tokenscope-sim".into()),
            version: Some(format!("tokenscope-sim {}", env!("CARGO_PKG_VERSION"))),
            metrics: Some(metrics),
        },
        kv_cache: Some(kv),
        client_cpu: None,
        client: results::ClientUsage {
            peak_rss_mb: tokenscope_load::cpu::peak_rss_bytes().map(|b| b as f64 / 1e6),
            ..Default::default()
        },
        extra_findings: crate::run::collect::rotation_findings(&recorded.rotated)
            .into_iter()
            .chain(phase.as_ref().and_then(|p| p.finding()))
            .collect(),
        simulated: Some(simulated_json(
            cfg,
            &plan_load,
            &summary,
            load,
            phase.as_ref(),
        )),
        telemetry: None,
    };
    let mut results = crate::run::collect::assemble(measured, facts);
    results.records = crate::run::collect::segments_of(&recorded.rotated);
    if let (Some(a), Some(c)) = (&summary.autoscale, results.efficiency.cost.as_mut()) {
        pay_replica_seconds(
            c,
            a.replica_seconds * cfg.tp as f64,
            results.window.duration_s,
        );
    }
    crate::run_dir::write_results(dir, &results)?;
    crate::run_dir::write_html_of(dir, results.clone(), figures, true);
    Ok(results)
}

/// The results' `kv_cache`: the simulated cache's size and how full it ran.
fn kv_json(summary: &EngineSummary, metrics: &Value) -> Value {
    json!({
        "capacity_tokens": summary.kv_capacity_tokens,
        "block_size": summary.block_size,
        "usage_mean": metrics["kv_usage"]["mean"],
        "usage_max": metrics["kv_usage"]["max"],
        "preemptions": summary.preemptions_total,
    })
}

/// The results' `simulated`: the deployment, and with them the speculative
/// decoder's figures and both starts' TTFTs.
fn simulated_json(
    cfg: &EngineConfig,
    plan_load: &PlanLoad,
    summary: &EngineSummary,
    load: &Load,
    phase: Option<&tokenscope_sim::phase::PhaseCheck>,
) -> Value {
    let mut d = deployment_json(cfg, plan_load.fleet, summary);
    if let Some(s) = spec_json(cfg, summary, load) {
        d["spec_decode"] = s;
    }
    if let Some(p) = phase {
        d["phase"] = json!(p);
    }
    d
}

/// A list in `--concurrency` or `--rate` is a series, run as `--sweep`
/// runs it (it ran its first load alone, silently, before 2026-12-06).
fn listed_series(load: &crate::cli::LoadArgs) -> Option<Sweep> {
    if load.concurrency.len() > 1 {
        return Some(Sweep::Concurrency(load.concurrency.clone()));
    }
    (load.rate.len() > 1).then(|| Sweep::Rate(load.rate.clone()))
}

pub fn run(mut args: PlanArgs) -> anyhow::Result<Exit> {
    crate::spec::records::refuse_forever(
        args.load.duration,
        "a simulation on a virtual clock needs an end",
    )?;
    crate::spec::pricing::check_output(&args.output)?;
    if args.load.audio > 0 {
        return Err(Exit::usage(
            "sim plan does not model audio yet: --audio is for bench (the built-in engine charges it)".into(),
        ));
    }
    if let Some(series) = listed_series(&args.load) {
        if args.sweep.is_some() {
            return Err(Exit::usage(
                "--sweep and a list in --concurrency or --rate: give the series once".into(),
            ));
        }
        args.sweep = Some(series);
    }
    if args.load.workflow.is_some() || args.load.trace_file().is_some() {
        return Err(Exit::usage(
            "sim plan does not plan workflows yet (--workflow, --replay-trace FILE): run them with `bench` against `sim serve`, the same engine on a real clock".into(),
        ));
    }
    let mut cfg = engine_config(&args.engine)?;
    crate::engine::plan_images(&cfg.model, &args.load)?;
    let work = Load::read_for_plan(args.load.clone(), args.output.quiet || args.output.json)?;
    // A fixed fleet's GPUs are all its replicas'; an autoscaled one is paid
    // by its GPU-seconds (pay_replica_seconds), per replica here.
    let per_fleet = match (args.autoscale.is_some(), args.disaggregate) {
        (true, _) => 1,
        (false, Some((prefill, decode))) => prefill + decode,
        (false, None) => args.replicas.0,
    };
    crate::spec::pricing::price_known_gpu(&mut args.output, &cfg.gpu.name, cfg.tp * per_fleet);
    if let Some(p) = &args.profile {
        crate::engine::apply_profile(&mut cfg, p, args.engine.catalogue.as_deref())?;
    }
    let dir = args
        .output
        .out
        .clone()
        .unwrap_or_else(crate::run_dir::default_out_dir);
    crate::run_dir::claim_out_dir(&dir, args.output.force)?;
    if let Some(run) = &args.replay {
        let replay = read_replay(run, &args.load)?;
        let replayed = work.with_flags(replay.load);
        let results = one_point(&cfg, &args, &replayed, Some(replay.trace), &dir)?;
        return crate::run::finish::conclude(Kind::Plan, &results, &dir, &args.output);
    }
    let Some(sweep) = args.sweep.clone() else {
        let results = one_point(&cfg, &args, &work, None, &dir)?;
        return crate::run::finish::conclude(Kind::Plan, &results, &dir, &args.output);
    };
    let levels: Vec<crate::series::Level> = match &sweep {
        Sweep::Concurrency(levels) => levels
            .iter()
            .map(|&c| crate::series::closed(&work, c))
            .collect(),
        Sweep::Rate(rates) => rates
            .iter()
            .map(|&r| crate::series::open(&work, r))
            .collect(),
    };
    if !args.output.json {
        crate::outln!("simulated: {}", cfg.describe());
    }
    let mut points = Vec::new();
    for (i, level) in levels.into_iter().enumerate() {
        let point_dir = dir.join(format!("point-{i:02}"));
        let results = one_point(&cfg, &args, &level.work, None, &point_dir)?;
        points.push(crate::run_dir::Done {
            label: level.label,
            load: level.load,
            results,
            dir: Some(point_dir),
        });
    }
    crate::series::finish_series(&dir, points, &args.output, &args.series, Vec::new())
}
