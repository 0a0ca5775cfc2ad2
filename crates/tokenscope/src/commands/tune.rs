//! `tokenscope tune`: for each setting (a grid of `--param`s or the named
//! settings of `--settings FILE`), start the server (`--serve`, `{port}`
//! and each `{NAME}` filled in), time it to its first `/health`, find its
//! SLO capacity by search ([`crate::find`]), stop it, and check its port is
//! free. `OUT/tune.json` holds every setting's outcome and the setting
//! recommended per kind of service, with what each recommendation rests on
//! ([`crate::tuning`]); each setting's directory holds its server's log,
//! its probe, its points and their `sweep.json`.

use crate::calibration::{self, Fit};
use crate::cli::{SweepArgs, TuneArgs};
use crate::exit::Exit;
use crate::find::{self, Found};
use crate::plan_search::{self, Planned};
use crate::points::Points;
use crate::run::builtin::with_runtime;
use crate::run::cold_start;
use crate::signals::Raised;
use crate::spec::workload::Load;
use crate::tuning::{self, Calibration, Setting, Tuned};
use std::path::Path;
use std::time::Duration;
use tokenscope_core::slo::Slo;

pub fn run(args: TuneArgs) -> anyhow::Result<Exit> {
    let slo = check(&args)?;
    let settings = match &args.settings {
        Some(file) => tuning::read_settings(file)?,
        None => tuning::grid(&args.params),
    };
    tuning::check_placeholders(&args.serve, &settings, args.bench.target.url.is_some())
        .map_err(Exit::usage)?;
    let dir = args
        .bench
        .output
        .out
        .clone()
        .unwrap_or_else(crate::run_dir::default_out_dir);
    crate::run_dir::claim_out_dir(&dir, args.bench.output.force)?;
    let base = Load::read(args.bench.load.clone(), args.bench.output.quiet)?;
    let first_plan = plan_all(&args, &slo, &base, &settings, None)?;
    let mut planned = first_plan.clone();
    let mut order = measure_order(&planned, args.plan_first, &[]);
    let mut calibration = None;
    let mut tuned: Vec<Option<Tuned>> = vec![None; settings.len()];
    let mut n = 0;
    while let Some(&i) = order.get(n) {
        let setting = &settings[i];
        say(
            &args,
            &format!("setting {} of {}: {}", n + 1, order.len(), setting.name),
        );
        let mut one = one_setting(&args, &slo, &base, setting, &dir)?;
        one.planned = planned[i].clone();
        let stop = one.interrupted;
        // The first setting whose search ran whole calibrates the plan.
        let whole = one.error.is_none() && !stop && one.find.is_some();
        tuned[i] = Some(one);
        if calibration.is_none() && whole && args.plan_first.is_some() && !args.no_calibrate {
            let plan = Plan {
                args: &args,
                slo: &slo,
                base: &base,
                settings: &settings,
            };
            let measured = tuned[i].as_ref().and_then(|t| t.capacity);
            let c = recalibrate(&plan, (i, measured), &dir, &mut planned, &mut order, n);
            calibration = Some(c);
        }
        // Written after every setting: a tune killed later keeps what it measured.
        let so_far: Vec<Tuned> = tuned.iter().flatten().cloned().collect();
        let mut doc = tuning::document(&args.serve, &slo, so_far);
        doc.calibration = calibration.clone();
        tuning::write(&dir, &doc)?;
        if stop {
            say(&args, "interrupted: the settings left are not run");
            break;
        }
        n += 1;
    }
    let recalibrated = calibration.as_ref().is_some_and(|c| c.used);
    let tuned: Vec<Tuned> = tuned
        .into_iter()
        .zip(&settings)
        .enumerate()
        .map(|(i, (t, setting))| {
            let mut t = t.unwrap_or_else(|| {
                let why = match args.plan_first {
                    Some(k) if !order.contains(&i) => {
                        format!("not measured: outside the plan's first {k} (--plan-first)")
                    }
                    _ => "not measured: the tune was interrupted first".into(),
                };
                Tuned::unmeasured(setting, None, why)
            });
            t.planned = planned[i].clone();
            if recalibrated {
                t.planned_uncalibrated = first_plan[i].clone();
            }
            t
        })
        .collect();
    let mut doc = tuning::document(&args.serve, &slo, tuned);
    doc.calibration = calibration;
    tuning::write(&dir, &doc)?;
    let (summary, sweeps) = tuning::history_parts(&dir, &doc);
    let history = &args.bench.output.history;
    crate::recording::record_tune(&dir, &summary, &sweeps, history, args.bench.output.json);
    if args.bench.output.json {
        crate::output::to_stdout(&(serde_json::to_string_pretty(&doc)? + "\n"));
    } else if !args.bench.output.quiet {
        crate::output::to_stdout(&tuning::table(&doc));
        crate::output::to_stdout(&format!(
            "\ntune directory: {} (tune.json; one directory per setting)\n",
            dir.display()
        ));
    }
    Ok(match (doc.interrupted, doc.best_capacity()) {
        (true, _) => Exit::Interrupted,
        (false, Some(_)) => Exit::Success,
        (false, None) => Exit::SloNotMet,
    })
}

/// With `--sim`: every setting's capacity planned on the virtual clock,
/// with the efficiency (and speculation) `fit` found, when given.
fn plan_all(
    args: &TuneArgs,
    slo: &Slo,
    base: &Load,
    settings: &[Setting],
    fit: Option<&Fit>,
) -> anyhow::Result<Vec<Option<Planned>>> {
    let Some(flags) = &args.sim else {
        return Ok(vec![None; settings.len()]);
    };
    tuning::check_placeholders(flags, settings, true)
        .map_err(|e| Exit::usage(e.replace("--serve", "--sim")))?;
    let cap = crate::find::point_cap(&base.flags, slo).unwrap_or(crate::find::MIN_POINT_REQUESTS);
    let size = plan_search::Sizing {
        over: args.find,
        precision: args.precision,
        probe: args.auto_max_concurrency,
        cap,
        min_point_s: args.min_point_time.as_secs_f64(),
    };
    // Speculation learned from the servers' counters goes to every setting,
    // unless --sim models it for some (then the flags say which speculate).
    let mut modelled_spec = false;
    for setting in settings {
        modelled_spec |= plan_search::engine_of(&setting.command(flags, 0))?
            .spec
            .is_some();
    }
    let mut planned = Vec::new();
    for setting in settings {
        let started = std::time::Instant::now();
        let mut cfg = plan_search::engine_of(&setting.command(flags, 0))?;
        if let Some(fit) = fit {
            cfg.efficiency = fit.profile.efficiency;
            if !modelled_spec {
                cfg.spec = fit.cfg.spec.clone();
            }
        }
        let p = plan_search::plan(&cfg, base, slo, &size)?;
        say(
            args,
            &format!(
                "{}: planned{} capacity {} (bracket {}–{}) in {:.1} s",
                setting.name,
                if fit.is_some() { " (calibrated)" } else { "" },
                p.bracket.capacity.map_or("none".into(), |c| c.to_string()),
                p.bracket.low,
                p.bracket.high,
                started.elapsed().as_secs_f64()
            ),
        );
        planned.push(Some(p));
    }
    Ok(planned)
}

/// The settings to measure, in order: every one as given, or with
/// `--plan-first K` the K the plan ranks highest (capacity, then the
/// probe's throughput), best first; `measured` (the setting the plan was
/// calibrated on) stays first.
fn measure_order(
    planned: &[Option<Planned>],
    first: Option<u64>,
    measured: &[usize],
) -> Vec<usize> {
    let mut order: Vec<usize> = (0..planned.len()).collect();
    let Some(k) = first else { return order };
    let key = |i: &usize| {
        let p = planned[*i].as_ref();
        (
            p.and_then(|p| p.bracket.capacity).unwrap_or(0.0),
            p.map_or(0.0, |p| p.probe_output_tokens_per_s),
        )
    };
    order.sort_by(|a, b| {
        let (ka, kb) = (key(a), key(b));
        kb.0.total_cmp(&ka.0).then(kb.1.total_cmp(&ka.1))
    });
    order.retain(|i| !measured.contains(i));
    let mut order: Vec<usize> = measured.iter().copied().chain(order).collect();
    order.truncate(k as usize);
    order
}

/// How far the calibrated plan may put the calibrating setting's own
/// capacity from its measured one before the fit is set aside.
const CALIBRATION_HOLDS: f64 = 0.25;

/// What planning every setting needs.
struct Plan<'a> {
    args: &'a TuneArgs,
    slo: &'a Slo,
    base: &'a Load,
    settings: &'a [Setting],
}

/// Calibrates on setting `i` (just measured, the `n`+1th), then plans
/// every setting again with the fit and chooses the rest to measure from
/// that plan; the settings measured so far keep their places. A fit that
/// cannot be used, or a plan that fails with it, leaves the plan as it was.
fn recalibrate(
    plan: &Plan,
    (i, measured): (usize, Option<f64>),
    dir: &Path,
    planned: &mut Vec<Option<Planned>>,
    order: &mut Vec<usize>,
    n: usize,
) -> Calibration {
    let (mut c, fit) = calibrate(plan.args, &plan.settings[i], dir);
    let Some(fit) = fit else { return c };
    match plan_all(plan.args, plan.slo, plan.base, plan.settings, Some(&fit)) {
        Err(e) => {
            c.used = false;
            c.note.push_str(&format!(
                "; but planning with it failed ({e:#}): the plan as --sim gave it stands"
            ));
        }
        Ok(p) => {
            // The fit matched medians; the capacity rests on a tail near the
            // knee. Checked there, on the setting it was fitted to.
            let again = p[i].as_ref().and_then(|p| p.bracket.capacity);
            if let (Some(again), Some(m)) = (again, measured) {
                if (again / m - 1.0).abs() > CALIBRATION_HOLDS {
                    c.used = false;
                    c.note.push_str(&format!(
                        "; not used: with it the plan puts {}'s capacity at {again} where the tune measured {m} ({:+.0} %, more than {:.0} %), so the fit does not hold at the capacity; the plan as --sim gave it stands",
                        plan.settings[i].name,
                        (again / m - 1.0) * 100.0,
                        CALIBRATION_HOLDS * 100.0
                    ));
                    return c;
                }
            }
            *planned = p;
            *order = measure_order(planned, plan.args.plan_first, &order[..=n]);
            // The calibrated plan's favourite, if --plan-first leaves it out.
            let all = measure_order(planned, Some(plan.settings.len() as u64), &[]);
            if let Some(best) = all.first().filter(|b| !order.contains(b)) {
                c.note.push_str(&format!(
                    "; the calibrated plan ranks {} first, which --plan-first {} leaves unmeasured (measured before the calibration chose)",
                    plan.settings[*best].name,
                    plan.args.plan_first.unwrap_or(0)
                ));
            }
        }
    }
    c
}

/// The points a calibration may fit: those that ran to their cap or were
/// stopped by their verdict. A point a rule stopped (saturation, errors)
/// holds only its early survivors' latencies, and requests cancelled
/// mid-answer, which a replay would serve whole.
fn steady(dirs: Vec<std::path::PathBuf>) -> Vec<std::path::PathBuf> {
    dirs.into_iter()
        .filter(|d| {
            let Ok(text) = std::fs::read_to_string(d.join(crate::run_dir::RESULTS)) else {
                return false;
            };
            let r: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            matches!(r["stopped"]["rule"].as_str(), None | Some("decided"))
        })
        .collect()
}

/// `sim calibrate` over the first measured setting's search points: the
/// profile in the tune's directory, and the fit when the plan may use it
/// (it did not fail, and no factor reached the model's bounds).
fn calibrate(args: &TuneArgs, setting: &Setting, dir: &Path) -> (Calibration, Option<Fit>) {
    let flags = args.sim.as_deref().unwrap_or_default();
    let sdir = dir.join(setting.dir_name());
    let note = |points, why: String| Calibration {
        from: setting.name.clone(),
        profile: None,
        residual: None,
        points,
        used: false,
        note: why,
    };
    let dirs = match calibration::run_dirs(std::slice::from_ref(&sdir)) {
        Ok(d) => steady(d),
        Err(e) => return (note(0, format!("not calibrated: {e:#}")), None),
    };
    if dirs.is_empty() {
        let why = "not calibrated: every point of its search was stopped by a rule (saturation, errors) before its steady state";
        return (note(0, why.into()), None);
    }
    let started = std::time::Instant::now();
    let delay = Duration::from_secs_f64(tokenscope_sim::plan::DEFAULT_NETWORK_DELAY_S);
    let fitted = plan_search::engine_of(&setting.command(flags, 0))
        .and_then(|cfg| calibration::fit(cfg, &dirs, delay, "tokenscope tune"));
    let fit = match fitted {
        Ok(fit) => fit,
        Err(e) => return (note(dirs.len(), format!("not calibrated: {e:#}")), None),
    };
    let path = dir.join("profile.json");
    if let Err(e) = calibration::write_profile(&path, &fit.profile) {
        return (note(dirs.len(), format!("not calibrated: {e:#}")), None);
    }
    let pinned = calibration::warn_if_pinned(&fit.cfg, &fit.profile.efficiency, "tokenscope tune");
    let e = &fit.profile.efficiency;
    let fitted = format!(
        "compute efficiency {:.3}, memory efficiency {:.3}, step overhead {:.2} ms, per sequence {:.3} ms, residual {:.3} over {} points, in {:.1} s",
        e.compute,
        e.memory,
        e.step_overhead_s * 1e3,
        e.per_sequence_s * 1e3,
        fit.profile.residual,
        dirs.len(),
        started.elapsed().as_secs_f64()
    );
    let mut c = Calibration {
        profile: Some("profile.json".into()),
        residual: Some(fit.profile.residual),
        used: pinned.is_none(),
        ..note(dirs.len(), String::new())
    };
    c.note = match &pinned {
        None => format!("{fitted}; the settings left were planned again with it"),
        Some(why) => format!("{fitted}; not used, the plan as --sim gave it stands: {why}"),
    };
    say(args, &format!("calibrated on {}: {}", setting.name, c.note));
    (c, pinned.is_none().then_some(fit))
}

/// The flags tune cannot work without, or cannot use.
fn check(args: &TuneArgs) -> anyhow::Result<Slo> {
    let refuse = |why: &str| Err(Exit::usage(format!("tune: {why}")));
    if args.bench.client.cold_start.is_some() {
        return refuse(
            "tune starts each setting's server itself (--serve): --cold-start is bench's",
        );
    }
    if !args.bench.load.concurrency.is_empty() || !args.bench.load.rate.is_empty() {
        return refuse("tune searches the load itself: leave out --concurrency and --rate");
    }
    if args.params.is_empty() && args.settings.is_none() {
        return refuse("give the settings: --param NAME=V1,V2 (repeatable) or --settings FILE");
    }
    crate::spec::records::refuse_forever(args.bench.load.duration, "a tune's points each end")?;
    match &args.bench.output.slo {
        Some(slo) => Ok(slo.clone()),
        None => refuse("give --slo: a setting's capacity is the highest load that meets it"),
    }
}

fn say(args: &TuneArgs, line: &str) {
    if !args.bench.output.quiet {
        eprintln!("tokenscope tune: {line}");
    }
}

/// The sweep a setting's search runs as.
fn sweep_args(args: &TuneArgs, dir: &Path, url: &str) -> SweepArgs {
    let mut bench = args.bench.clone();
    // The tune records its settings' sweeps under its own entry, at its end.
    bench.output.history.no_history = true;
    bench.target.url = Some(url.to_string());
    bench.output.out = Some(dir.to_path_buf());
    bench.output.force = true;
    SweepArgs {
        bench,
        series: args.series.clone(),
        auto: false,
        auto_max_concurrency: args.auto_max_concurrency,
        find: Some(args.find),
        precision: args.precision,
        min_point_time: args.min_point_time,
        between_points: args.between_points.clone(),
        resume: false,
        repeat: 1,
        consistency: false,
        point_gap: Duration::ZERO,
    }
}

/// One setting: its server started, searched, stopped.
fn one_setting(
    args: &TuneArgs,
    slo: &Slo,
    base: &Load,
    setting: &Setting,
    dir: &Path,
) -> anyhow::Result<Tuned> {
    let sdir = dir.join(setting.dir_name());
    std::fs::create_dir_all(&sdir)?;
    let (url, port) = match &args.bench.target.url {
        // The server listens where --url says: {port} is that port.
        Some(url) => {
            let (base, _) = crate::run::target::base_url(url)?;
            let port = tuning::port_of(&base);
            (base, port)
        }
        None => {
            let port = tuning::free_port()?;
            (format!("http://127.0.0.1:{port}"), port)
        }
    };
    let command = setting.command(&args.serve, port);
    let sweep = sweep_args(args, &sdir, &url);
    let mut tuned = Tuned::new(setting, &command, &setting.dir_name());
    let log = sdir.join("server.log");
    let chose_port = args.bench.target.url.is_none();
    with_runtime(
        &sweep.bench.target,
        sweep.bench.builtin,
        &sweep.bench.client,
        |site| {
            let tuned = &mut tuned;
            let sweep = &sweep;
            async move {
                let raised = Raised::listen()?;
                let timeout = args.bench.client.ready_timeout;
                let started = tokio::select! {
                    s = cold_start::start("tune", &command, &url, &log, timeout) => s,
                    _ = raised.wait() => {
                        tuned.interrupted = true;
                        return Ok(Exit::Interrupted);
                    }
                };
                let mut server = match started {
                    Ok(s) => s,
                    Err(e) => {
                        tuned.error = Some(format!("did not start: {e}"));
                        say(args, &format!("{}: did not start: {e}", setting.name));
                        return Ok(Exit::Success);
                    }
                };
                tuned.ready_s = Some(server.ready_after.as_secs_f64());
                say(
                    args,
                    &format!(
                        "{}: ready after {:.1} s",
                        setting.name,
                        server.ready_after.as_secs_f64()
                    ),
                );
                let mut points = Points::new(sweep, base.clone(), sdir.clone(), site);
                let found = {
                    let mut gone = || {
                        if raised.is_raised() {
                            return Some("interrupted (Ctrl-C or SIGTERM)".to_string());
                        }
                        server.exited().map(|status| {
                            format!(
                                "the server exited ({status}) mid-search; its log ends: {}",
                                cold_start::last_lines(&log, 3)
                            )
                        })
                    };
                    find::search(&mut points, args.find, slo, &mut gone).await
                };
                // Waiting for the group to go (up to 10 s) and the port to
                // free (5 s) sleeps: on the blocking pool, not a runtime worker.
                let (stop_s, freed) = tokio::task::spawn_blocking(move || {
                    let stop_s = server.stop().as_secs_f64();
                    (stop_s, !chose_port || tuning::port_freed(port))
                })
                .await?;
                tuned.stop_s = Some(stop_s);
                if !freed {
                    tuned.notes.push(format!(
                    "port {port} was still taken 5 s after the server stopped: something it started may still run"
                ));
                }
                tuned.interrupted = raised.is_raised();
                // A search that failed is this setting's result, not the tune's end.
                let found: Found = match found {
                    Ok(found) => found,
                    Err(e) => {
                        tuned.error = Some(format!("the search failed: {e:#}"));
                        say(args, &format!("{}: the search failed: {e:#}", setting.name));
                        return Ok(Exit::Success);
                    }
                };
                tuned.interrupted |= found.interrupted;
                tuned.error = found.ended.clone();
                tuned.take(&found, &points.done);
                let mut output = sweep.bench.output.clone();
                output.quiet = true;
                output.json = false;
                let written = find::write(&sdir, &found).and_then(|_| {
                    crate::series::finish_series_as(
                        &sdir,
                        points.done,
                        &output,
                        &sweep.series,
                        vec![("find", serde_json::to_value(&found)?)],
                        false,
                    )
                });
                if let Err(e) = written {
                    tuned.notes.push(format!("its search's files: {e:#}"));
                }
                if !args.bench.output.quiet {
                    eprint!("{}", find::summary(&found));
                }
                tuned.find = Some(found);
                Ok(Exit::Success)
            }
        },
    )?;
    Ok(tuned)
}
