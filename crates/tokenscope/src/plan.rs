//! `tokenscope sim plan` and `sim list`: the engine on a virtual clock.

use crate::cli::{CalibrateArgs, EngineArgs, ListArgs, PlanArgs, Sweep};
use crate::exit::Exit;
use crate::outcome::{self, RunFacts};
use anyhow::Context;
use serde_json::json;
use std::io::Write;
use std::path::Path;
use tokenscope_core::record::RequestRecord;
use tokenscope_core::results::{self, RunResults, Server};
use tokenscope_core::stats::Distribution;
use tokenscope_history::Kind;
use tokenscope_sim::calibrate::{CalibrationRun, Profile, Targets};
use tokenscope_sim::engine::catalogue::Catalogue;
use tokenscope_sim::engine::EngineConfig;
use tokenscope_sim::plan::{simulate_into, EngineSummary, PlanLoad, Sample};

pub fn catalogue(path: Option<&Path>) -> anyhow::Result<Catalogue> {
    match path {
        Some(p) => Catalogue::with_file(p).map_err(|e| Exit::usage(format!("--catalogue: {e}"))),
        None => Ok(Catalogue::builtin()),
    }
}

/// The deployment the flags describe; an unknown name or one that does not fit is a usage error.
pub fn engine_config(a: &EngineArgs) -> anyhow::Result<EngineConfig> {
    let cat = catalogue(a.catalogue.as_deref())?;
    let model = cat
        .model(&a.model)
        .map_err(|e| Exit::usage(format!("--model: {e}")))?;
    let gpu = cat
        .gpu(&a.gpu)
        .map_err(|e| Exit::usage(format!("--gpu: {e}")))?;
    let mut cfg = EngineConfig::new(model, gpu);
    cfg.tp = a.tp;
    cfg.weights = a.dtype;
    cfg.kv_dtype = a.kv_dtype;
    cfg.gpu_memory_utilization = a.gpu_memory_utilization;
    cfg.max_num_seqs = a.max_num_seqs;
    cfg.max_num_batched_tokens = a.max_num_batched_tokens;
    cfg.prefix_caching = !a.no_prefix_caching;
    cfg.engine = a.engine;
    cfg.efficiency.step_overhead_s = a.engine.step_overhead_s();
    cfg.num_scheduler_steps = a.num_scheduler_steps;
    cfg.kv_blocks().map_err(Exit::usage)?;
    Ok(cfg)
}

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
    v["steps"] = json!(summary.steps);
    v["busy_s"] = json!(summary.busy_s);
    v
}

fn write_jsonl<T: serde::Serialize>(path: &Path, items: &[T]) -> anyhow::Result<()> {
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut w = std::io::BufWriter::new(file);
    for item in items {
        serde_json::to_writer(&mut w, item)?;
        w.write_all(b"\n")?;
    }
    w.flush()
        .with_context(|| format!("writing {}", path.display()))
}

/// The virtual-clock load the flags describe.
pub fn plan_load(load: &crate::cli::LoadArgs, network_delay: std::time::Duration) -> PlanLoad {
    let plan = outcome::plan(load);
    PlanLoad {
        pattern: plan.pattern,
        requests: plan.requests,
        duration_s: plan.duration.map(|d| d.as_secs_f64()),
        warmup: plan.warmup,
        ramp_up_s: plan.ramp_up.map(|d| d.as_secs_f64()),
        workload: plan.workload.clone(),
        seed: plan.seed,
        network_delay_s: network_delay.as_secs_f64(),
        sessions: plan.sessions,
        fleet: Default::default(),
        trace: None,
    }
}

/// A measured run to replay: its load flags, its requests' token counts, and its medians.
struct Replay {
    load: crate::cli::LoadArgs,
    trace: Vec<(u64, u64)>,
    measured: Targets,
}

fn read_replay(dir: &Path, defaults: &crate::cli::LoadArgs) -> anyhow::Result<Replay> {
    let bad = |what: &str| Exit::usage(format!("{}: {what}", dir.display()));
    let text = std::fs::read_to_string(dir.join("results.json"))
        .map_err(|e| bad(&format!("no results.json ({e})")))?;
    let r: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad(&format!("results.json is not JSON ({e})")))?;
    let c = &r["config"];
    let mut load = defaults.clone();
    match c["load"]["mode"].as_str() {
        Some("closed") => {
            load.concurrency = c["load"]["concurrency"].as_u64().into_iter().collect();
            load.rate = Vec::new();
        }
        Some("open") => {
            load.rate = c["load"]["rate"].as_f64().into_iter().collect();
            load.concurrency = Vec::new();
            if let Some(a) = c["load"]["arrival"].as_str() {
                load.arrival = a.parse().map_err(|e: String| bad(&e))?;
            }
        }
        _ => return Err(bad("results.json has no config.load.mode")),
    }
    load.requests = c["requests"].as_u64();
    load.duration = c["duration_s"]
        .as_f64()
        .map(std::time::Duration::from_secs_f64);
    load.warmup = c["warmup"].as_u64().unwrap_or(0);
    load.ramp_up = c["ramp_up_s"]
        .as_f64()
        .map(std::time::Duration::from_secs_f64);
    load.seed = c["seed"].as_u64().unwrap_or(0);
    let lines = std::fs::read_to_string(dir.join("requests.jsonl"))
        .map_err(|e| bad(&format!("no requests.jsonl ({e})")))?;
    let mut recs: Vec<tokenscope_core::record::RequestRecord> = lines
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .map_err(|e| bad(&format!("requests.jsonl: {e}")))?;
    recs.sort_by_key(|r| r.id);
    let trace = recs
        .iter()
        .map(|r| (r.input_tokens.unwrap_or(1), r.output_tokens.max(1)))
        .collect();
    let l = &r["latency"];
    let ms = |path: &str, stat: &str| l[path][stat].as_f64().unwrap_or(0.0);
    let measured = Targets {
        ttft_p50_ms: ms("ttft_ms", "p50"),
        ttft_p90_ms: ms("ttft_ms", "p90"),
        tpot_p50_ms: ms("tpot_ms", "p50"),
        e2e_p50_ms: ms("e2e_ms", "p50"),
    };
    Ok(Replay {
        load,
        trace,
        measured,
    })
}

pub fn read_profile(path: &Path) -> anyhow::Result<Profile> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Exit::usage(format!("--profile {}: {e}", path.display())))?;
    serde_json::from_str(&text)
        .map_err(|e| Exit::usage(format!("--profile {}: not a profile ({e})", path.display())))
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
    for v in [
        &mut c.usd_per_1k_output_tokens,
        &mut c.usd_per_1m_output_tokens,
        &mut c.usd_per_1k_total_tokens,
        &mut c.usd_per_1k_good_output_tokens,
    ]
    .into_iter()
    .flatten()
    {
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

/// Simulates one load (replaying `trace` lengths when given) and writes its run directory.
fn one_point(
    cfg: &EngineConfig,
    args: &PlanArgs,
    load: &crate::cli::LoadArgs,
    trace: Option<Vec<(u64, u64)>>,
    dir: &Path,
) -> anyhow::Result<RunResults> {
    let plan = outcome::plan(load);
    let plan_load = PlanLoad {
        trace,
        fleet: fleet(cfg, args)?,
        ..plan_load(load, args.network_delay)
    };
    let started_at = outcome::now_rfc3339();
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating the run directory {}", dir.display()))?;
    // Each record is written and counted as the simulation finishes it, and
    // dropped: only the requests in flight are held.
    let path = dir.join("requests.jsonl");
    let file =
        std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    let mut lines = std::io::BufWriter::new(file);
    let (mut figures, mut queue) = (outcome::aggregator(&args.output), Distribution::new());
    let mut write_error = None;
    let (samples, summary) = simulate_into(cfg, &plan_load, 1.0, &mut |r| {
        if write_error.is_none() {
            let line = serde_json::to_writer(&mut lines, &r).map_err(std::io::Error::from);
            write_error = line.and_then(|()| lines.write_all(b"\n")).err();
        }
        if let Some(q) = queue_us(&r) {
            queue.record(q);
        }
        figures.add(&r);
    })
    .map_err(Exit::usage)?;
    if let Some(e) = write_error {
        return Err(anyhow::Error::new(e).context(format!("writing {}", path.display())));
    }
    lines
        .flush()
        .with_context(|| format!("writing {}", path.display()))?;
    write_jsonl(&dir.join("timeseries.jsonl"), &samples)?;
    let metrics = server_metrics(&queue, &samples, &summary);
    let kv = json!({
        "capacity_tokens": summary.kv_capacity_tokens,
        "block_size": summary.block_size,
        "usage_mean": metrics["kv_usage"]["mean"],
        "usage_max": metrics["kv_usage"]["max"],
        "preemptions": summary.preemptions_total,
    });
    let facts = RunFacts {
        started_at,
        partial: false,
        target: results::Target {
            url: format!("sim://{}@{}x{}", cfg.model.name, cfg.tp, cfg.gpu.name),
            api: "simulated".into(),
            model: cfg.model.name.clone(),
            builtin: Some(format!("simulated on a virtual clock: {}", cfg.describe())),
        },
        config: outcome::config_json(load, &plan, &args.output),
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
        extra_findings: Vec::new(),
        simulated: Some(deployment_json(cfg, plan_load.fleet, &summary)),
        telemetry: None,
    };
    let mut results = outcome::assemble(figures.finish(), facts);
    if let (Some(a), Some(c)) = (&summary.autoscale, results.efficiency.cost.as_mut()) {
        pay_replica_seconds(
            c,
            a.replica_seconds * cfg.tp as f64,
            results.window.duration_s,
        );
    }
    outcome::write_results(dir, &results)?;
    crate::report::write_html_of(dir, results.clone(), figures, true);
    Ok(results)
}

pub fn run(mut args: PlanArgs) -> anyhow::Result<Exit> {
    outcome::check_output(&args.output)?;
    outcome::load_workload_files(&mut args.load, args.output.quiet || args.output.json)?;
    let mut cfg = engine_config(&args.engine)?;
    // A fixed fleet's GPUs are all its replicas'; an autoscaled one is paid
    // by its GPU-seconds (pay_replica_seconds), per replica here.
    let per_fleet = match (args.autoscale.is_some(), args.disaggregate) {
        (true, _) => 1,
        (false, Some((prefill, decode))) => prefill + decode,
        (false, None) => args.replicas.0,
    };
    outcome::price_known_gpu(&mut args.output, &cfg.gpu.name, cfg.tp * per_fleet);
    if let Some(p) = &args.profile {
        cfg.efficiency = read_profile(p)?.efficiency;
    }
    let dir = args
        .output
        .out
        .clone()
        .unwrap_or_else(outcome::default_out_dir);
    outcome::claim_out_dir(&dir, args.output.force)?;
    if let Some(run) = &args.replay {
        let replay = read_replay(run, &args.load)?;
        let results = one_point(&cfg, &args, &replay.load, Some(replay.trace), &dir)?;
        return finish_one(&results, &args, &dir);
    }
    let Some(sweep) = args.sweep.clone() else {
        let results = one_point(&cfg, &args, &args.load, None, &dir)?;
        return finish_one(&results, &args, &dir);
    };
    let levels: Vec<crate::sweep::Level> = match &sweep {
        Sweep::Concurrency(levels) => levels
            .iter()
            .map(|&c| crate::sweep::closed(&args.load, c))
            .collect(),
        Sweep::Rate(rates) => rates
            .iter()
            .map(|&r| crate::sweep::open(&args.load, r))
            .collect(),
    };
    if !args.output.json {
        println!("simulated: {}", cfg.describe());
    }
    let mut points = Vec::new();
    for (i, level) in levels.into_iter().enumerate() {
        let point_dir = dir.join(format!("point-{i:02}"));
        let results = one_point(&cfg, &args, &level.args, None, &point_dir)?;
        points.push(crate::sweep::Done {
            label: level.label,
            load: level.load,
            results,
            dir: Some(point_dir),
        });
    }
    crate::sweep::finish_series(&dir, points, &args.output, &args.series)
}

/// One simulated run: its summary, its record in the history, its exit code.
fn finish_one(results: &RunResults, args: &PlanArgs, dir: &Path) -> anyhow::Result<Exit> {
    outcome::print(results, &args.output, dir)?;
    let history = &args.output.history;
    crate::history::record_run(Kind::Plan, results, dir, history, args.output.json);
    Ok(outcome::exit_code(results))
}

/// `tokenscope sim calibrate RUN_DIR`: fits the efficiency factors and writes a profile.
/// Fewer measured requests than this in a calibration run draw a warning:
/// a llama.cpp run of 10 had two stalls as its p90 and the fit missed its
/// own p50 by 20 %.
const CALIBRATION_MIN_REQUESTS: u64 = 20;

pub fn calibrate(args: CalibrateArgs) -> anyhow::Result<Exit> {
    let cfg = engine_config(&args.engine)?;
    // The load flags' defaults, as clap gives them to a command line without any.
    #[derive(clap::Parser)]
    struct Defaults {
        #[command(flatten)]
        load: crate::cli::LoadArgs,
    }
    let defaults = <Defaults as clap::Parser>::try_parse_from(["defaults"])
        .expect("the load flags parse with none given")
        .load;
    let mut runs = Vec::new();
    for dir in &args.run_dirs {
        let replay = read_replay(dir, &defaults)?;
        let measured = replay
            .load
            .requests
            .unwrap_or((replay.trace.len() as u64).saturating_sub(replay.load.warmup));
        if measured < CALIBRATION_MIN_REQUESTS {
            eprintln!(
                "tokenscope sim calibrate: warning: {} has {measured} measured requests; the fit matches TTFT p90, which with fewer than {CALIBRATION_MIN_REQUESTS} rests on one or two of them, so one stall moves the whole fit",
                dir.display()
            );
        }
        let load = PlanLoad {
            trace: Some(replay.trace),
            ..plan_load(&replay.load, args.network_delay)
        };
        runs.push((load, replay.measured));
    }
    let (efficiency, predicted, residual) =
        tokenscope_sim::calibrate::calibrate(&cfg, &runs).map_err(Exit::usage)?;
    let profile = Profile {
        model: cfg.model.name.clone(),
        gpu: cfg.gpu.name.clone(),
        tp: cfg.tp,
        efficiency,
        runs: args
            .run_dirs
            .iter()
            .zip(runs.iter().zip(&predicted))
            .map(|(dir, ((_, measured), predicted))| CalibrationRun {
                run_dir: dir.display().to_string(),
                measured: *measured,
                predicted: *predicted,
            })
            .collect(),
        residual,
    };
    let path = args
        .out
        .clone()
        .unwrap_or_else(|| args.run_dirs[0].join("profile.json"));
    std::fs::write(&path, serde_json::to_string_pretty(&profile)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    println!(
        "calibrated {} on {} × {}",
        cfg.model.name, cfg.tp, cfg.gpu.name
    );
    for run in &profile.runs {
        let (m, p) = (&run.measured, &run.predicted);
        println!("{}\n                 measured   predicted", run.run_dir);
        for (name, a, b) in [
            ("TTFT p50 (ms)", m.ttft_p50_ms, p.ttft_p50_ms),
            ("TTFT p90 (ms)", m.ttft_p90_ms, p.ttft_p90_ms),
            ("TPOT p50 (ms)", m.tpot_p50_ms, p.tpot_p50_ms),
            ("E2E p50 (ms)", m.e2e_p50_ms, p.e2e_p50_ms),
        ] {
            println!(
                "  {name:<14} {a:>9.2} {b:>11.2}   ({:+.1} %)",
                (b - a) / a.max(1e-9) * 100.0
            );
        }
    }
    println!(
        "fitted: compute efficiency {:.3}, memory efficiency {:.3}, step overhead {:.2} ms, per sequence {:.3} ms (each layer's kernels {:.0} µs a step, not fitted)",
        efficiency.compute,
        efficiency.memory,
        efficiency.step_overhead_s * 1e3,
        efficiency.per_sequence_s * 1e3,
        efficiency.per_layer_s * 1e6
    );
    println!("profile: {}", path.display());
    let pinned = tokenscope_sim::calibrate::at_bounds(&efficiency);
    for p in &pinned {
        eprintln!("tokenscope sim calibrate: warning: {p}");
    }
    if !pinned.is_empty() {
        eprintln!(
            "tokenscope sim calibrate: warning: the fit reached the model's limits: this run contradicts the engine model for {} on {} (a CPU server, another GPU, or costs the model lacks); predictions from this profile are not to be trusted",
            cfg.model.name, cfg.gpu.name
        );
    }
    Ok(Exit::Success)
}

pub fn list(args: ListArgs) -> anyhow::Result<Exit> {
    let cat = catalogue(args.catalogue.as_deref())?;
    println!("GPUs (dense peaks)      memory   bandwidth   BF16 TFLOPS   FP8 TFLOPS");
    for g in &cat.gpus {
        let fp8 = g.fp8_tflops.map_or("—".to_string(), |f| format!("{f:.0}"));
        println!(
            "  {:<20} {:>6.0} GiB {:>7.0} GB/s {:>12.0} {:>12}",
            g.name, g.memory_gib, g.bandwidth_gbs, g.bf16_tflops, fp8
        );
    }
    println!(
        "\nmodels                 params (active)  layers  hidden  heads/kv  KV bytes/token (BF16)"
    );
    for m in &cat.models {
        println!(
            "  {:<20} {:>6.1}B ({:>5.1}B) {:>7} {:>7} {:>5}/{:<4} {:>12.0}",
            m.name,
            m.params_b,
            m.active_params_b,
            m.layers,
            m.hidden,
            m.heads,
            m.kv_heads,
            m.kv_elements_per_token(1) * 2.0
        );
    }
    Ok(Exit::Success)
}
