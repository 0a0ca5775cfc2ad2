//! `tokenscope merge SHARD_DIR… --out DIR`: one run directory from the
//! shards of a run (`bench --shard I/N`), read like any other by `report`
//! and `compare`.
//!
//! Exact by construction: every shard's records are put on one clock (the
//! earliest shard's origin, by the wall-clock origins the shards recorded)
//! and pooled, and the figures are computed from the pool as a single run's
//! are — percentiles of all requests, never averages of the shards'
//! percentiles; throughput over the common window. What only a shard knows
//! of itself (its client lag, loop delay, self-check floor, CPU) is kept per
//! shard; the server's metrics come from shard 0, the only one that read them.

use crate::cli::MergeArgs;
use crate::exit::Exit;
use crate::run::collect::RunFacts;
use crate::run_dir::for_each_record;
use anyhow::Context;
use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use tokenscope_core::cost::GpuPrice;
use tokenscope_core::metrics::Aggregator;
use tokenscope_core::results::{
    ClientUsage, ClockSync, Finding, Merged, MergedShard, RunResults, ScheduleCheck, ShardInfo,
};
use tokenscope_core::slo::Slo;
use tokenscope_history::Kind;

/// A shard's directory, its results, and its shard facts.
struct Part {
    dir: PathBuf,
    results: RunResults,
    shard: ShardInfo,
}

/// Findings a shard knows of itself that the pooled records cannot show
/// again: its client's own lag and saturation, tokenscope's own failures.
const CLIENT_RULES: &[&str] = &["client_lag", "client_saturated", "internal_error"];

pub fn run(args: MergeArgs) -> anyhow::Result<Exit> {
    let sweeps = args
        .shards
        .iter()
        .filter(|d| crate::run_dir::holds_sweep(d))
        .count();
    match sweeps {
        0 => {}
        n if n == args.shards.len() => return merge_sweeps(&args),
        _ => return Err(Exit::usage(
            "some of these are sweeps and some runs: merge the shards of one sweep, or of one run"
                .into(),
        )),
    }
    let parts = read_parts(&args.shards)?;
    crate::run_dir::claim_out_dir(&args.out, args.force)?;
    let results = merge_into(&parts, &args.out)?;
    if !args.quiet {
        crate::output::to_stdout(&tokenscope_report::terminal::summary(&results));
        crate::output::to_stdout(&format!(
            "\nmerged {} shards into {} (clock origins {:.1} ms apart)\n",
            parts.len(),
            args.out.display(),
            results.merged.as_ref().map_or(0.0, |m| m.origin_spread_ms)
        ));
    }
    crate::run_dir::write_html_after_run(&args.out, args.quiet);
    let history = &args.history;
    crate::recording::record_run(Kind::Merge, &results, &args.out, history, args.quiet);
    Ok(crate::run::finish::exit_code(&results))
}

fn read_parts(dirs: &[PathBuf]) -> anyhow::Result<Vec<Part>> {
    let mut parts = dirs
        .iter()
        .map(|dir| read_part(dir))
        .collect::<Result<Vec<_>, String>>()
        .map_err(Exit::usage)?;
    check(&mut parts).map_err(Exit::usage)?;
    Ok(parts)
}

/// Merges checked shards into the run directory `out` and writes its results.
fn merge_into(parts: &[Part], out: &Path) -> anyhow::Result<RunResults> {
    std::fs::create_dir_all(out)
        .with_context(|| format!("creating the run directory {}", out.display()))?;
    let results = merge(parts, out)?;
    crate::run_dir::write_results(out, &results)?;
    Ok(results)
}

/// The shards of a sharded sweep: each point merged from the same point of
/// every shard (the shards ran one series in one order, so their `point-NN`
/// directories match), then the series analysed as `sweep` does.
fn merge_sweeps(args: &MergeArgs) -> anyhow::Result<Exit> {
    let points = |dir: &Path| -> anyhow::Result<Vec<String>> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .flatten()
            .filter(|e| e.path().join(crate::run_dir::RESULTS).exists())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        Ok(names)
    };
    let first = points(&args.shards[0])?;
    for dir in &args.shards[1..] {
        let here = points(dir)?;
        if here != first {
            return Err(Exit::usage(format!(
                "{} and {} hold different points ({} and {}): shards of one sweep run the same series",
                args.shards[0].display(),
                dir.display(),
                first.join(", "),
                here.join(", ")
            )));
        }
    }
    crate::run_dir::claim_out_dir(&args.out, args.force)?;
    let mut whole = serde_json::Value::Null;
    for name in &first {
        let dirs: Vec<PathBuf> = args.shards.iter().map(|d| d.join(name)).collect();
        let parts = read_parts(&dirs)?;
        whole = parts[0].shard.whole.clone();
        merge_into(&parts, &args.out.join(name))?;
    }
    let mut defaults = <SeriesDefaults as clap::Parser>::try_parse_from(["merge"])?;
    defaults.output.slo = serde_json::from_value(whole["slo"].clone()).unwrap_or(None);
    defaults.output.gpu_price = whole["gpu_price_usd_per_hour"].as_f64();
    defaults.output.gpus = whole["gpus"].as_u64().unwrap_or(1) as u32;
    defaults.output.quiet = args.quiet;
    defaults.output.history = args.history.clone();
    let points = crate::run_dir::read_series(&args.out)?;
    crate::series::finish_series(
        &args.out,
        points,
        &defaults.output,
        &defaults.series,
        Vec::new(),
    )
}

/// The output and series settings a merged sweep is analysed with: the
/// defaults, and the run's own SLO and price (`report --slo/--objectives`
/// re-judge it).
#[derive(clap::Parser)]
struct SeriesDefaults {
    #[command(flatten)]
    output: crate::cli::OutputArgs,
    #[command(flatten)]
    series: crate::cli::SeriesArgs,
}

fn read_part(dir: &Path) -> Result<Part, String> {
    let path = dir.join(crate::run_dir::RESULTS);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        format!(
            "{}: {e} (a shard that did not finish has no results.json; merge needs every shard whole)",
            path.display()
        )
    })?;
    let results: RunResults =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let shard = results.shard.clone().ok_or_else(|| {
        format!(
            "{} is not a shard: its results.json has no `shard` (it ran without --shard/--shards)",
            dir.display()
        )
    })?;
    Ok(Part {
        dir: dir.to_path_buf(),
        results,
        shard,
    })
}

/// Refuses shards that are not the whole of one run: different shard
/// counts, start instants or settings, a shard missing or given twice.
/// Sorts them by index.
fn check(parts: &mut [Part]) -> Result<(), String> {
    let first = &parts[0];
    for p in parts.iter().skip(1) {
        let (a, b) = (&first.shard, &p.shard);
        let names = || format!("{} and {}", first.dir.display(), p.dir.display());
        if a.count != b.count {
            return Err(format!(
                "{}: shards of {} and of {}, so not of one run",
                names(),
                a.count,
                b.count
            ));
        }
        if a.start_at != b.start_at {
            return Err(format!(
                "{}: started at {} and at {}; the shards of one run share one --start-at",
                names(),
                a.start_at.as_deref().unwrap_or("(none)"),
                b.start_at.as_deref().unwrap_or("(none)")
            ));
        }
        if let Some(key) = first_difference(&a.whole, &b.whole) {
            return Err(format!(
                "{}: were given different settings: `{key}` is {} and {}",
                names(),
                a.whole.pointer(&key).unwrap_or(&serde_json::Value::Null),
                b.whole.pointer(&key).unwrap_or(&serde_json::Value::Null)
            ));
        }
        if first.results.target.url != p.results.target.url
            || first.results.target.model != p.results.target.model
        {
            return Err(format!(
                "{}: loaded different targets ({} {} and {} {})",
                names(),
                first.results.target.url,
                first.results.target.model,
                p.results.target.url,
                p.results.target.model
            ));
        }
    }
    parts.sort_by_key(|p| p.shard.index);
    let count = parts[0].shard.count;
    for w in parts.windows(2) {
        if w[0].shard.index == w[1].shard.index {
            return Err(format!(
                "shard {} of {count} is given twice: {} and {}",
                w[0].shard.index,
                w[0].dir.display(),
                w[1].dir.display()
            ));
        }
    }
    let have: BTreeSet<u32> = parts.iter().map(|p| p.shard.index).collect();
    let missing: Vec<String> = (0..count)
        .filter(|i| !have.contains(i))
        .map(|i| i.to_string())
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "shard{} {} of {count} missing: a merge of part of a run would report part of its load",
            if missing.len() > 1 { "s" } else { "" },
            missing.join(", ")
        ));
    }
    Ok(())
}

/// The JSON pointer of the first value that differs between two settings.
fn first_difference(a: &serde_json::Value, b: &serde_json::Value) -> Option<String> {
    use serde_json::Value::Object;
    match (a, b) {
        (Object(x), Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| {
                let null = serde_json::Value::Null;
                let (va, vb) = (x.get(k).unwrap_or(&null), y.get(k).unwrap_or(&null));
                first_difference(va, vb).map(|rest| format!("/{k}{rest}"))
            })
        }
        _ => (a != b).then(String::new),
    }
}

/// Pools the shards' records on the earliest origin into `out/requests.jsonl`
/// and computes the run's figures from them.
fn merge(parts: &[Part], out: &Path) -> anyhow::Result<RunResults> {
    let whole = &parts[0].shard.whole;
    let slo: Option<Slo> = serde_json::from_value(whole["slo"].clone()).unwrap_or(None);
    let price = whole["gpu_price_usd_per_hour"].as_f64().map(|p| GpuPrice {
        usd_per_gpu_hour: p,
        gpus: whole["gpus"].as_u64().unwrap_or(1) as u32,
    });
    let mut figures = Aggregator::new(slo, price);
    let origin = parts
        .iter()
        .map(|p| p.shard.origin_unix_us)
        .min()
        .unwrap_or(0);
    let path = out.join(crate::run_dir::REQUESTS);
    let file =
        std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    let mut writer = std::io::BufWriter::new(file);
    let mut shards = Vec::new();
    // (whole-run id, the shard's intended send µs) of every record.
    let mut intended: Vec<(u64, u64)> = Vec::new();
    for p in parts {
        let (index, count) = (p.shard.index as u64, p.shard.count as u64);
        let offset_us = p.shard.origin_unix_us - origin;
        let mut failed: Option<std::io::Error> = None;
        let n = for_each_record(&p.dir, |mut r| {
            intended.push((r.id * count + index, r.scheduled_at_us));
            r.shift(offset_us);
            // Ids and sessions unique across shards, and each shard's own recoverable.
            r.id = r.id * count + index;
            r.session = r.session.map(|s| s * count + index);
            r.shard = Some(index as u32);
            figures.add(&r);
            if failed.is_none() {
                let line = serde_json::to_string(&r).map_err(std::io::Error::other);
                if let Err(e) = line.and_then(|l| writeln!(writer, "{l}")) {
                    failed = Some(e);
                }
            }
        })
        .map_err(|e| Exit::usage(e.to_string()))?;
        if let Some(e) = failed {
            return Err(e).with_context(|| format!("writing {}", path.display()));
        }
        shards.push(shard_summary(p, n as u64, offset_us));
    }
    writer
        .flush()
        .with_context(|| format!("writing {}", path.display()))?;
    copy_timeseries(&parts[0], origin, out)?;
    let facts = facts(parts);
    let mut results = crate::run::collect::assemble(figures.finish(), facts);
    carry_findings(parts, &mut results.diagnosis);
    results.efficiency.gpu = parts[0].results.efficiency.gpu.clone();
    let spread = parts
        .iter()
        .map(|p| p.shard.origin_unix_us)
        .max()
        .unwrap_or(0)
        - origin;
    let (clock_note, doubt) = clocks(parts);
    results.diagnosis.extend(doubt);
    let schedule = check_schedule(whole, intended);
    if let Some(f) = schedule.as_ref().and_then(schedule_finding) {
        results.diagnosis.push(f);
    }
    results.merged = Some(Merged {
        shards,
        origin_spread_ms: spread as f64 / 1e3,
        clock_note,
        schedule,
    });
    Ok(results)
}

/// An open loop's (not a replay's) intended send times against the whole
/// run's schedule, drawn again from its rate, process and seed: request
/// `i` of the whole run was sent by shard `i mod N` as its own `i div N`.
fn check_schedule(
    whole: &serde_json::Value,
    mut intended: Vec<(u64, u64)>,
) -> Option<ScheduleCheck> {
    use tokenscope_workload::arrival::{Process, Schedule};
    let load = &whole["load"];
    // A session's later turns leave when the last answer came, not on
    // the schedule: only single requests are checked.
    let single = whole["multi_turn"].is_null();
    let rate = load["rate"]
        .as_f64()
        .filter(|_| load["mode"] == "open" && single)?;
    let process: Process = load["arrival"].as_str()?.parse().ok()?;
    let seed = whole["seed"].as_u64()?;
    intended.sort_unstable();
    let mut schedule = Schedule::new(rate, process, seed).enumerate();
    let mut check = ScheduleCheck::default();
    for (id, at_us) in intended {
        let Some((_, due)) = schedule.find(|(i, _)| *i as u64 == id) else {
            break;
        };
        let error = (due.as_micros() as u64).abs_diff(at_us);
        check.requests += 1;
        check.exact += u64::from(error == 0);
        check.max_error_us = check.max_error_us.max(error);
    }
    Some(check)
}

/// A finding when some shard's intended send times were not the schedule's.
fn schedule_finding(c: &ScheduleCheck) -> Option<Finding> {
    (c.exact < c.requests).then(|| Finding {
        rule: "schedule_mismatch".into(),
        severity: "warning".into(),
        message: format!(
            "{} of {} requests were not intended at the whole run's schedule (up to {} µs off): the shards did not split one schedule (shards of different versions or settings?)",
            c.requests - c.exact,
            c.requests,
            c.max_error_us
        ),
        evidence: [("requests".to_string(), serde_json::json!(c.requests))]
            .into_iter()
            .collect(),
    })
}

/// What the alignment of the shards' records rests on, and a finding when
/// it cannot be trusted: shards on several hosts whose clocks are not all
/// synchronised. Each request's TTFT, TPOT and E2E are measured on one host
/// and stay exact; what spans shards (the window, throughput, concurrency)
/// is off by the hosts' offset.
fn clocks(parts: &[Part]) -> (String, Option<Finding>) {
    let hosts: BTreeSet<&str> = parts.iter().map(|p| p.shard.host.as_str()).collect();
    if hosts.len() == 1 {
        let host = hosts.first().copied().unwrap_or("");
        return (
            format!("every shard ran on one host ({host}): one clock, so the alignment is exact and the spread is start lateness"),
            None,
        );
    }
    let worst = |f: fn(&ClockSync) -> i64| {
        parts
            .iter()
            .filter_map(|p| p.shard.clock.as_ref().map(f))
            .max()
            .unwrap_or(0) as f64
            / 1e3
    };
    let unsynced: Vec<String> = parts
        .iter()
        .filter(|p| !p.shard.clock.is_some_and(|c| c.synchronised))
        .map(|p| p.shard.index.to_string())
        .collect();
    if unsynced.is_empty() {
        let note = format!(
            "{} hosts, their clocks synchronised (kernel: estimated error ≤ {:.1} ms, maximum ≤ {:.1} ms): the spread holds start lateness and those offsets",
            hosts.len(),
            worst(|c| c.est_error_us),
            worst(|c| c.max_error_us)
        );
        return (note, None);
    }
    let whose = match unsynced.len() {
        1 => format!("the clock of shard {} is", unsynced[0]),
        _ => format!("the clocks of shards {} are", unsynced.join(", ")),
    };
    let message = format!(
        "shards ran on {} hosts and {whose} not synchronised (kernel: maximum error up to {:.0} ms): the shards' records may be misaligned by that much; each request's TTFT, TPOT and E2E are measured on one host and stay exact, but the window, throughput and concurrency across shards may be off — run NTP/PTP on the client hosts",
        hosts.len(),
        worst(|c| c.max_error_us)
    );
    let finding = Finding {
        rule: "clock_unsynchronised".into(),
        severity: "warning".into(),
        message: message.clone(),
        evidence: [
            ("shards".to_string(), serde_json::json!(unsynced)),
            (
                "taints".to_string(),
                serde_json::json!(["throughput", "concurrency"]),
            ),
        ]
        .into_iter()
        .collect(),
    };
    (message, Some(finding))
}

/// The merged run's facts: shard 0's target and server, the whole run's
/// settings, the shards' client CPU summed.
fn facts(parts: &[Part]) -> RunFacts {
    let first = &parts[0].results;
    let mut config = parts[0].shard.whole.clone();
    if let Some(c) = config.as_object_mut() {
        c.insert("shards".into(), serde_json::json!(parts.len()));
        c.insert(
            "start_at".into(),
            serde_json::json!(parts[0].shard.start_at),
        );
    }
    let cpu: Option<f64> = parts.iter().map(|p| p.results.client.cpu_seconds).sum();
    let threads: Option<usize> = parts.iter().map(|p| p.results.client.threads).sum();
    let earliest = parts
        .iter()
        .min_by_key(|p| p.shard.origin_unix_us)
        .map_or(first.started_at.clone(), |p| p.results.started_at.clone());
    RunFacts {
        started_at: earliest,
        partial: parts.iter().any(|p| p.results.partial),
        target: first.target.clone(),
        config,
        server: first.server.clone(),
        kv_cache: first.efficiency.kv_cache.clone(),
        client_cpu: None,
        client: ClientUsage {
            cpu_seconds: cpu,
            threads,
            ..Default::default()
        },
        extra_findings: Vec::new(),
        simulated: None,
        telemetry: None,
    }
}

fn shard_summary(p: &Part, requests: u64, offset_us: u64) -> MergedShard {
    let r = &p.results;
    MergedShard {
        index: p.shard.index,
        dir: p.dir.display().to_string(),
        host: p.shard.host.clone(),
        clock: p.shard.clock,
        origin_offset_ms: offset_us as f64 / 1e3,
        requests,
        output_tokens: r.tokens.output_total,
        client_lag_p99_ms: r.latency.client_lag_ms.as_ref().map(|s| s.p99),
        loop_delay_p99_ms: r.client.loop_delay_ms.as_ref().map(|s| s.p99),
        cpu_seconds: r.client.cpu_seconds,
        self_check: r.client.self_check.clone(),
        findings: r.diagnosis.iter().map(|f| f.rule.clone()).collect(),
    }
}

/// What the pooled records cannot show again: each shard's own client
/// findings, and shard 0's server findings (it alone read the metrics),
/// each named with its shard.
fn carry_findings(parts: &[Part], diagnosis: &mut Vec<Finding>) {
    let pooled: BTreeSet<String> = diagnosis.iter().map(|f| f.rule.clone()).collect();
    for p in parts {
        for f in &p.results.diagnosis {
            let own = CLIENT_RULES.contains(&f.rule.as_str());
            if pooled.contains(&f.rule) || !(own || p.shard.index == 0) {
                continue;
            }
            diagnosis.push(Finding {
                message: format!("shard {}: {}", p.shard.index, f.message),
                ..f.clone()
            });
        }
    }
}

/// Shard 0's metrics time series, on the merged clock.
fn copy_timeseries(first: &Part, origin: u64, out: &Path) -> anyhow::Result<()> {
    let from = first.dir.join(crate::run_dir::TIMESERIES);
    let Ok(file) = std::fs::File::open(&from) else {
        return Ok(()); // it read no metrics
    };
    let shift_s = (first.shard.origin_unix_us - origin) as f64 / 1e6;
    let to = out.join(crate::run_dir::TIMESERIES);
    let mut w = std::io::BufWriter::new(
        std::fs::File::create(&to).with_context(|| format!("creating {}", to.display()))?,
    );
    for line in std::io::BufReader::new(file).lines() {
        let line = line.with_context(|| format!("reading {}", from.display()))?;
        let Ok(mut sample) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if let Some(t) = sample.get("t_s").and_then(|t| t.as_f64()) {
            sample["t_s"] = serde_json::json!(t + shift_s);
        }
        writeln!(w, "{sample}").with_context(|| format!("writing {}", to.display()))?;
    }
    w.flush()
        .with_context(|| format!("writing {}", to.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_first_difference_is_named_by_its_path() {
        let a = json!({"load": {"mode": "closed", "concurrency": 64}, "seed": 0});
        let b = json!({"load": {"mode": "closed", "concurrency": 32}, "seed": 0});
        assert_eq!(
            first_difference(&a, &b).as_deref(),
            Some("/load/concurrency")
        );
        assert_eq!(first_difference(&a, &a), None);
        let c = json!({"load": {"mode": "closed", "concurrency": 64}});
        assert_eq!(first_difference(&a, &c).as_deref(), Some("/seed"));
    }
}
