//! `tokenscope sim exact`: the exact server on its own, for other tools and benchmarks.

use crate::cli::{ExactArgs, FaultArgs, ServeArgs};
use crate::exit::Exit;
use anyhow::Context;
use tokenscope_sim::exact::{ExactConfig, ExactServer};
use tokenscope_sim::faults::Faults;
use tokenscope_sim::serve::{EngineServer, ServeOptions};

pub fn exact_config(a: &ExactArgs) -> ExactConfig {
    ExactConfig {
        model: a.model.clone(),
        ttft: a.ttft,
        itl: a.itl,
        tokens_per_chunk: a.tokens_per_chunk,
        default_output_tokens: a.output_tokens,
        faults: faults(&a.faults),
        stall: a.faults.stall_for,
        seed: a.faults.fault_seed,
        reasoning_tokens: a.reasoning_tokens,
        reasoning_as: a.reasoning_as,
        keep_bodies: 0,
        slots: a.slots,
    }
}

fn faults(a: &FaultArgs) -> Faults {
    Faults {
        http_429: a.error_429,
        http_500: a.error_500,
        http_503: a.error_503,
        disconnect: a.disconnect,
        malformed: a.malformed,
        stall: a.stall,
        bad_json: a.bad_json,
        bad_tool_args: a.bad_tool_args,
        wrong_answers: a.wrong_answers,
        diverge_above: a.diverge_above,
        diverge: a.diverge,
    }
}

fn check_faults(f: &Faults) -> Option<Exit> {
    (f.total() > 1.0).then(|| {
        eprintln!(
            "tokenscope: error: the fault shares add up to {}, more than 1",
            f.total()
        );
        Exit::Usage
    })
}

/// `tokenscope sim serve`: the engine in real time.
pub fn engine(args: ServeArgs) -> anyhow::Result<Exit> {
    let f = faults(&args.faults);
    if let Some(code) = check_faults(&f) {
        return Ok(code);
    }
    let mut config = crate::engine::engine_config(&args.engine)?;
    if let Some(p) = &args.profile {
        crate::engine::apply_profile(&mut config, p, args.engine.catalogue.as_deref())?;
    }
    let mut options = ServeOptions::for_config(&config);
    options.default_max_tokens = args.default_max_tokens;
    options.faults = f;
    options.stall = args.faults.stall_for;
    options.seed = args.faults.fault_seed;
    options.load_time = args.load_time;
    options.replicas = args.replicas;
    options.router = args.router;
    options.reasoning = args.reasoning_tokens.map(|n| (n, args.reasoning_as));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .thread_name("srv-engine")
        .enable_all()
        .build()?;
    rt.block_on(async {
        let addr = std::net::SocketAddr::new(args.host, args.port);
        let describe = config.describe();
        let server = EngineServer::start(addr, config, options)
            .await
            .map_err(anyhow::Error::msg)?;
        crate::outln!("tokenscope simulated engine listening on {}", server.url());
        eprintln!(
            "{describe} · OpenAI API at /v1, vLLM metrics at /metrics · Ctrl-C or SIGTERM stops"
        );
        crate::signals::Stop::listen()?.recv().await;
        server.shutdown().await;
        Ok(Exit::Success)
    })
}

pub fn exact(args: ExactArgs) -> anyhow::Result<Exit> {
    if let Some(code) = check_faults(&exact_config(&args).faults) {
        return Ok(code);
    }
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = args.threads {
        rt.worker_threads(n.max(1));
    }
    let rt = rt.thread_name("srv-exact").enable_all().build()?;
    rt.block_on(async {
        let addr = std::net::SocketAddr::new(args.host, args.port);
        let server = ExactServer::start(addr, exact_config(&args))
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        crate::outln!("tokenscope exact server listening on {}", server.url());
        eprintln!(
            "model {} · TTFT {:?} · ITL {:?} · {} token(s) per chunk · Ctrl-C stops",
            args.model, args.ttft, args.itl, args.tokens_per_chunk
        );
        crate::signals::Stop::listen()?.recv().await;
        server.shutdown().await;
        Ok(Exit::Success)
    })
}
