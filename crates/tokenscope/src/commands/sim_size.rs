//! `tokenscope sim size`: the cheapest deployments meeting an SLO at a load
//! (the search itself is `tokenscope_sim::size`): flags to a search, the
//! answer as a table, `size.json` and a report page.

use crate::cli::SizeArgs;
use crate::exit::Exit;
use crate::output::to_stdout;
use anyhow::Context;
use std::path::Path;
use tokenscope_report::sizing::{options_table, sizing_page, SizedOption, SizingView};
use tokenscope_sim::engine::catalogue::{Catalogue, Gpu};
use tokenscope_sim::engine::preset::Preset;
use tokenscope_sim::engine::EngineConfig;
use tokenscope_sim::size::{size, Candidate, Report, Search};

pub fn run(mut args: SizeArgs) -> anyhow::Result<Exit> {
    one_target_load(&mut args)?;
    let work = crate::spec::workload::Load::read_for_plan(args.load.clone(), args.json)?;
    let cat = crate::engine::catalogue(args.catalogue.as_deref())?;
    let model = cat
        .model(&args.model)
        .map_err(|e| Exit::usage(format!("--model: {e}")))?;
    let gpus = gpus_of(&cat, &args)?;
    let engines = engines(&args);
    let mut template = EngineConfig::new(model, gpus[0].clone());
    if let Some(text) = &args.spec_decode {
        template.spec = Some(crate::engine::parse_spec(text, args.catalogue.as_deref())?);
    }
    if let Some(p) = &args.profile {
        crate::engine::apply_profile(&mut template, p, args.catalogue.as_deref())?;
    }
    let load = tokenscope_sim::plan::PlanLoad {
        reasoning: args.reasoning_tokens,
        images: crate::engine::plan_images(&template.model, &args.load)?,
        ..crate::engine::plan_load(&work, args.network_delay)
    };
    let (candidates, unpriced) = candidates(&args, &gpus, &engines);
    let search = Search {
        template: &template,
        calibrated: args.profile.is_some(),
        gpus: &gpus,
        load: &load,
        slo: &args.slo,
        router: args.router,
        disaggregate: args.disaggregate,
        kv_transfer_gbs: args.kv_transfer_gbs,
        max_replicas: args.max_replicas,
        top: args.top as usize,
    };
    if !args.json {
        let priced = gpus.len() - unpriced.len();
        announce(
            &args,
            &template.model.name,
            (candidates.len(), priced),
            &engines,
        );
    }
    let started = std::time::Instant::now();
    let report = size(&search, candidates).map_err(Exit::usage)?;
    let doc = serde_json::json!({
        "model": template.model.name,
        "rate": args.load.rate[0],
        "slo": args.slo.describe(),
        "router": args.router.name(),
        "requests_per_simulation": load.requests,
        "seconds": started.elapsed().as_secs_f64(),
        "unpriced": unpriced,
        "report": report,
        "commands": report.options.iter().map(|o| plan_command(&args, o)).collect::<Vec<_>>(),
    });
    let shown = view(&args, &report, &template.model.name);
    if let Some(dir) = &args.out {
        write_out(dir, &doc, &sizing_page(&shown))?;
    }
    if args.json {
        to_stdout(&(serde_json::to_string_pretty(&doc)? + "\n"));
    } else {
        to_stdout(&table(
            &args,
            (&report, &shown),
            &unpriced,
            started.elapsed().as_secs_f64(),
        ));
    }
    Ok(if report.options.is_empty() {
        Exit::SloNotMet
    } else {
        Exit::Success
    })
}

/// `sim size` plans for one open-loop rate, to an end: 1,500 requests
/// unless told, enough for a p99 to be judged by the estimate (1,000 needed).
fn one_target_load(args: &mut SizeArgs) -> anyhow::Result<()> {
    crate::spec::records::refuse_forever(
        args.load.duration,
        "a simulation on a virtual clock needs an end",
    )?;
    if args.load.rate.len() != 1 || !args.load.concurrency.is_empty() {
        return Err(Exit::usage(
            "sim size needs one target load as --rate R (requests/s; the open loop a service faces)".into(),
        ));
    }
    if args.load.requests.is_none() && args.load.duration.is_none() {
        args.load.requests = Some(1500);
    }
    Ok(())
}

/// The GPUs searched: those named by `--gpu`, or the whole catalogue.
fn gpus_of(cat: &Catalogue, args: &SizeArgs) -> anyhow::Result<Vec<Gpu>> {
    if args.gpu.is_empty() {
        return Ok(cat.gpus.clone());
    }
    let named = args
        .gpu
        .iter()
        .map(|g| cat.gpu(g).map_err(|e| Exit::usage(format!("--gpu: {e}"))));
    named.collect()
}

/// Says on stderr what is being searched: `shapes` (deployment shapes,
/// priced GPU types).
fn announce(args: &SizeArgs, model: &str, (shapes, priced): (usize, usize), engines: &[Preset]) {
    let thinking = args
        .reasoning_tokens
        .map(|r| format!(" thinking {r} tokens a request"))
        .unwrap_or_default();
    let dtypes: Vec<String> = args
        .dtype
        .iter()
        .map(|d| format!("{d:?}").to_lowercase())
        .collect();
    let engines: Vec<&str> = engines.iter().map(|e| e.name()).collect();
    eprintln!(
        "tokenscope: sizing {model}{thinking} for {} at {} req/s: {shapes} deployment shapes ({priced} GPU types × TP {:?} × {} × {})",
        args.slo.describe(),
        args.load.rate[0],
        args.tp,
        dtypes.join("/"),
        engines.join("/")
    );
}

/// The shapes that fit under none of the engines searched, each once; a
/// shape that fits under some engines (their memory reserves differ with
/// their token budgets) is named with each engine it did not fit under.
fn no_fit_shapes(no_fit: &[&tokenscope_sim::size::Rejected], engines: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for x in no_fit {
        let under = no_fit.iter().filter(|y| y.shape == x.shape).count();
        let name = if under == engines {
            &x.shape
        } else {
            &x.candidate
        };
        if !out.contains(name) {
            out.push(name.clone());
        }
    }
    out
}

/// The engines asked for, each once, in the order given (`all` is every preset).
fn engines(args: &SizeArgs) -> Vec<Preset> {
    let mut out: Vec<Preset> = Vec::new();
    for e in args.engine.iter().flatten() {
        if !out.contains(e) {
            out.push(*e);
        }
    }
    out
}

/// Every (GPU, TP, dtype, engine) shape with its price; GPUs without one are named.
fn candidates(args: &SizeArgs, gpus: &[Gpu], engines: &[Preset]) -> (Vec<Candidate>, Vec<String>) {
    let mut out = Vec::new();
    let mut unpriced = Vec::new();
    for g in gpus {
        let given = args
            .price
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(&g.name));
        let price = match given {
            Some((_, p)) => *p,
            None => match tokenscope_core::prices::price(&g.name) {
                Ok((p, _)) => p,
                Err(_) => {
                    unpriced.push(g.name.clone());
                    continue;
                }
            },
        };
        for &tp in &args.tp {
            for &d in &args.dtype {
                for &engine in engines {
                    for disaggregated in [false, true] {
                        if disaggregated && !args.disaggregate {
                            continue;
                        }
                        out.push(Candidate {
                            gpu: g.name.clone(),
                            tp,
                            weights: d,
                            kv_dtype: d,
                            usd_per_gpu_hour: price,
                            disaggregated,
                            engine,
                        });
                    }
                }
            }
        }
    }
    (out, unpriced)
}

/// The `sim plan` command that runs an option's fleet at the target load.
fn plan_command(args: &SizeArgs, o: &tokenscope_sim::size::Sized) -> String {
    let c = &o.candidate;
    let dtype = |d| format!("{d:?}").to_lowercase();
    format!(
        "tokenscope sim plan --model {} --engine {} --gpu {} --tp {} --dtype {} --kv-dtype {} {} --router {} {} --slo {}",
        args.model,
        c.engine.name(),
        c.gpu,
        c.tp,
        dtype(c.weights),
        dtype(c.kv_dtype),
        match o.prefill_replicas {
            Some(p) => format!(
                "--disaggregate {p}:{} --kv-transfer-gbs {}",
                o.replicas - p,
                args.kv_transfer_gbs
            ),
            None => format!("--replicas {}", o.replicas),
        },
        args.router.name(),
        workload_flags(args),
        slo_flag(&args.slo)
    )
}

/// Flags `sim size` only reads: the command re-adds what `sim plan` needs of them.
/// (`--profile`, `--catalogue` and the workload flags are `sim plan`'s too: kept.)
const SIZE_ONLY: [&str; 14] = [
    "--engine",
    "--disaggregate",
    "--kv-transfer-gbs",
    "--model",
    "--gpu",
    "--tp",
    "--dtype",
    "--router",
    "--max-replicas",
    "--top",
    "--price",
    "--out",
    "--json",
    "--slo",
];

/// The workload and load flags as given (on the command line or by
/// `--config`: a run of `sim plan` with them draws the same requests), and
/// the request count when it was defaulted.
fn workload_flags(args: &SizeArgs) -> String {
    let given = crate::config_file::given();
    let mut out: Vec<String> = Vec::new();
    for (long, values) in &given {
        let flag = format!("--{long}");
        if SIZE_ONLY.contains(&flag.as_str()) {
            continue;
        }
        out.push(flag);
        if !values.is_empty() {
            out.push(shell_word(&values.join(",")));
        }
    }
    if !given
        .iter()
        .any(|(long, _)| long == "requests" || long == "duration")
    {
        out.push(format!("--requests {}", args.load.requests.unwrap_or(1500)));
    }
    out.join(" ")
}

/// A word as a shell reads it back.
fn shell_word(w: &str) -> String {
    let plain = w
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_.:,/=+-@%".contains(c));
    if plain {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

fn slo_flag(slo: &tokenscope_core::slo::Slo) -> String {
    slo.objectives
        .iter()
        .map(|o| format!("{}={}ms", o.key(), o.limit_ms))
        .collect::<Vec<_>>()
        .join(",")
}

fn table(
    args: &SizeArgs,
    (r, shown): (&Report, &SizingView),
    unpriced: &[String],
    seconds: f64,
) -> String {
    let mut out = options_table(shown);
    out.push_str(&format!(
        "\n{} shapes: {} listed, {} left out (below), {} not simulated further (their fewest replicas already cost more than option {}); {} simulations in {seconds:.1} s\n",
        r.candidates,
        r.options.len(),
        r.rejected.len(),
        r.pruned.len(),
        args.top,
        r.simulations
    ));
    let (no_fit, other): (Vec<_>, Vec<_>) = r
        .rejected
        .iter()
        .partition(|x| x.why.starts_with("does not fit"));
    if !no_fit.is_empty() {
        out.push_str(&format!(
            "  the weights do not fit in memory: {}\n",
            no_fit_shapes(&no_fit, engines(args).len()).join("; ")
        ));
    }
    for x in other {
        out.push_str(&format!("  {}: {}\n", x.candidate, x.why));
    }
    if !unpriced.is_empty() {
        out.push_str(&format!(
            "  no price for {} (--price GPU=$/h to include them)\n",
            unpriced.join(", ")
        ));
    }
    out.push_str("Each option was met by the fleet simulation (sim plan's engine; requests judged as bench judges them: each statistic with its interval and sample size). A model, not a measurement: calibrate it to your server with `sim calibrate` (docs/simulator.md).\n");
    out
}

fn write_out(dir: &Path, doc: &serde_json::Value, page: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("size.json");
    std::fs::write(&path, serde_json::to_string_pretty(doc)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    let path = dir.join("report.html");
    std::fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// What `tokenscope_report::sizing` renders of a sizing.
fn view(args: &SizeArgs, r: &Report, model: &str) -> SizingView {
    let options = r
        .options
        .iter()
        .map(|o| SizedOption {
            label: o.candidate.label(),
            replicas: o.replicas,
            gpus: o.gpus,
            usd_per_hour: o.usd_per_hour,
            usd_per_million_output_tokens: o.usd_per_million_output_tokens,
            slo_capacity_rps: o.slo_capacity_rps,
            margin_pct: o.margin_pct,
            objectives: o
                .objectives
                .iter()
                .map(|x| {
                    format!(
                        "{}_{} {:.0} ms",
                        x.metric,
                        x.stat,
                        x.value_ms.unwrap_or(f64::NAN)
                    )
                })
                .collect::<Vec<_>>()
                .join(", "),
            binding: o.binding.clone(),
            command: plan_command(args, o),
        })
        .collect();
    SizingView {
        model: model.to_string(),
        rate: args.load.rate[0],
        slo: args.slo.describe(),
        router: args.router.name().to_string(),
        options,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenscope_sim::size::Rejected;

    #[test]
    fn a_shape_that_fits_under_no_engine_is_named_once_else_per_engine() {
        let no_fit = |shape: &str, engine: &str| Rejected {
            candidate: format!("{shape} on {engine}"),
            shape: shape.into(),
            why: "does not fit: …".into(),
        };
        let rejected = [
            no_fit("1 × l4 TP 1", "vllm"),
            no_fit("1 × l4 TP 1", "sglang"),
            no_fit("1 × a100 TP 1", "trtllm"),
        ];
        let refs: Vec<&Rejected> = rejected.iter().collect();
        assert_eq!(
            no_fit_shapes(&refs, 2),
            ["1 × l4 TP 1", "1 × a100 TP 1 on trtllm"]
        );
    }
}
