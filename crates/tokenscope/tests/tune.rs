//! `sweep --find` and `tune` against servers whose capacity is known
//! before they are measured: the exact server with `--slots N` serves N
//! requests at once, each for ttft + (tokens − 1) × itl, and queues the
//! rest first come first served.

mod common;
use common::*;
use serde_json::Value;
use std::time::Duration;
use tokenscope_sim::exact::ExactConfig;

/// 20 ms to the first token, 5 ms a token, 16 tokens: 95 ms a request.
fn slotted(slots: u32) -> ExactConfig {
    ExactConfig {
        ttft: Duration::from_millis(20),
        itl: Duration::from_millis(5),
        default_output_tokens: 16,
        slots: Some(slots),
        ..ExactConfig::default()
    }
}

const SERVICE_S: f64 = 0.020 + 15.0 * 0.005;

fn find_json(dir: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(dir.join("find.json")).expect("find.json");
    serde_json::from_str(&text).unwrap()
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// Constant arrivals below 2 ÷ 95 ms = 21.05 requests/s never wait; above
/// it the queue grows from the first second. The search's capacity lands
/// within its 5 % of that, with fewer requests than a grid of 5 % steps.
#[test]
fn the_rate_search_lands_within_its_precision_of_a_known_capacity() {
    let server = Server::start(slotted(2));
    let truth = 2.0 / SERVICE_S;
    let out = run_dir("find-rate");
    let o = tokenscope()
        .args(["sweep", "--url", &server.url, "--out"])
        .arg(&out)
        .args(exact_chat(&[
            "--find",
            "rate",
            "--slo",
            "ttft_p90=60ms",
            "--arrival",
            "constant",
            "--output-tokens",
            "16",
            "--auto-max-concurrency",
            "8",
            "--requests",
            "60",
            "--min-point-time",
            "2s",
            "--no-history",
        ]))
        .output()
        .unwrap();
    assert_ok(&o);
    let found = find_json(&out);
    let b = &found["bracket"];
    let capacity = f(&b["capacity"]);
    // A loaded machine sends the server's chunks late, and a slot is held
    // until its last one left: the server's own p99 lateness lowers what
    // it could carry, and the search must land within 5 % of that range.
    let late_s = server
        .stats
        .lateness_us
        .lock()
        .unwrap()
        .as_ref()
        .map_or(0.0, |h| h.value_at_quantile(0.99) as f64 / 1e6);
    let slowest = 2.0 / (SERVICE_S + late_s);
    assert!(
        capacity >= 0.95 * slowest && capacity <= 1.05 * truth,
        "capacity {capacity} against the known {slowest:.2}–{truth:.2}: {b}"
    );
    assert!(f(&b["width"]) <= 0.05, "{b}");
    let (spent, grid) = (
        found["requests"].as_u64().unwrap(),
        found["grid"]["requests"].as_u64().unwrap(),
    );
    eprintln!("the search sent {spent} requests; a fixed grid of 5 % would send {grid}");
    assert!(spent < grid, "{spent} ≥ {grid}");
    // The series analysis of the points searched, and the summary.
    let sweep = sweep_doc(&out);
    assert_eq!(
        sweep["points"].as_array().unwrap().len(),
        found["points"].as_array().unwrap().len()
    );
    assert_eq!(sweep["find"]["bracket"], found["bracket"]);
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(said.contains("find: capacity"), "{said}");
    assert!(said.contains("a fixed grid of 5 %"), "{said}");
}

/// Closed loops on two slots: two in flight never wait, a third waits a
/// whole request (95 ms) and misses 60 ms. The search finds exactly 2; a
/// point that misses is decided within a few looks, not run to its cap,
/// and no point is run above one that missed.
#[test]
fn the_concurrency_search_finds_the_slots_and_decides_misses_early() {
    let server = Server::start(slotted(2));
    let out = run_dir("find-concurrency");
    let o = tokenscope()
        .args(["sweep", "--url", &server.url, "--out"])
        .arg(&out)
        .args(exact_chat(&[
            "--find",
            "concurrency",
            "--slo",
            "ttft_p90=60ms",
            "--output-tokens",
            "16",
            "--auto-max-concurrency",
            "8",
            "--requests",
            "200",
            "--min-point-time",
            "2s",
            "--no-history",
        ]))
        .output()
        .unwrap();
    assert_ok(&o);
    let found = find_json(&out);
    assert_eq!(found["bracket"]["capacity"], 2.0, "{}", found["bracket"]);
    assert_eq!(found["bracket"]["high"], 3.0, "{}", found["bracket"]);
    assert_eq!(found["probe"]["met"], false);
    // The probe is a concurrency search's top point, in the series with
    // its figures (a capacity at it has them).
    let series = sweep_doc(&out);
    let loads: Vec<f64> = series["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| f(&p["load"]))
        .collect();
    assert!(loads.contains(&8.0), "{loads:?}");
    let points = found["points"].as_array().unwrap();
    let mut lowest_miss = 8.0;
    for p in points {
        let load = f(&p["load"]);
        assert!(
            load < lowest_miss,
            "{load} run above a miss at {lowest_miss}"
        );
        if p["met"] == false {
            lowest_miss = load;
            assert_eq!(p["verdict"], "not_met", "{p}");
            let why = p["stopped"]["why"].as_str().unwrap_or_default();
            assert!(why.starts_with("not met: ttft_p90"), "{p}");
            assert!(p["requests"].as_u64().unwrap() < 100, "decided late: {p}");
        }
    }
}

/// A point whose percentile its requests cannot bound is not a miss: the
/// search ends there and says why, rather than conclude from it.
#[test]
fn a_point_too_small_to_judge_ends_the_search_with_the_fix() {
    let server = Server::start(slotted(2));
    let out = run_dir("find-undecided");
    let o = tokenscope()
        .args(["sweep", "--url", &server.url, "--out"])
        .arg(&out)
        .args(exact_chat(&[
            "--find",
            "rate",
            "--slo",
            "ttft_p90=60ms",
            "--output-tokens",
            "16",
            "--auto-max-concurrency",
            "4",
            "--requests",
            "20",
            "--min-point-time",
            "1s",
            "--no-history",
        ]))
        .output()
        .unwrap();
    let found = find_json(&out);
    let ended = found["ended"].as_str().unwrap_or_default();
    assert!(
        ended.contains("could not be judged") && ended.contains("--requests"),
        "{found}"
    );
    // The search ends on the point it could not judge.
    let points = found["points"].as_array().unwrap();
    let last = points.last().unwrap();
    assert_eq!(last["verdict"], "not_enough_data", "{found}");
    assert!(
        last["undecided"].as_str().unwrap().contains("n = 20"),
        "{last}"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("warning") && err.contains("ttft_p90 needs"),
        "{err}"
    );
}

/// `tune` starts `sim exact --slots {slots}` per setting, finds each
/// capacity (1 and 2 slots: 10.5 and 21 requests/s), recommends 2 for
/// chat, keeps a setting that does not start as a result, and leaves no
/// server behind.
#[test]
fn tune_starts_measures_and_stops_a_server_per_setting() {
    let out = run_dir("tune-exact");
    let db = out.with_extension("db").display().to_string();
    let marker = format!("tune-test-{}", std::process::id());
    let serve = format!(
        "{} sim exact --port {{port}} --model {marker} --ttft 20ms --itl 5ms --output-tokens 16 --slots {{slots}}",
        env!("CARGO_BIN_EXE_tokenscope")
    );
    let o = tokenscope()
        .args(["tune", "--serve", &serve, "--param", "slots=1,2,0"])
        .args(["--model", &marker, "--api", "openai-chat", "--no-metrics"])
        .args(["--slo", "ttft_p90=60ms", "--arrival", "constant"])
        .args(["--output-tokens", "16", "--auto-max-concurrency", "8"])
        .args([
            "--requests",
            "60",
            "--precision",
            "10%",
            "--min-point-time",
            "2s",
        ])
        .args([
            "--db",
            &db,
            "--tag",
            "tuned",
            "--ready-timeout",
            "20s",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("tune.json")).unwrap()).unwrap();
    let settings = doc["settings"].as_array().unwrap();
    assert_eq!(settings.len(), 3);
    the_history_holds_the_tune_as_one_entry(&db, &out, &o);
    for (s, slots) in settings.iter().zip([1.0, 2.0]) {
        let truth = slots / SERVICE_S;
        let c = f(&s["capacity"]);
        // Served by a process of its own, whose lateness is not read here:
        // a loaded machine is allowed 20 %, the rate test holds 5 %.
        assert!(
            (c - truth).abs() <= 0.2 * truth,
            "{}: {c} against {truth:.2}",
            s["name"]
        );
        assert!(f(&s["ready_s"]) < 20.0);
        assert!(
            f(&s["stop_s"]) < 10.0,
            "stopped by SIGTERM: {}",
            s["stop_s"]
        );
        assert!(out
            .join(s["dir"].as_str().unwrap())
            .join("server.log")
            .exists());
    }
    let failed = &settings[2];
    let error = failed["error"].as_str().unwrap();
    assert!(error.starts_with("did not start"), "{error}");
    assert!(
        error.contains("slots"),
        "its log's last line names the cause: {error}"
    );
    let chat = &doc["recommendations"][0];
    assert_eq!(
        (chat["service"].as_str(), chat["setting"].as_str()),
        (Some("chat"), Some("slots=2"))
    );
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("Recommended settings"), "{table}");
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        page.contains("slots-2/report.html"),
        "the tune's page links each setting's"
    );
    assert!(out.join("slots-2").join("report.html").exists());
    assert!(no_process_named(&marker), "a server was left running");
}

/// The tune is one history entry (kind `tune`, the user's tag, chat's
/// pick); each setting that ran is a sweep under it, known by the command
/// it ran with `{port}` left (so the next tune's same setting is the same
/// configuration), its points under that; `history import` of the tune's
/// directory records the same, once.
fn the_history_holds_the_tune_as_one_entry(
    db: &str,
    out: &std::path::Path,
    o: &std::process::Output,
) {
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(said.contains("(a tune) with 2 settings"), "{said}");
    let list = |db: &str, extra: &[&str]| -> Vec<Value> {
        let o = tokenscope()
            .args(["history", "list", "--json", "--db", db])
            .args(extra)
            .output()
            .unwrap();
        assert_ok(&o);
        serde_json::from_slice::<Value>(&o.stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    };
    let tunes = list(db, &["--kind", "tune"]);
    assert_eq!(tunes.len(), 1, "{tunes:?}");
    let tune = &tunes[0];
    assert_eq!(tune["point"], "chat: slots=2", "{tune}");
    assert!(tune["tags"].as_array().unwrap().contains(&"tuned".into()));
    let sweeps = list(db, &["--kind", "sweep"]);
    assert_eq!(sweeps.len(), 2, "{sweeps:?}");
    for s in &sweeps {
        assert_eq!(s["parent_id"], tune["id"], "{s}");
        let target = s["target"].as_str().unwrap();
        assert!(
            target.starts_with("serve: ") && target.contains("--port {port}"),
            "{target}"
        );
        let points = list(db, &["--under", &s["id"].to_string()]);
        assert!(points.len() >= 2, "{points:?}");
    }
    let again = out.with_extension("import.db").display().to_string();
    for (n, said) in [
        (1, "tune (a tune) with 2 settings"),
        (2, "already recorded"),
    ] {
        let o = tokenscope()
            .args(["history", "import", "--db", &again])
            .arg(out)
            .output()
            .unwrap();
        assert_ok(&o);
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains(said), "import {n}: {text}");
    }
    assert_eq!(list(&again, &["--kind", "tune"]).len(), 1);
    // The team's shared database takes it alike (PostgreSQL: the same
    // entries, written by the other engine's statements).
    let pg = std::env::var("TOKENSCOPE_TEST_POSTGRES").expect(
        "TOKENSCOPE_TEST_POSTGRES is not set: run the tests with scripts/test.sh, which starts PostgreSQL",
    );
    let o = tokenscope()
        .args(["history", "import", "--db", &pg])
        .arg(out)
        .output()
        .unwrap();
    assert_ok(&o);
    let marker = tune["model"].as_str().unwrap();
    let shared = list(&pg, &["--kind", "tune", "--model", marker]);
    assert_eq!(shared.len(), 1, "{shared:?}");
    let id = shared[0]["id"].to_string();
    assert_eq!(list(&pg, &["--under", &id]).len(), 2);
}

/// Whether no process (this one aside) holds `marker` on its command line
/// or in its environment.
fn no_process_named(marker: &str) -> bool {
    let holds = |path: std::path::PathBuf| {
        std::fs::read(path)
            .map(|c| {
                String::from_utf8_lossy(&c)
                    .replace('\0', " ")
                    .contains(marker)
            })
            .unwrap_or(false)
    };
    let me = std::process::id().to_string();
    !std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        e.file_name() != me.as_str()
            && (holds(e.path().join("cmdline")) || holds(e.path().join("environ")))
    })
}

#[test]
fn tune_refuses_what_it_cannot_do_with_the_fix() {
    for (args, says) in [
        (vec!["--param", "slots=1"], "--slo"),
        (vec!["--slo", "ttft_p90=1s"], "--param"),
        (vec!["--slo", "ttft_p90=1s", "--param", "n=1"], "{slots}"),
        (vec!["--slo", "ttft_p90=1s", "--param", "port=1"], "port"),
        (vec!["--slo", "ttft_p90=1s", "--param", "slots=1,"], "empty"),
        (
            vec!["--slo", "ttft_p90=1s", "--param", "slots=1", "--rate", "2"],
            "--rate",
        ),
        (
            vec![
                "--slo",
                "ttft_p90=1s",
                "--param",
                "slots=1",
                "--precision",
                "90%",
            ],
            "50%",
        ),
    ] {
        let o = tokenscope()
            .args(["tune", "--serve", "srv --port {port} -np {slots}"])
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let huge = write_file("tune-huge.toml", &"x".repeat(2 << 20));
    let o = tokenscope()
        .args([
            "tune",
            "--serve",
            "srv {port}",
            "--slo",
            "ttft_p90=1s",
            "--settings",
        ])
        .arg(&huge)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a settings file"));
}

/// The built-in engine as a server per setting (`sim serve --max-num-seqs
/// {n}`), its capacity planned first on the virtual clock with the same
/// flags: `--plan-first 2` measures the plan's two best, the tune
/// recommends the plan's best, and each measured capacity lies near its
/// planned one.
#[test]
fn plan_first_measures_the_plans_best_two_and_the_plan_agrees() {
    let out = run_dir("tune-plan-first");
    let marker = format!("tune-plan-{}", std::process::id());
    // The servers run on an A100's figures; the plan is told an H100 (the
    // catalogue's default): only calibration on the first measured setting
    // can bring the plan to what the servers do.
    let serve = format!(
        "{} sim serve --port {{port}} --max-num-seqs {{n}} --gpu a100-80gb",
        env!("CARGO_BIN_EXE_tokenscope")
    );
    let o = tokenscope()
        .env("TOKENSCOPE_TEST_MARK", &marker)
        .args(["tune", "--serve", &serve, "--sim", "--max-num-seqs {n}"])
        .args(["--param", "n=4,16,64", "--plan-first", "2"])
        .args(["--slo", "ttft_p90=200ms", "--input-tokens", "512"])
        .args([
            "--output-tokens",
            "64",
            "--requests",
            "100",
            "--precision",
            "10%",
        ])
        .args(["--min-point-time", "3s", "--auto-max-concurrency", "128"])
        .args(["--no-history", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("tune.json")).unwrap()).unwrap();
    let s = doc["settings"].as_array().unwrap();
    let planned = |i: usize| f(&s[i]["planned"]["bracket"]["capacity"]);
    let c = &doc["calibration"];
    assert_eq!(c["from"], "n=64", "{c}");
    assert!(out.join("profile.json").exists());
    // The plan that chose: its order (the one --sim gave, before calibration).
    let chose = |i: usize| match s[i]["planned_uncalibrated"].is_object() {
        true => f(&s[i]["planned_uncalibrated"]["bracket"]["capacity"]),
        false => planned(i),
    };
    assert!(chose(0) < chose(1) && chose(1) < chose(2), "{doc}");
    assert_eq!(s[0]["measured"], false, "n=4 is the plan's last");
    assert_eq!(
        (s[1]["measured"].as_bool(), s[2]["measured"].as_bool()),
        (Some(true), Some(true))
    );
    for i in [1, 2] {
        let m = f(&s[i]["capacity"]);
        // Uncalibrated, the H100's plan is 1.8–3.5 × what the A100 serves.
        assert!(chose(i) > 1.8 * m, "{}", s[i]["name"]);
        eprintln!(
            "{}: planned {} (as --sim gave it {}), measured {m}",
            s[i]["name"],
            planned(i),
            chose(i)
        );
    }
    if c["used"] == true {
        for i in [1, 2] {
            let (p, m) = (planned(i), f(&s[i]["capacity"]));
            // The engine served in real time runs late on a loaded machine, the
            // plan does not, and the fit rests on one setting's few points:
            // 35 % allowed; −23 to +8 % seen, where the plan before
            // calibration was +120 to +250 % off.
            assert!(
                (p - m).abs() <= 0.35 * m,
                "{}: planned {p}, measured {m}",
                s[i]["name"]
            );
        }
    } else {
        // The fit matched the medians but not the capacity of the setting it
        // was fitted to (one run in three here): set aside, and said why.
        let note = c["note"].as_str().unwrap();
        assert!(note.contains("does not hold at the capacity"), "{note}");
        assert!(s[1]["planned_uncalibrated"].is_null());
    }
    assert_eq!(doc["recommendations"][0]["setting"], "n=64");
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("the plan ranks it 3 of 3"), "{table}");
    assert!(no_process_named(&marker));
}

/// `--between-points reset-prefix-cache` on the built-in engine (vLLM's
/// endpoint): with the same prompts at both loads (`--consistency`), the
/// second point finds none of them cached, where without the reset it
/// reads 94 % of its prompt tokens from the cache (3,840 of 4,096).
#[test]
fn between_points_empties_the_built_in_engines_prefix_cache() {
    let cached = |reset: bool| {
        let out = run_dir(if reset {
            "between-reset"
        } else {
            "between-kept"
        });
        let mut cmd = tokenscope();
        cmd.args(["sweep", "--rate", "4,8", "--requests", "16"])
            .args(["--input-tokens", "256", "--output-tokens", "8"])
            .args(["--consistency", "--no-history", "--out"])
            .arg(&out);
        if reset {
            cmd.args(["--between-points", "reset-prefix-cache"]);
        }
        let o = cmd.output().unwrap();
        assert_ok(&o);
        let said = String::from_utf8_lossy(&o.stderr).to_string();
        assert_eq!(said.contains("/reset_prefix_cache: done"), reset, "{said}");
        let r = results(&out.join("point-01"));
        r["tokens"]["prefix_cache"]["cached_tokens"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(cached(true), 0);
    assert!(cached(false) > 3000);
}
