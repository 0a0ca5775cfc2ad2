//! The simulated engine served in real time (`sim serve`, bench's default
//! target): its `/metrics` agree with what its clients saw, and it agrees with
//! the same engine on the virtual clock (`sim plan`).

mod common;
use common::*;

#[test]
fn metrics_agree_with_what_the_clients_saw() {
    let mut config = default_engine();
    config.gpu_memory_utilization = 0.25; // ~16K tokens of KV: 64 streams of 512 overflow it
    let engine = Engine::start(config);
    let out = run_dir("engine-metrics");
    let child = tokenscope()
        .args([
            "bench",
            "--url",
            &engine.url,
            "--quiet",
            "--concurrency",
            "64",
            "--requests",
            "64",
        ])
        .args(["--input-tokens", "256", "--output-tokens", "256", "--out"])
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let mid = http_get(&format!("{}/metrics", engine.url));
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let after = http_get(&format!("{}/metrics", engine.url));

    // Mid-run the cache is nearly full and requests wait; afterwards all is free.
    let kv_mid = prom_value(&mid, "vllm:kv_cache_usage_perc");
    assert!(kv_mid > 0.8, "KV usage mid-run {kv_mid}");
    assert!(prom_value(&mid, "vllm:num_requests_running") > 0.0);
    assert!(prom_value(&mid, "vllm:num_requests_waiting") > 0.0);
    assert_eq!(prom_value(&after, "vllm:kv_cache_usage_perc"), 0.0);
    assert_eq!(prom_value(&after, "vllm:num_requests_running"), 0.0);

    // Counters and histograms add up to the per-request truth the clients got
    // (the records' `server_timings`), plus the one-token API probe.
    let recs = records(&out);
    let sum = |key: &str| {
        recs.iter()
            .map(|r| r["server_timings"][key].as_f64().unwrap())
            .sum::<f64>()
    };
    let preemptions = sum("preemptions");
    assert!(preemptions > 0.0, "the cut cache preempts");
    assert_eq!(
        prom_value(&after, "vllm:num_preemptions_total"),
        preemptions
    );
    assert_eq!(
        prom_value(&after, "vllm:request_queue_time_seconds_count"),
        65.0
    );
    let queue_s = prom_value(&after, "vllm:request_queue_time_seconds_sum");
    assert!(
        queue_s >= sum("queue_ms") / 1e3 && queue_s - sum("queue_ms") / 1e3 < 0.05,
        "queue time: metrics {queue_s} s, requests {} s",
        sum("queue_ms") / 1e3
    );
    let tokens: f64 = recs
        .iter()
        .map(|r| r["output_tokens"].as_f64().unwrap())
        .sum();
    assert_eq!(
        prom_value(&after, "vllm:generation_tokens_total"),
        tokens + 1.0
    );
    let r = results(&out);
    assert_eq!(stat(&r, "tokens.output_total"), tokens);
    let ttft_count = prom_value(&after, "vllm:time_to_first_token_seconds_count");
    assert_eq!(ttft_count, 65.0);

    // tokenscope read the same metrics during the run: preemptions and the
    // recompute diagnosis, with the numbers behind it.
    assert_eq!(r["server"]["kind"], "tokenscope-sim");
    assert_eq!(stat(&r, "server.metrics.preemptions"), preemptions);
    assert_eq!(stat(&r, "efficiency.kv_cache.preemptions"), preemptions);
    assert!(stat(&r, "efficiency.kv_cache.usage_max") > 0.9);
    assert!(has_rule(&r, "recompute_thrash"), "{:?}", rules(&r));
}

#[test]
fn overload_is_read_from_the_servers_metrics_and_diagnosed() {
    let mut config = default_engine();
    config.max_num_seqs = Some(8); // ~15 requests/s of 64 tokens: 40/s is far above
    let engine = Engine::start(config);
    let out = run_dir("engine-overload");
    let o = bench(
        &engine.url,
        &out,
        &[
            "--rate",
            "40",
            "--duration",
            "4s",
            "--input-tokens",
            "128",
            "--output-tokens",
            "64",
            "--scrape-interval",
            "250ms",
        ],
    );
    assert_ok(&o);
    let r = results(&out);
    assert_eq!(r["server"]["kind"], "tokenscope-sim");
    let waiting = &r["server"]["metrics"]["waiting"];
    let (first, last) = (
        waiting["first"].as_f64().unwrap(),
        waiting["last"].as_f64().unwrap(),
    );
    assert!(
        last > first + 20.0,
        "waiting requests grow through the run: {first} → {last}"
    );
    assert!(waiting["slope_per_s"].as_f64().unwrap() > 5.0);
    assert!(has_rule(&r, "overload"), "{:?}", rules(&r));
    assert!(has_rule(&r, "ttft_queue_dominated"), "{:?}", rules(&r));
    // The queue time read from /metrics is the engine's own (per request, in `timings`).
    let recs = records(&out);
    let own: f64 = recs
        .iter()
        .map(|r| r["server_timings"]["queue_ms"].as_f64().unwrap())
        .sum::<f64>()
        / recs.len() as f64;
    let scraped = stat(&r, "server.metrics.queue_time.mean_ms");
    assert!(
        (scraped - own).abs() / own < 0.05,
        "queue time: scraped {scraped} ms, engine's own {own} ms"
    );
    // The time series is on the requests' clock, one line per scrape.
    let lines = std::fs::read_to_string(out.join("timeseries.jsonl")).unwrap();
    let series: Vec<serde_json::Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(series.len() >= 16, "{} scrapes", series.len());
    assert!(series.iter().any(|l| l["in_flight"].as_u64().unwrap() > 8));
    assert!(series
        .windows(2)
        .all(|w| w[1]["t_s"].as_f64() > w[0]["t_s"].as_f64()));
}

#[test]
fn real_time_serving_agrees_with_the_virtual_clock() {
    let engine = Engine::start(default_engine());
    let load = [
        "--concurrency",
        "8",
        "--requests",
        "48",
        "--warmup",
        "8",
        "--ramp-up",
        "1s",
    ];
    let shape = [
        "--input-tokens",
        "uniform:128..512",
        "--output-tokens",
        "uniform:32..96",
        "--seed",
        "5",
    ];
    let served = run_dir("engine-served");
    let o = bench(&engine.url, &served, &[&load[..], &shape[..]].concat());
    assert_ok(&o);
    let planned = run_dir("engine-planned");
    assert_ok(&sim_plan(&planned, &[&load[..], &shape[..]].concat()));
    let (s, p) = (results(&served), results(&planned));
    assert_eq!(p["simulated"]["model"], "llama-3.1-8b");
    for (metric, tolerance) in [
        ("latency.tpot_ms.p50", 0.05),
        ("latency.e2e_ms.p50", 0.05),
        ("latency.ttft_ms.p50", 0.2),
    ] {
        let (a, b) = (stat(&s, metric), stat(&p, metric));
        eprintln!("{metric}: served {a:.2}, planned {b:.2}");
        assert!(
            (a - b).abs() / b <= tolerance,
            "{metric}: served {a} vs planned {b}"
        );
    }
}

/// Multi-step scheduling (`--num-scheduler-steps`, vLLM 0.6) in real time:
/// a block's tokens reach the client as one chunk, so the gaps between
/// chunks are a block of steps while ITL split over a chunk stays a step —
/// as `sim plan` predicts on its virtual clock.
#[test]
fn multi_step_blocks_arrive_as_bursts_in_real_time_as_planned() {
    let port = free_port();
    let engine = ["--engine", "vllm-v0", "--num-scheduler-steps", "8"];
    let _server = SimServe::start(port, &engine);
    let load = [
        "--concurrency",
        "4",
        "--requests",
        "24",
        "--warmup",
        "4",
        "--input-tokens",
        "256",
        "--output-tokens",
        "uniform:48..80",
        "--seed",
        "3",
    ];
    let served = run_dir("multi-step-served");
    let url = format!("http://127.0.0.1:{port}");
    assert_ok(&bench(&url, &served, &load));
    let planned = run_dir("multi-step-planned");
    assert_ok(&sim_plan(&planned, &[&engine[..], &load[..]].concat()));
    let (s, p) = (results(&served), results(&planned));
    for r in [&s, &p] {
        assert_eq!(r["tokens"]["multi_token_chunks"], true, "{}", r["tokens"]);
        let (icl, itl) = (stat(r, "latency.icl_ms.p50"), stat(r, "latency.itl_ms.p50"));
        assert!(
            icl > 5.0 * itl,
            "chunks a block apart: ICL {icl} vs ITL {itl}"
        );
    }
    // Generous: the served engine's steps stretch on a loaded machine.
    for (metric, tolerance) in [("latency.icl_ms.p50", 0.3), ("latency.tpot_ms.p50", 0.3)] {
        let (a, b) = (stat(&s, metric), stat(&p, metric));
        eprintln!("{metric}: served {a:.2}, planned {b:.2}");
        assert!(
            (a - b).abs() / b <= tolerance,
            "{metric}: served {a} vs planned {b}"
        );
    }
}

/// `sim serve --replicas 2`: two engines behind one endpoint, each with its
/// own KV cache, `/metrics` labelled as vLLM's data parallelism labels them
/// — and tokenscope's telemetry reads the pair as one server.
#[test]
fn two_engines_behind_one_endpoint_are_read_as_one_server() {
    let port = free_port();
    let server = SimServe::start(port, &["--replicas", "2", "--router", "least-outstanding"]);
    let url = format!("http://127.0.0.1:{port}");
    let out = run_dir("engine-two-replicas");
    let o = bench(
        &url,
        &out,
        &[
            "--api",
            "openai-chat",
            "--requests",
            "40",
            "--concurrency",
            "8",
            "--output-tokens",
            "32",
            "--scrape-interval",
            "200ms",
        ],
    );
    let text = http_get(&format!("{url}/metrics"));
    drop(server);
    assert_ok(&o);
    // One family, one series per engine.
    assert_eq!(
        text.matches("# TYPE vllm:num_requests_running gauge")
            .count(),
        1,
        "{text}"
    );
    let generated: Vec<f64> = ["0", "1"]
        .iter()
        .map(|i| {
            let line = text
                .lines()
                .find(|l| {
                    l.starts_with("vllm:generation_tokens_total")
                        && l.contains(&format!("engine=\"{i}\""))
                })
                .unwrap_or_else(|| panic!("engine {i}: {text}"));
            line.rsplit(' ').next().unwrap().parse().unwrap()
        })
        .collect();
    // Least-outstanding shares the closed loop's eight streams between them.
    assert!(generated.iter().all(|&g| g > 0.0), "{generated:?}");
    assert_eq!(generated.iter().sum::<f64>(), 40.0 * 32.0);
    let r = results(&out);
    let blocks: f64 = text
        .lines()
        .find(|l| l.starts_with("vllm:cache_config_info"))
        .and_then(|l| l.split("num_gpu_blocks=\"").nth(1))
        .and_then(|v| v.split('"').next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    let m = &r["server"]["metrics"];
    assert_eq!(
        m["kv_capacity_tokens"].as_f64(),
        Some(2.0 * blocks * 16.0),
        "capacity: both caches"
    );
    let usage_max = m["kv_usage"]["max"].as_f64().unwrap();
    assert!(
        usage_max > 0.0 && usage_max < 0.5,
        "usage is the engines' mean, not their sum: {usage_max}"
    );
    assert!(
        m["running"]["max"].as_f64().unwrap() > 4.0,
        "running is summed over the engines: {m}"
    );
}

/// `sim serve --replicas 2 --router kv-aware` reads the engines' caches as
/// requests arrive: every later turn of a session goes to the engine that
/// holds its conversation and finds all of it cached, while both engines
/// serve. Round-robin, one request at a time, alternates engines: each
/// session's second turn lands on the engine that has never seen it.
#[test]
fn kv_aware_routing_in_real_time_sends_each_turn_to_the_engine_holding_its_conversation() {
    let run = |router: &str, concurrency: &str| {
        let port = free_port();
        let server = SimServe::start(port, &["--replicas", "2", "--router", router]);
        let url = format!("http://127.0.0.1:{port}");
        let out = run_dir(&format!("engine-router-{router}"));
        let o = bench(
            &url,
            &out,
            &[
                "--api",
                "openai-chat",
                "--multi-turn",
                "--turns",
                "4",
                "--concurrency",
                concurrency,
                "--requests",
                "32",
                "--input-tokens",
                "64",
                "--output-tokens",
                "16",
                "--seed",
                "7",
            ],
        );
        let metrics = http_get(&format!("{url}/metrics"));
        drop(server);
        assert_ok(&o);
        (records(&out), metrics)
    };
    // Per later turn (session, turn): cached tokens, and what the engine
    // could have cached (every full 16-token block of the last prompt and its
    // answer but the answer's last token, as the one-engine session test finds).
    let later_turns = |recs: &[serde_json::Value]| -> Vec<((u64, u64), u64, u64)> {
        let by: std::collections::BTreeMap<(u64, u64), &serde_json::Value> = recs
            .iter()
            .map(|r| {
                (
                    (r["session"].as_u64().unwrap(), r["turn"].as_u64().unwrap()),
                    r,
                )
            })
            .collect();
        by.iter()
            .filter(|((_, k), _)| *k > 0)
            .map(|(&(s, k), r)| {
                let prev = by[&(s, k - 1)];
                let context = prev["input_tokens"].as_u64().unwrap()
                    + prev["output_tokens"].as_u64().unwrap();
                (
                    (s, k),
                    r["cached_tokens"].as_u64().unwrap(),
                    (context - 1) / 16 * 16,
                )
            })
            .collect()
    };
    let (recs, metrics) = run("kv-aware", "4");
    let kv = later_turns(&recs);
    assert_eq!(kv.len(), 24, "8 sessions × 3 later turns");
    assert!(
        kv.iter().all(|&(_, cached, could)| cached == could),
        "kv-aware: every later turn finds its whole conversation: {kv:?}"
    );
    let served = |i: &str| {
        metrics
            .lines()
            .find(|l| {
                l.starts_with("vllm:generation_tokens_total")
                    && l.contains(&format!("engine=\"{i}\""))
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    assert!(
        served("0") > 0.0 && served("1") > 0.0,
        "both engines serve: {metrics}"
    );

    let (recs, _) = run("round-robin", "1");
    let rr = later_turns(&recs);
    let missed: Vec<(u64, u64)> = rr
        .iter()
        .filter(|&&(_, cached, _)| cached == 0)
        .map(|&(turn, ..)| turn)
        .collect();
    assert_eq!(
        missed.len(),
        8,
        "each session's second turn, on the other engine: {rr:?}"
    );
    assert!(missed.iter().all(|&(_, k)| k == 1), "{missed:?}");
}

/// `sim serve --spec-decode` speculates as vLLM does and says so in vLLM's
/// counters: a bench run reads back the acceptance it was given, and the
/// accepted tokens arrive together, several to a chunk.
#[test]
fn a_bench_run_reads_back_the_speculation_it_was_given() {
    let port = free_port();
    let spec = "k=4,acceptance=0.6,method=ngram";
    let _server = SimServe::start(port, &["--spec-decode", spec]);
    let out = run_dir("spec-serve");
    let url = format!("http://127.0.0.1:{port}");
    let o = bench(
        &url,
        &out,
        &[
            "--concurrency",
            "8",
            "--requests",
            "32",
            "--input-tokens",
            "64",
            "--output-tokens",
            "128",
        ],
    );
    assert_ok(&o);
    let r = results(&out);
    let s = &r["server"]["metrics"]["spec_decode"];
    let rate = s["acceptance_rate"].as_f64().expect("acceptance read");
    assert!((rate - 0.6).abs() < 0.05, "acceptance {rate}: {s}");
    let length = s["mean_accepted_length"].as_f64().unwrap();
    assert!(
        (length - 3.4).abs() < 0.2,
        "1 + 4 × 0.6 = 3.4 tokens a step, read {length}"
    );
    assert!(s["drafts"].as_f64().unwrap() > 500.0, "{s}");
    assert!(
        has_rule(&r, "spec_decode"),
        "TPOT explained by the acceptance"
    );
    let positions = s["acceptance_by_position"].as_array().unwrap();
    assert_eq!(positions.len(), 4);
    assert!(
        positions[0].as_f64() > positions[3].as_f64(),
        "later positions pass less often"
    );
    assert_eq!(
        r["tokens"]["multi_token_chunks"], true,
        "accepted tokens come together"
    );

    // `sim calibrate` learns the acceptance from those counters, and a plan
    // with the profile speculates the same.
    let profile = out.join("profile.json");
    let o = tokenscope()
        .args(["sim", "calibrate", "--out"])
        .arg(&profile)
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    let p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&profile).unwrap()).unwrap();
    let learned = p["spec_decode"].as_str().expect("the profile speculates");
    assert!(learned.contains("method=eagle"), "{learned}");
    let plan = run_dir("spec-plan");
    let o = sim_plan(
        &plan,
        &[
            "--profile",
            profile.to_str().unwrap(),
            "--concurrency",
            "8",
            "--requests",
            "64",
        ],
    );
    assert_ok(&o);
    let planned = results(&plan);
    let rate = stat(&planned, "server.metrics.spec_decode.acceptance_rate");
    assert!(
        (rate - 0.6).abs() < 0.06,
        "planned acceptance {rate} from {learned}"
    );
}

/// The served static-batching engine gathers requests sent together into
/// one batch, as `sim plan`'s does, though its front end hands them over
/// one tokenisation apart: every member is prefilled in the same step
/// (the same prefill time), none alone ahead of the others. (The members
/// reach the engine one task at a time; its `BatchGate` holds the step
/// until all those due are in: without it, 1 + 7 was common, on an idle
/// machine too. Each 20,000-token prompt keeps the front end busy ~31 ms,
/// so a loaded client that sends eight within that of each other still
/// makes one batch; Llama-3.2-1B keeps the batch's prefill short.)
#[test]
fn a_served_static_batch_is_prefilled_together() {
    let cat = tokenscope_sim::engine::catalogue::Catalogue::builtin();
    let mut config = tokenscope_sim::engine::EngineConfig::new(
        cat.model("llama-3.2-1b").unwrap(),
        cat.gpu("h100-sxm").unwrap(),
    );
    config.set_engine(tokenscope_sim::engine::preset::Preset::Static);
    let engine = Engine::start(config);
    let out = run_dir("engine-static-batch");
    let o = bench(
        &engine.url,
        &out,
        &[
            "--concurrency",
            "8",
            "--requests",
            "8",
            "--input-tokens",
            "20000",
            "--output-tokens",
            "2",
        ],
    );
    assert_ok(&o);
    let prefill_ms: Vec<f64> = records(&out)
        .iter()
        .map(|r| r["server_timings"]["prefill_ms"].as_f64().unwrap())
        .collect();
    let (lo, hi) = prefill_ms
        .iter()
        .fold((f64::MAX, 0.0f64), |(lo, hi), &p| (lo.min(p), hi.max(p)));
    assert!(
        prefill_ms.len() == 8 && hi - lo <= 0.01 * hi,
        "one batch has one prefill step: {prefill_ms:?}"
    );
}

/// A prompt the cache cannot hold is refused with a 400, as vLLM refuses a
/// request over its max_model_len, and the engine goes on serving: before,
/// it waited forever for blocks that never come free, holding up every
/// request behind it. `/v1/models` says the length it takes.
#[test]
fn a_prompt_longer_than_the_cache_holds_is_refused_and_the_engine_serves_on() {
    let mut config = default_engine();
    config.gpu_memory_utilization = 0.25; // ~16K tokens of KV, under the 128K context
    let max_len = config.max_model_len();
    assert!(max_len < 131_072);
    let engine = Engine::start(config);
    let models = http_get(&format!("{}/v1/models", engine.url));
    assert!(
        models.contains(&format!("\"max_model_len\":{max_len}")),
        "{models}"
    );
    let bench = |input: u64, name: &str| {
        let out = run_dir(name);
        let o = tokenscope()
            .args([
                "bench",
                "--url",
                &engine.url,
                "--quiet",
                "--concurrency",
                "2",
            ])
            .args([
                "--requests",
                "4",
                "--output-tokens",
                "8",
                "--timeout",
                "30s",
            ])
            .args(["--input-tokens", &input.to_string(), "--out"])
            .arg(&out)
            .output()
            .unwrap();
        (o, records(&out))
    };
    let (_, refused) = bench(max_len + 1000, "engine-too-long");
    assert_eq!(refused.len(), 4);
    for r in &refused {
        assert_eq!(r["error_kind"], "http_400", "{r}");
        assert!(
            r["error"]
                .as_str()
                .unwrap()
                .contains("maximum context length"),
            "{r}"
        );
    }
    let (o, served) = bench(512, "engine-after-refusals");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        served.iter().all(|r| r["error_kind"].is_null()),
        "{served:?}"
    );
}
