//! A run's load: its flags and the files they name (`--dataset`,
//! `--tokenizer`), read once into a [`Load`] — a load whose dataset flag is
//! set always carries its dataset — and turned into the plan the load loop
//! and the simulator follow, and the `config` that `results.json` records.

use crate::cli::{LoadArgs, OutputArgs};
use crate::exit::Exit;
use crate::spec::pricing::price_source;
use serde_json::json;
use std::sync::Arc;
use tokenscope_core::duration::is_forever;
use tokenscope_load::runner::RunPlan;
use tokenscope_workload::arrival::{LoadPattern, Process};
use tokenscope_workload::dataset::Dataset;
use tokenscope_workload::media::{Kind as MediaKind, Spec as MediaSpec, Synthetic};
use tokenscope_workload::workflow::Workflows;
use tokenscope_workload::workload::Workload;

/// A load as specified: its flags, and the files they name, read.
#[derive(Debug, Clone)]
pub struct Load {
    pub flags: LoadArgs,
    /// `--dataset`, read (`None` without the flag).
    dataset: Option<Arc<Dataset>>,
    /// What `--tokenizer` measured of the synthetic prompts.
    tokenizer_check: Option<serde_json::Value>,
    /// `--images`, `--audio`: the synthetic media, each piece encoded once
    /// for every plan of this load.
    media: Option<Arc<Synthetic>>,
    /// A shard's share of the whole run's open-loop schedule.
    pub share: Option<tokenscope_workload::arrival::ScheduleShare>,
    /// `--workflow FILE` or `--replay-trace FILE`, read.
    workflows: Option<Arc<Workflows>>,
}

impl Load {
    /// Reads the files `flags` name, once, before any load: `--tokenizer`
    /// first (a dataset's prompts are counted with it), then `--dataset`.
    /// `quiet` keeps what is said about them off stderr.
    pub fn read(flags: LoadArgs, quiet: bool) -> anyhow::Result<Load> {
        let media = synthetic_media(&flags, quiet)?;
        Ok(Load {
            media,
            ..Load::read_for_plan(flags, quiet)?
        })
    }

    /// The load a simulation plans: its files read, its media only counted
    /// (the virtual clock charges `--images` by size; nothing is encoded).
    pub fn read_for_plan(flags: LoadArgs, quiet: bool) -> anyhow::Result<Load> {
        let tokenizer_check = load_tokenizer(&flags, quiet)?;
        let dataset = load_dataset(&flags, quiet)?;
        let workflows = load_workflows(&flags, quiet)?;
        let media = None;
        Ok(Load {
            flags,
            dataset,
            tokenizer_check,
            media,
            share: None,
            workflows,
        })
    }

    /// Another load over the same files (a sweep's point: another
    /// concurrency, seed or count). The files' own flags stay as read.
    pub fn with_flags(&self, flags: LoadArgs) -> Load {
        Load {
            flags: LoadArgs {
                dataset: self.flags.dataset.clone(),
                tokenizer: self.flags.tokenizer.clone(),
                workflow: self.flags.workflow.clone(),
                replay: self.flags.replay.clone(),
                ..flags
            },
            ..self.clone()
        }
    }

    /// Some dataset entry offers its own tools.
    pub fn has_tools(&self) -> bool {
        self.dataset
            .as_ref()
            .is_some_and(|d| d.entries.iter().any(|e| e.tools.is_some()))
    }

    /// Some dataset entry carries the answer it should get (`--grade`).
    pub fn has_expected_answers(&self) -> bool {
        self.dataset
            .as_ref()
            .is_some_and(|d| d.entries.iter().any(|e| e.expected.is_some()))
    }

    /// The kinds of media the load's requests carry (synthetic, or a
    /// dataset's), each once.
    pub fn media_kinds(&self) -> Vec<MediaKind> {
        let f = &self.flags;
        let mut kinds: Vec<MediaKind> = [
            (f.images > 0, MediaKind::Image),
            (f.audio > 0, MediaKind::Audio),
        ]
        .into_iter()
        .filter_map(|(on, k)| on.then_some(k))
        .collect();
        if let Some(d) = &self.dataset {
            kinds.extend(
                d.entries
                    .iter()
                    .flat_map(|e| e.media.iter().map(|m| m.kind)),
            );
        }
        kinds.sort_unstable();
        kinds.dedup();
        kinds
    }

    /// The workflows, read (`--workflow`, `--replay-trace FILE`).
    pub fn workflows(&self) -> Option<&Arc<Workflows>> {
        self.workflows.as_ref()
    }

    /// The dataset, read.
    pub fn dataset(&self) -> Option<&Arc<Dataset>> {
        self.dataset.as_ref()
    }

    /// A shard's part of the dataset in place of the whole.
    pub fn set_dataset(&mut self, part: Dataset) {
        self.dataset = Some(Arc::new(part));
    }

    pub fn pattern(&self) -> LoadPattern {
        pattern(self)
    }

    /// The plan the load describes (100 requests when neither a count nor a
    /// duration is given).
    pub fn plan(&self) -> RunPlan {
        plan(self)
    }

    /// The load and output settings as written into `config`.
    pub fn config_json(&self, plan: &RunPlan, output: &OutputArgs) -> serde_json::Value {
        config_json(self, plan, output)
    }
}

fn pattern(l: &Load) -> LoadPattern {
    let load = &l.flags;
    let traced = l.workflows.as_ref().and_then(|w| w.offsets_s.as_ref());
    let replayed = match traced {
        Some(o) => Some((o.len(), o.last().copied())),
        None => l
            .dataset
            .as_ref()
            .filter(|_| load.replays_dataset())
            .map(|d| (d.len(), d.offsets_s().and_then(|o| o.last().copied()))),
    };
    if let Some((n, last)) = replayed {
        // The rate the replay averages, for the summary and the plans.
        let span = last.unwrap_or(0.0);
        let rate = (n as f64 / (span / load.replay_speed)).clamp(1.0 / 3600.0, 1e6);
        return LoadPattern::Open {
            rate: if span > 0.0 { rate } else { 1e6 },
            process: Process::Replay {
                speed: load.replay_speed,
            },
            max_concurrency: load.max_concurrency.map(|n| n as usize),
        };
    }
    match load.rate.first().copied() {
        Some(rate) => LoadPattern::Open {
            rate,
            process: load.arrival,
            max_concurrency: load.max_concurrency.map(|n| n as usize),
        },
        None => LoadPattern::Closed {
            concurrency: load.concurrency.first().copied().unwrap_or(10) as usize,
        },
    }
}

fn plan(l: &Load) -> RunPlan {
    let load = &l.flags;
    RunPlan {
        pattern: pattern(l),
        requests: match (load.requests, load.duration, sessions(l)) {
            // Workflows alone: each whole, however many requests they make.
            (None, None, _) if l.workflows.is_some() => None,
            // A dataset's sessions alone: each once, whatever their turns.
            (None, None, Some(_)) => None,
            // A dataset alone: every entry once.
            (None, None, None) => Some(l.dataset.as_ref().map_or(100, |d| d.len() as u64)),
            (n, _, _) => n,
        },
        sessions: sessions(l),
        duration: load.duration,
        warmup: load.warmup,
        ramp_up: load.ramp_up,
        workload: Workload {
            input: load.input_tokens,
            output: Some(load.output_tokens),
            seed: load.seed,
            shared_prefix: load.shared_prefix,
            dataset: l.dataset.clone(),
            prefix_groups: load.prefix_groups,
            prefix_zipf: load.prefix_zipf,
            multi_turn: load
                .multi_turn
                .then_some(tokenscope_workload::session::MultiTurn {
                    turns: load.turns,
                    think_time: load.think_time,
                    tools: tokenscope_workload::session::AgentTools {
                        latency: load.tool_latency,
                        result_tokens: load.tool_result_tokens,
                        max_rounds: load.max_tool_rounds,
                    },
                }),
            media: l.media.clone(),
            workflows: l.workflows.clone(),
        },
        seed: load.seed,
        share: l.share,
    }
}

/// The synthetic media `--images` and `--audio` ask for, if any, every
/// distinct piece encoded before the run (never inside its window) — once
/// the pool is reckoned to fit the client's media budget; a pool that
/// would not is refused with the arithmetic, before it costs memory.
fn synthetic_media(f: &LoadArgs, quiet: bool) -> anyhow::Result<Option<Arc<Synthetic>>> {
    if f.images == 0 && f.audio == 0 {
        return Ok(None);
    }
    let media = {
        let spec = MediaSpec {
            images: f.images,
            sizes: f.image_size.clone(),
            format: f.image_format,
            audio: f.audio,
            audio_seconds: f.audio_seconds,
            pool: f.media_pool,
        };
        let media = Synthetic::new(spec, f.seed);
        media
            .within(tokenscope_workload::media::MAX_POOL_BYTES)
            .map_err(crate::exit::Exit::usage)?;
        let started = std::time::Instant::now();
        large_pieces_from_mmap();
        let n = media.encode_all();
        if !quiet {
            eprintln!(
                "tokenscope: {n} distinct synthetic media encoded in {:.1} s (--media-pool {} per size), before the run",
                started.elapsed().as_secs_f64(),
                f.media_pool
            );
        }
        Arc::new(media)
    };
    Ok(Some(media))
}

/// Encoding a pool makes and frees scratch buffers of a piece's size (a
/// megabyte or more) on every core. glibc raises its mmap threshold to
/// the largest block freed, so later ones come from the threads' heaps
/// and their holes stay resident: measured, a pool of 20 8192x8192 PNGs
/// peaked at 89 MB this way, 68 MB with the threshold held. Held at 256
/// KiB, blocks that large are mapped and returned whole when freed.
fn large_pieces_from_mmap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; any value is valid.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
    }
}

/// Multi-turn over a dataset: its sessions, each once (unless --requests or
/// --duration bound the run instead).
fn sessions(l: &Load) -> Option<u64> {
    let load = &l.flags;
    if let Some(w) = &l.workflows {
        // A trace's workflows each once; a file's, as many as asked.
        let bounded = load.requests.is_some() || load.duration.is_some();
        let whole = w.offsets_s.as_ref().map(|o| o.len() as u64);
        return load.workflows.or(whole).or((!bounded).then_some(10));
    }
    let d = l.dataset.as_ref().filter(|_| load.multi_turn)?;
    (load.requests.is_none() && load.duration.is_none()).then_some(d.sessions.len() as u64)
}

/// `--tokenizer FILE`: the model's tokenizer counts tokens and gives the
/// synthetic prompts their words; a sample of prompts is counted with it
/// at once, so the summary can say whether their lengths are exact.
fn load_tokenizer(load: &LoadArgs, quiet: bool) -> anyhow::Result<Option<serde_json::Value>> {
    use tokenscope_workload::tokenizer::{self, ModelTokenizer};
    let Some(path) = &load.tokenizer else {
        return Ok(None);
    };
    let model = match tokenizer::model() {
        Some(m) => m, // a sweep's points share the one loaded
        None => tokenizer::use_model(ModelTokenizer::load(path).map_err(Exit::usage)?)
            .map_err(Exit::usage)?,
    };
    let sample = Workload::new(load.input_tokens, None, load.seed);
    let (mut asked, mut counted) = (0u64, 0u64);
    for id in 0..SAMPLE_PROMPTS {
        let p = sample.request(id);
        asked += p.input_tokens;
        counted += model.count(&p.prompt).unwrap_or(0);
    }
    let exact = asked == counted;
    let check = json!({
        "path": path.display().to_string(),
        "words": model.words.len(),
        "sample_prompts": SAMPLE_PROMPTS,
        "asked_tokens": asked,
        "counted_tokens": counted,
        "exact": exact,
    });
    if !quiet {
        let verdict = match exact {
            true => "synthetic prompts are exact in it".to_string(),
            false => format!(
                "synthetic prompts are NOT exact in it: {SAMPLE_PROMPTS} sample prompts of {asked} tokens count {counted}"
            ),
        };
        eprintln!(
            "tokenscope: tokenizer {}: {} one-token words; {verdict}",
            path.display(),
            model.words.len()
        );
    }
    Ok(Some(check))
}

/// Synthetic prompts counted with `--tokenizer` to check their lengths.
const SAMPLE_PROMPTS: u64 = 20;

/// Reads `--dataset` once, before any load; a bad file is a usage error
/// naming the line. Says how many entries it holds and what a
/// `--requests` past its end does.
/// `--workflow FILE` or `--replay-trace FILE`, read and checked, said
/// what it holds (unless `quiet`).
fn load_workflows(load: &LoadArgs, quiet: bool) -> anyhow::Result<Option<Arc<Workflows>>> {
    use tokenscope_workload::{otlp_trace, workflow};
    if load.replays_dataset() && load.dataset.is_none() {
        return Err(Exit::usage(
            "--replay-trace without a FILE replays --dataset's own times: give --dataset, or --replay-trace FILE for agent traces".into(),
        ));
    }
    let read = match (&load.workflow, load.trace_file()) {
        (Some(path), _) => {
            let read = workflow::read(path).map_err(|e| Exit::usage(format!("--workflow {e}")))?;
            let asks = read.graphs.iter().flat_map(|g| &g.steps).find(|s| s.from_dataset);
            match (asks, &load.dataset) {
                (Some(s), None) => {
                    return Err(Exit::usage(format!(
                        "--workflow: step `{}` takes --dataset entries (dataset = true): give --dataset",
                        s.name.escape_debug()
                    )))
                }
                (None, Some(_)) => {
                    return Err(Exit::usage(
                        "--dataset with --workflow: no step takes its entries (set `dataset = true` on the steps that should)".into(),
                    ))
                }
                _ => read,
            }
        }
        (None, Some(_)) if load.dataset.is_some() => {
            return Err(Exit::usage(
                "--replay-trace FILE replays agent traces, whose lengths are their spans': drop --dataset (or give --replay-trace alone to replay the dataset's times)".into(),
            ))
        }
        (None, Some(_)) if load.replay_window.is_some() => {
            return Err(Exit::usage(
                "--replay-window cuts a dataset's entries; a trace file is replayed whole".into(),
            ))
        }
        (None, Some(path)) => {
            otlp_trace::read(path).map_err(|e| Exit::usage(format!("--replay-trace {e}")))?
        }
        (None, None) => return Ok(None),
    };
    if !quiet {
        let calls: usize = read.graphs.iter().map(|g| g.steps.len()).sum();
        let what = match read.offsets_s {
            Some(_) => format!("{} traces of {calls} model calls", read.graphs.len()),
            None => format!("a workflow of {calls} steps"),
        };
        eprintln!("tokenscope: {}: {what}", read.source);
    }
    Ok(Some(Arc::new(read)))
}

fn load_dataset(load: &LoadArgs, quiet: bool) -> anyhow::Result<Option<Arc<Dataset>>> {
    let Some(path) = &load.dataset else {
        return Ok(None);
    };
    let format = match load.dataset_format.as_str() {
        "auto" => None,
        f => Some(
            f.parse()
                .map_err(|e: String| Exit::usage(format!("--dataset-format: {e}")))?,
        ),
    };
    let how = tokenscope_workload::dataset::Load {
        format,
        sample: load.dataset_sample.map(|n| n as usize),
        seed: load.seed,
        max_input_tokens: load.max_input_tokens,
        max_output_tokens: load.max_output_tokens,
        replay: load.replays_dataset().then(|| {
            load.replay_window.map_or((0.0, f64::INFINITY), |(a, b)| {
                (a.as_secs_f64(), b.as_secs_f64())
            })
        }),
        multi_turn: load.multi_turn,
    };
    let d = Dataset::load(path, &how).map_err(|e| Exit::usage(e.to_string()))?;
    if !quiet {
        let skipped = match d.skipped {
            0 => String::new(),
            n => format!(" ({n} without a prompt left out)"),
        };
        let sessions = match d.sessions.len() {
            0 => String::new(),
            n => format!(" in {n} sessions"),
        };
        eprintln!(
            "tokenscope: dataset {}: {} entries{sessions}, {} format{skipped}",
            path.display(),
            d.len(),
            d.format.name()
        );
        if let Some(n) = load.requests.filter(|&n| n > d.len() as u64) {
            eprintln!(
                "tokenscope: --requests {n} is more than the dataset's {} entries: it is sent {:.1} times over, in order",
                d.len(),
                n as f64 / d.len() as f64
            );
        }
    }
    Ok(Some(Arc::new(d)))
}

/// The load and output settings as written into `config`.
fn config_json(l: &Load, plan: &RunPlan, output: &OutputArgs) -> serde_json::Value {
    let load = &l.flags;
    let mode = match plan.pattern {
        LoadPattern::Closed { concurrency } => {
            json!({"mode": "closed", "concurrency": concurrency})
        }
        LoadPattern::Open {
            rate,
            process,
            max_concurrency,
        } => json!({
            "mode": "open", "rate": rate, "arrival": process.to_string(),
            "max_concurrency": max_concurrency,
        }),
    };
    let mut mode = mode;
    if plan.duration.is_some_and(is_forever) {
        // Told apart from a run given a length: it ran until stopped.
        mode["forever"] = json!(true);
    }
    json!({
        "load": mode,
        "requests": plan.requests,
        "duration_s": plan.duration.filter(|d| !is_forever(*d)).map(|d| d.as_secs_f64()),
        "warmup": plan.warmup,
        "ramp_up_s": plan.ramp_up.map(|d| d.as_secs_f64()),
        "input_tokens": load.input_tokens.to_string(),
        "output_tokens": load.output_tokens.to_string(),
        "shared_prefix": load.shared_prefix,
        "tokenizer": l.tokenizer_check.clone().unwrap_or_else(|| json!({"name": tokenscope_workload::tokenizer::name()})),
        "prefix_groups": (load.prefix_groups > 1).then(|| json!({"groups": load.prefix_groups, "zipf": load.prefix_zipf})),
        "multi_turn": load.multi_turn.then(|| json!({
            "turns": l.dataset.as_ref().filter(|d| !d.sessions.is_empty())
                .map_or(load.turns.to_string(), |_| "from the dataset".into()),
            "think_time": load.think_time.to_string(),
            "sessions": plan.sessions,
        })),
        "workflows": l.workflows.as_ref().map(|w| json!({
            "source": w.source,
            "traced": w.offsets_s.is_some(),
            "graphs": w.graphs.len(),
            "steps": w.graphs.first().map(|g| g.steps.iter().map(|s| s.name.clone()).collect::<Vec<_>>()),
            "workflows": plan.sessions,
            "replay_speed": w.offsets_s.is_some().then_some(load.replay_speed),
        })),
        "dataset": l.dataset.as_ref().map(|d| json!({
            "path": d.path.display().to_string(),
            "format": d.format.name(),
            "entries": d.len(),
            "sample": load.dataset_sample,
            "max_input_tokens": load.max_input_tokens,
            "max_output_tokens": load.max_output_tokens,
            "replay_speed": load.replay.is_some().then_some(load.replay_speed),
            "replay_window_s": load.replay_window.map(|(a, b)| [a.as_secs_f64(), b.as_secs_f64()]),
        })),
        "media": l.media.as_ref().map(|m| {
            let s = m.spec();
            json!({
                "images": s.images,
                "image_sizes": (s.images > 0).then(|| s.sizes.iter().map(ToString::to_string).collect::<Vec<_>>()),
                "image_format": (s.images > 0).then(|| s.format.name()),
                "audio": s.audio,
                "audio_seconds": (s.audio > 0).then(|| s.audio_seconds.to_string()),
                "pool": s.pool,
            })
        }),
        "seed": load.seed,
        "slo": output.slo,
        "gpu_price_usd_per_hour": output.gpu_price,
        "gpu_type": output.gpu_type,
        "gpus": output.gpus,
        "gpu_price_source": price_source(output),
    })
}

/// Adds `extra`'s fields to the object `base`.
pub fn merge(mut base: serde_json::Value, extra: serde_json::Value) -> serde_json::Value {
    if let (Some(b), serde_json::Value::Object(e)) = (base.as_object_mut(), extra) {
        b.extend(e);
    }
    base
}
