//! The results history against real databases: a SQLite file, and a real
//! PostgreSQL server that the README's test command starts
//! (scripts/postgres-fixture.sh sets TOKENSCOPE_TEST_POSTGRES; without it
//! the PostgreSQL tests fail, saying so).

mod common;
use common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;

/// The fixture's server URL (with its password).
fn postgres_server() -> String {
    std::env::var("TOKENSCOPE_TEST_POSTGRES").expect(
        "TOKENSCOPE_TEST_POSTGRES is not set: run the tests with scripts/test.sh, which starts PostgreSQL (scripts/postgres-fixture.sh)",
    )
}

/// A new, empty PostgreSQL database of its own for one test; its URL.
fn postgres_db(name: &str) -> String {
    let server = postgres_server();
    let mut admin =
        postgres::Client::connect(&server, postgres::NoTls).expect("connecting to the fixture");
    let db = format!("{name}_{}", std::process::id());
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
        .unwrap();
    admin
        .batch_execute(&format!("CREATE DATABASE {db}"))
        .unwrap();
    let base = server.rsplit_once('/').unwrap().0;
    format!("{base}/{db}")
}

/// The fixture's password, which no output may show.
fn postgres_password() -> String {
    let server = postgres_server();
    let userinfo = server
        .split("://")
        .nth(1)
        .unwrap()
        .split('@')
        .next()
        .unwrap();
    userinfo.split_once(':').unwrap().1.to_string()
}

/// A new SQLite history file's path.
fn sqlite_db(name: &str) -> String {
    let dir = run_dir(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("history.db").display().to_string()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `tokenscope history ARGS… --db DB`, which must succeed; its stdout.
fn history(db: &str, args: &[&str]) -> String {
    let o = tokenscope()
        .arg("history")
        .args(args)
        .args(["--db", db])
        .output()
        .unwrap();
    assert_ok(&o);
    String::from_utf8(o.stdout).unwrap()
}

fn history_json(db: &str, args: &[&str]) -> Value {
    let out = history(db, args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

/// A quick simulated run (virtual clock): Poisson arrivals, so runs with
/// different seeds differ as real runs do.
fn plan(db: &str, out: &Path, extra: &[&str]) -> Output {
    let o = tokenscope()
        .args([
            "sim",
            "plan",
            "--rate",
            "8",
            "--requests",
            "300",
            "--input-tokens",
            "256",
        ])
        .args(["--output-tokens", "64", "--out"])
        .arg(out)
        .args(["--db", db])
        .args(extra)
        .output()
        .unwrap();
    assert_ok(&o);
    o
}

fn ids(v: &Value) -> Vec<i64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect()
}

fn kinds(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn bench_sweep_plan_and_merge_record_their_runs() {
    let db = sqlite_db("hist-every");
    let server = Server::start(exact(20, 5));
    let dir = run_dir("hist-every-runs");
    let flags = exact_chat(&["--output-tokens", "4", "--input-tokens", "16"]);

    let b = bench(
        &server.url,
        &dir.join("bench"),
        &[
            &flags[..],
            &[
                "--requests",
                "6",
                "--concurrency",
                "2",
                "--tag",
                "smoke",
                "--db",
                &db,
            ],
        ]
        .concat(),
    );
    assert_ok(&b);
    assert!(
        text(&b).contains("history: run #1 recorded in"),
        "{}",
        text(&b)
    );
    plan(&db, &dir.join("plan"), &["--tag", "nightly", "--quiet"]);
    let o = tokenscope()
        .args([
            "sweep",
            "--url",
            &server.url,
            "--concurrency",
            "1,2",
            "--requests",
            "4",
            "--quiet",
            "--db",
            &db,
            "--out",
        ])
        .arg(dir.join("sweep"))
        .args(&flags)
        .output()
        .unwrap();
    assert_ok(&o);
    assert!(
        text(&o).contains("with its 2 points recorded"),
        "{}",
        text(&o)
    );
    plan(
        &db,
        &dir.join("plan-sweep"),
        &["--sweep", "concurrency:1,2", "--quiet"],
    );
    // Shards are recorded once merged, not each.
    for i in 0..2 {
        let shard = format!("{i}/2");
        let o = bench(
            &server.url,
            &dir.join(format!("shard{i}")),
            &[
                &flags[..],
                &[
                    "--requests",
                    "4",
                    "--concurrency",
                    "2",
                    "--shard",
                    &shard,
                    "--db",
                    &db,
                ],
            ]
            .concat(),
        );
        assert_ok(&o);
    }
    let o = tokenscope()
        .args(["merge"])
        .args([dir.join("shard0"), dir.join("shard1")])
        .arg("--out")
        .arg(dir.join("merged"))
        .args(["--db", &db])
        .output()
        .unwrap();
    assert_ok(&o);

    let all = history_json(&db, &["list", "--json"]);
    assert_eq!(
        kinds(&all),
        ["bench", "plan", "sweep", "sweep", "merge"],
        "{all:#}"
    );
    let with_points = history_json(&db, &["list", "--json", "--points"]);
    assert_eq!(with_points.as_array().unwrap().len(), 9);
    for r in with_points.as_array().unwrap() {
        let run_dir = Path::new(r["run_dir"].as_str().unwrap());
        assert!(run_dir.is_absolute() && run_dir.exists(), "{r}");
    }
    let bench_run = &all[0];
    assert_eq!(bench_run["model"], "tokenscope-exact");
    assert_eq!(bench_run["tags"], serde_json::json!(["smoke"]));
    assert_eq!(bench_run["requests"], 6);
    let figures: BTreeSet<&str> = bench_run["figures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["metric"].as_str().unwrap())
        .collect();
    for m in [
        "ttft_p50",
        "tpot_p50",
        "itl_p50",
        "e2e_p99",
        "output_tokens_per_s",
        "requests_per_s",
    ] {
        assert!(figures.contains(m), "{m} missing: {figures:?}");
    }
    let plan_run = &all[1];
    assert_eq!(plan_run["engine_version"], "tokenscope-sim 0.1.0");
    assert!(plan_run["target"]
        .as_str()
        .unwrap()
        .starts_with("sim://llama-3.1-8b"));

    // Filters.
    assert_eq!(
        kinds(&history_json(&db, &["list", "--json", "--kind", "plan"])),
        ["plan"]
    );
    assert_eq!(
        ids(&history_json(&db, &["list", "--json", "--tag", "nightly"])),
        [ids(&all)[1]]
    );
    assert_eq!(
        history_json(&db, &["list", "--json", "--model", "LLAMA"])
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        history_json(&db, &["list", "--json", "--model", "no-such"]),
        serde_json::json!([])
    );
    assert_eq!(
        history_json(&db, &["list", "--json", "--until", "2000-01-01"]),
        serde_json::json!([])
    );
    assert_eq!(
        history_json(&db, &["list", "--json", "--since", "2000-01-01"]),
        all
    );
    assert_eq!(
        ids(&history_json(&db, &["list", "--json", "--last", "2"])),
        ids(&all)[3..]
    );
    let points = history_json(&db, &["list", "--json", "--kind", "sweep-point"]);
    assert_eq!(points.as_array().unwrap().len(), 4);
    assert!(points
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["parent_id"].is_i64() && p["point"].is_string()));

    // A trend of one configuration, by one of its runs: the bench, the
    // sweep's point at the same load and the merged run measured the same
    // workload at the same concurrency on the same server.
    let trend = history_json(
        &db,
        &[
            "trend",
            "tpot_p50",
            "--run",
            &ids(&all)[0].to_string(),
            "--json",
        ],
    );
    let trended: Vec<i64> = trend["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["run_id"].as_i64().unwrap())
        .collect();
    let point_c2 = points
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["point"] == "concurrency 2" && p["target"] == bench_run["target"])
        .unwrap();
    assert_eq!(
        trended,
        [ids(&all)[0], point_c2["id"].as_i64().unwrap(), ids(&all)[4]],
        "{trend:#}"
    );
    assert!(trend["runs"]
        .as_array()
        .unwrap()
        .iter()
        .all(|j| j["verdict"] == "not_judged"));
    let listed = history(&db, &["list"]);
    assert!(
        listed.contains("[smoke]") && listed.contains("5 run(s) in"),
        "{listed}"
    );

    // compare takes history ids.
    let o = tokenscope()
        .args([
            "compare",
            &format!("#{}", ids(&all)[0]),
            &ids(&all)[4].to_string(),
            "--db",
            &db,
        ])
        .output()
        .unwrap();
    assert_ok(&o);
    assert!(
        text(&o).contains(dir.join("merged").to_str().unwrap()),
        "{}",
        text(&o)
    );
    let o = tokenscope()
        .args(["compare", "999", "1", "--db", &db])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("no run #999 in the history"),
        "{}",
        text(&o)
    );
}

/// Runs `n` simulated runs recorded into `db` (seeds 1..=n), then one with a
/// 20 % slower decode; their directories and outputs.
fn ten_then_slow(db: &str, name: &str) -> (Vec<PathBuf>, Vec<String>) {
    let dir = run_dir(name);
    let mut dirs = Vec::new();
    let mut outputs = Vec::new();
    let profile = slow_decode_profile("slow-decode-profile");
    for seed in 1..=11 {
        let out = dir.join(format!("run-{seed:02}"));
        let seed_text = seed.to_string();
        let mut extra = vec!["--seed", &seed_text, "--tag", "nightly"];
        let profile_text = profile.display().to_string();
        if seed == 11 {
            extra.extend(["--profile", &profile_text]);
        }
        let o = plan(db, &out, &extra);
        outputs.push(text(&o));
        dirs.push(out);
    }
    (dirs, outputs)
}

fn flagged(db: &str) -> (BTreeSet<i64>, Value) {
    let changes = history_json(db, &["changes", "--json"]);
    let runs = changes
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["run_id"].as_i64().unwrap())
        .collect();
    (runs, changes)
}

#[test]
fn a_slower_decode_is_the_one_change_point_and_both_databases_agree() {
    let live = sqlite_db("hist-change-live");
    let (dirs, outputs) = ten_then_slow(&live, "hist-change");
    // The run itself says so as it is recorded, and only that run.
    for (i, o) in outputs.iter().enumerate() {
        let says = o.contains("differs from its history");
        assert_eq!(says, i == 10, "run {}: {o}", i + 1);
    }
    assert!(
        outputs[10].contains("tpot_p50") && outputs[10].contains("a regression"),
        "{}",
        outputs[10]
    );
    let (runs, changes) = flagged(&live);
    assert_eq!(runs, BTreeSet::from([11]), "{changes:#}");
    let tpot = changes
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["metric"] == "tpot_p50")
        .expect("tpot_p50 flagged");
    let change = tpot["change"].as_f64().unwrap();
    assert!((12.0..35.0).contains(&change), "TPOT change {change} %");
    assert_eq!(tpot["verdict"], "change");
    assert_eq!(tpot["history"], 10);

    // The same directories imported into a fresh SQLite file and a fresh
    // PostgreSQL database give the same answers, field for field.
    let sqlite = sqlite_db("hist-change-import");
    let pg = postgres_db("hist_change");
    let sweep = run_dir("hist-change-sweep");
    plan(
        &live,
        &sweep,
        &["--sweep", "concurrency:1,4", "--quiet", "--no-history"],
    );
    let mut args: Vec<String> = vec!["import".into()];
    args.extend(dirs.iter().map(|d| d.display().to_string()));
    args.push(sweep.display().to_string());
    args.extend(["--tag".into(), "imported".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    for db in [&sqlite, &pg] {
        let out = history(db, &args);
        assert!(
            out.contains("imported 12, already there 0, failed 0"),
            "{out}"
        );
        let again = history(db, &args);
        assert!(again.contains("imported 0, already there 12"), "{again}");
    }
    let strip = |mut v: Value| {
        for r in v.as_array_mut().unwrap() {
            r.as_object_mut().unwrap().remove("recorded_at");
        }
        v
    };
    for query in [
        &["list", "--json"][..],
        &["list", "--json", "--points"],
        &["list", "--json", "--kind", "sweep-point"],
        &["list", "--json", "--tag", "nightly", "--last", "3"],
        &[
            "list",
            "--json",
            "--model",
            "Llama",
            "--since",
            "2000-01-01",
        ],
        &["changes", "--json"],
    ] {
        let (a, b) = (history_json(&sqlite, query), history_json(&pg, query));
        let (a, b) = if query[0] == "list" {
            (strip(a), strip(b))
        } else {
            (a, b)
        };
        assert_eq!(a, b, "{query:?}");
    }
    assert_eq!(flagged(&pg).0, BTreeSet::from([11]));
    for metric in ["tpot_p50", "ttft_p99", "output_tokens_per_s"] {
        let q = ["trend", metric, "--run", "1", "--json"];
        assert_eq!(history_json(&sqlite, &q), history_json(&pg, &q), "{metric}");
    }
    let csv = |db: &str| -> Vec<String> {
        history(db, &["export", "--format", "csv", "--points"])
            .lines()
            .map(|l| {
                let mut cells: Vec<&str> = l.split(',').collect();
                cells.remove(1); // recorded_at
                cells.join(",")
            })
            .collect()
    };
    let (a, b) = (csv(&sqlite), csv(&pg));
    assert_eq!(a.len(), 1 + 12 + 2);
    assert_eq!(a, b);
    let trend = history(&pg, &["trend", "tpot_p50", "--run", "1"]);
    assert!(
        trend.contains("⚑") && trend.contains("regression"),
        "{trend}"
    );
}

#[test]
fn in_real_time_ten_runs_of_the_engine_then_a_slower_decode_flag_that_run_alone() {
    // The built-in engine served in real time on one port (one target), ten
    // runs, then the same engine with a 20 % slower decode on that port.
    let db = sqlite_db("hist-real-time");
    let dir = run_dir("hist-real-time");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let load = [
        "--requests",
        "48",
        "--concurrency",
        "8",
        "--output-tokens",
        "32",
        "--input-tokens",
        "128",
    ];
    let run = |i: usize| {
        let out = dir.join(format!("run-{i:02}"));
        let o = bench(
            &url,
            &out,
            &[&load[..], &["--seed", &i.to_string(), "--db", &db]].concat(),
        );
        assert_ok(&o);
        text(&o)
    };
    let normal = SimServe::start(port, &[]);
    let said: Vec<String> = (1..=10).map(run).collect();
    drop(normal);
    let profile = slow_decode_profile("slow-decode-profile")
        .display()
        .to_string();
    let _slow = SimServe::start(port, &["--profile", &profile]);
    let last = run(11);
    // A loaded machine can move a calm run's figures by a few percent for
    // reasons of its own (a neighbour on the cores), and the rule may then
    // rightly flag that run; the strict "that run alone" check is the
    // virtual clock's test above. Here: the slower decode is flagged on the
    // decode figures, and no earlier run is flagged on them.
    let decode = |j: &Value| ["tpot_p50", "itl_p50"].contains(&j["metric"].as_str().unwrap());
    assert!(
        last.contains("differs from its history: tpot_p50"),
        "{last}"
    );
    let (_, changes) = flagged(&db);
    let on_decode: BTreeSet<i64> = changes
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| decode(j))
        .map(|j| j["run_id"].as_i64().unwrap())
        .collect();
    assert_eq!(on_decode, BTreeSet::from([11]), "{changes:#}\n{said:#?}");
}

/// Starts `n` simulated runs at once, all recording into `db`.
fn at_once(db: &str, name: &str, n: usize) {
    let dir = run_dir(name);
    let children: Vec<_> = (0..n)
        .map(|i| {
            tokenscope()
                .args([
                    "sim",
                    "plan",
                    "--requests",
                    "50",
                    "--quiet",
                    "--seed",
                    &i.to_string(),
                    "--db",
                    db,
                    "--out",
                ])
                .arg(dir.join(format!("run-{i}")))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let o = c.wait_with_output().unwrap();
        assert_ok(&o);
        assert!(!text(&o).contains("not updated"), "{}", text(&o));
    }
}

#[test]
fn concurrent_writers_lose_nothing() {
    let sqlite = sqlite_db("hist-concurrent");
    let pg = postgres_db("hist_concurrent");
    for (db, name) in [
        (&sqlite, "hist-concurrent-sqlite"),
        (&pg, "hist-concurrent-pg"),
    ] {
        // A new database: the processes also race to create its schema.
        at_once(db, name, 6);
        let runs = history_json(db, &["list", "--json"]);
        let mut got = ids(&runs);
        got.sort();
        assert_eq!(got, (1..=6).collect::<Vec<i64>>(), "{db}");
    }
}

#[test]
fn an_unreachable_or_read_only_history_never_fails_the_run() {
    let server = Server::start(exact(20, 5));
    let dir = run_dir("hist-unreachable");
    let flags = exact_chat(&["--output-tokens", "4", "--requests", "3"]);
    let closed = format!("postgres://ci:hunter2@127.0.0.1:{}/perf", free_port());
    let ro_file = sqlite_db("hist-read-only");
    plan(&ro_file, &dir.join("first"), &["--quiet"]);
    let read_only = format!("file:{ro_file}?mode=ro");
    let not_a_dir = format!(
        "{}/history.db",
        dir.join("first").join("results.json").display()
    );
    for (i, db) in [&closed, &read_only, &not_a_dir].into_iter().enumerate() {
        let out = dir.join(format!("run-{i}"));
        let o = bench(&server.url, &out, &[&flags[..], &["--db", db]].concat());
        assert_eq!(o.status.code(), Some(0), "{db}: {}", text(&o));
        assert!(out.join("results.json").exists() && out.join("requests.jsonl").exists());
        let said = text(&o);
        assert!(
            said.contains("history: not updated (the run directory is complete)"),
            "{db}: {said}"
        );
        assert!(!said.contains("hunter2"), "{said}");
        // With --json, stdout stays the document alone and stderr says it.
        let out = dir.join(format!("json-{i}"));
        let o = bench(
            &server.url,
            &out,
            &[&flags[..], &["--db", db, "--json"]].concat(),
        );
        assert_eq!(o.status.code(), Some(0));
        serde_json::from_slice::<Value>(&o.stdout).expect("stdout is the results document");
        assert!(String::from_utf8_lossy(&o.stderr).contains("warning: history not updated"));
    }
    // The read-only file was read, never written.
    assert_eq!(
        history_json(&ro_file, &["list", "--json"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // A history command on an unreachable database is an error that says where.
    let o = tokenscope()
        .args(["history", "list", "--db", &closed])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let said = text(&o);
    assert!(
        said.contains("postgres://ci:***@127.0.0.1") && said.contains("connecting"),
        "{said}"
    );
    assert!(!said.contains("hunter2"), "{said}");
}

#[test]
fn the_database_password_is_never_shown_nor_stored() {
    let pg = postgres_db("hist_secret");
    let password = postgres_password();
    let out = run_dir("hist-secret");
    let o = tokenscope()
        .args(["sim", "plan", "--requests", "20", "--out"])
        .arg(&out)
        .env("TOKENSCOPE_DB", &pg)
        .output()
        .unwrap();
    assert_ok(&o);
    let said = text(&o);
    assert!(
        said.contains("history: run #1 recorded in postgres://tokenscope:***@"),
        "{said}"
    );
    for (what, body) in [
        ("output", said),
        (
            "results.json",
            std::fs::read_to_string(out.join("results.json")).unwrap(),
        ),
        (
            "config.toml",
            std::fs::read_to_string(out.join("config.toml")).unwrap(),
        ),
        ("history list", history(&pg, &["list"])),
        (
            "--help",
            String::from_utf8(
                tokenscope()
                    .args(["bench", "--help"])
                    .env("TOKENSCOPE_DB", &pg)
                    .output()
                    .unwrap()
                    .stdout,
            )
            .unwrap(),
        ),
    ] {
        assert!(
            !body.contains(&password),
            "{what} shows the password:\n{body}"
        );
    }
    // The recorded run is there, under the URL given by the environment.
    let runs = history_json(&pg, &["list", "--json"]);
    assert_eq!(kinds(&runs), ["plan"]);
}

#[test]
fn runs_without_history_are_not_recorded_and_bad_filters_are_refused() {
    let db = sqlite_db("hist-off");
    let out = run_dir("hist-off");
    let o = tokenscope()
        .args([
            "sim",
            "plan",
            "--requests",
            "20",
            "--no-history",
            "--db",
            &db,
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    assert!(!text(&o).contains("history:"), "{}", text(&o));
    assert_eq!(
        history_json(&db, &["list", "--json"]),
        serde_json::json!([])
    );
    for (args, says) in [
        (&["list", "--kind", "nope"][..], "--kind nope"),
        (&["trend", "nope"], "not a recorded figure"),
        (&["changes", "--metric", "nope"], "not a recorded figure"),
        (&["trend", "tpot_p50"], "no runs"),
    ] {
        let o = tokenscope()
            .arg("history")
            .args(args)
            .args(["--db", &db])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(text(&o).contains(says), "{args:?}: {}", text(&o));
    }
}

/// The fixture's CA files (its server's, and one that signed nothing).
fn postgres_ca(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: run the tests with scripts/test.sh (scripts/postgres-fixture.sh)")
    })
}

/// A shared history over TLS: the fixture's `tlsonly` database refuses
/// plain connections, so a run recorded there went over TLS. `verify-full`
/// with the server's CA records it (by 127.0.0.1 and by localhost, the
/// names its certificate holds); with a CA that signed nothing it is
/// refused, the run whole and the summary saying so; `require` encrypts
/// without verifying, as libpq's does.
#[test]
fn a_shared_history_over_tls_verifies_the_server_and_plain_is_refused() {
    let server = postgres_server();
    let base = server.rsplit_once('/').unwrap().0.to_string();
    let tlsonly = format!("{base}/tlsonly");
    let (ca, other) = (
        postgres_ca("TOKENSCOPE_TEST_POSTGRES_CA"),
        postgres_ca("TOKENSCOPE_TEST_POSTGRES_OTHER_CA"),
    );
    let password = postgres_password();
    let record = |db: &str, name: &str| {
        let o = plan(db, &run_dir(name), &[]);
        let said = text(&o);
        assert!(!said.contains(&password), "the password was shown: {said}");
        said
    };
    let plain = record(&tlsonly, "tls-plain");
    assert!(plain.contains("no encryption"), "{plain}");
    let verified = format!("{tlsonly}?sslmode=verify-full&sslrootcert={ca}");
    record(&verified, "tls-verified");
    let by_name = verified.replace("127.0.0.1", "localhost");
    record(&by_name, "tls-by-name");
    let runs = history_json(&verified, &["list", "--json"]);
    assert!(ids(&runs).len() >= 2, "{runs}");
    let wrong = record(
        &format!("{tlsonly}?sslmode=verify-full&sslrootcert={other}"),
        "tls-wrong-ca",
    );
    assert!(wrong.to_lowercase().contains("certificate"), "{wrong}");
    record(&format!("{tlsonly}?sslmode=require"), "tls-require");
    let after = history_json(&verified, &["list", "--json"]);
    assert_eq!(
        ids(&after).len(),
        ids(&runs).len() + 1,
        "require recorded one more"
    );
}
