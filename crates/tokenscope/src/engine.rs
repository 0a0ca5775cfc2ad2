//! The simulated engine as the flags configure it: the catalogue of models
//! and GPUs, one deployment (`--model --gpu --tp --dtype …`), a calibrated
//! profile, and the load `sim plan` and `sim size` put on it.

use crate::cli::EngineArgs;
use crate::exit::Exit;
use crate::spec::workload::Load;
use std::path::Path;
use tokenscope_sim::calibrate::Profile;
use tokenscope_sim::calibrate::Targets;
use tokenscope_sim::engine::catalogue::Catalogue;
use tokenscope_sim::engine::EngineConfig;
use tokenscope_sim::plan::PlanLoad;

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
    cfg.priority_scheduling = a.scheduling_policy == "priority";
    cfg.prefix_caching = !a.no_prefix_caching;
    cfg.set_engine(a.engine);
    cfg.num_scheduler_steps = a.num_scheduler_steps;
    if let Some(text) = &a.spec_decode {
        cfg.spec = Some(parse_spec(text, a.catalogue.as_deref())?);
    }
    cfg.check_tp()
        .map_err(|e| Exit::usage(format!("--tp: {e}")))?;
    cfg.kv_blocks().map_err(Exit::usage)?;
    Ok(cfg)
}

/// `--profile`: the fitted efficiency, and the speculation the profile's
/// runs counted unless `--spec-decode` says otherwise.
pub fn apply_profile(
    cfg: &mut EngineConfig,
    path: &Path,
    catalogue_file: Option<&Path>,
) -> anyhow::Result<()> {
    let profile = read_profile(path)?;
    cfg.efficiency = profile.efficiency;
    if let (None, Some(text)) = (&cfg.spec, &profile.spec_decode) {
        let spec = parse_spec(text, catalogue_file).map_err(|e| {
            Exit::usage(format!(
                "--profile {}: its spec_decode: {e}",
                path.display()
            ))
        })?;
        cfg.spec = Some(spec);
    }
    Ok(())
}

/// A `--spec-decode` value, its draft model looked up in the catalogue.
pub fn parse_spec(
    text: &str,
    catalogue_file: Option<&Path>,
) -> anyhow::Result<tokenscope_sim::engine::spec::SpecDecode> {
    let cat = catalogue(catalogue_file)?;
    tokenscope_sim::engine::spec::SpecDecode::parse(text, |name| {
        cat.model(name).map_err(|e| e.to_string())
    })
    .map_err(|e| Exit::usage(format!("--spec-decode: {e}")))
}

pub fn read_profile(path: &Path) -> anyhow::Result<Profile> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Exit::usage(format!("--profile {}: {e}", path.display())))?;
    serde_json::from_str(&text)
        .map_err(|e| Exit::usage(format!("--profile {}: not a profile ({e})", path.display())))
}

/// The virtual-clock load the flags describe.
pub fn plan_load(load: &Load, network_delay: std::time::Duration) -> PlanLoad {
    let plan = load.plan();
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
        reasoning: None,
        images: None,
    }
}

/// `--images N --image-size WxH…` on the virtual clock: the model's
/// vision encoder charges them; a text-only model is refused.
pub fn plan_images(
    model: &tokenscope_sim::engine::catalogue::Model,
    load: &crate::cli::LoadArgs,
) -> anyhow::Result<Option<tokenscope_sim::plan::Images>> {
    if load.images == 0 {
        return Ok(None);
    }
    let encoder = model
        .vision
        .as_deref()
        .and_then(tokenscope_sim::vision::Encoder::named)
        .ok_or_else(|| {
            let vlms: Vec<String> = tokenscope_sim::engine::catalogue::models()
                .into_iter()
                .filter(|m| m.vision.is_some())
                .map(|m| m.name)
                .collect();
            Exit::usage(format!(
                "--images: {} has no vision encoder in the catalogue; a vision-language model takes them ({})",
                model.name,
                vlms.join(", ")
            ))
        })?;
    Ok(Some(tokenscope_sim::plan::Images {
        per_request: load.images,
        sizes: load
            .image_size
            .iter()
            .map(|s| (s.width, s.height))
            .collect(),
        encoder: encoder.clone(),
    }))
}

/// A measured run to replay: its load flags, its requests' token counts, and its medians.
pub struct Replay {
    pub load: crate::cli::LoadArgs,
    pub trace: Vec<(u64, u64)>,
    pub measured: Targets,
    pub failures: Failures,
}

/// A run's failed requests, of how many, and the commonest error's message.
pub struct Failures {
    pub failed: u64,
    pub requests: u64,
    pub top: Option<String>,
}

pub fn read_replay(dir: &Path, defaults: &crate::cli::LoadArgs) -> anyhow::Result<Replay> {
    let bad = |what: &str| Exit::usage(format!("{}: {what}", dir.display()));
    let text = std::fs::read_to_string(dir.join(crate::run_dir::RESULTS))
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
    let mut recs: Vec<tokenscope_core::record::RequestRecord> = Vec::new();
    crate::run_dir::for_each_record(dir, |r| recs.push(r))
        .map_err(|e| bad(&format!("its records: {e}")))?;
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
    let counts = &r["counts"];
    let failures = Failures {
        failed: counts["failed"].as_u64().unwrap_or(0),
        requests: counts["requests"].as_u64().unwrap_or(0),
        top: counts["top_errors"][0]["message"]
            .as_str()
            .map(String::from),
    };
    Ok(Replay {
        load,
        trace,
        measured,
        failures,
    })
}
