//! `tokenscope sim exact`: the exact server on its own, for other tools and benchmarks.

use crate::cli::ExactArgs;
use crate::exit::Exit;
use anyhow::Context;
use tokenscope_sim::exact::{ExactConfig, ExactServer, Faults};

pub fn exact_config(a: &ExactArgs) -> ExactConfig {
    ExactConfig {
        model: a.model.clone(),
        ttft: a.ttft,
        itl: a.itl,
        tokens_per_chunk: a.tokens_per_chunk,
        default_output_tokens: a.output_tokens,
        faults: Faults {
            http_429: a.error_429,
            http_500: a.error_500,
            http_503: a.error_503,
            disconnect: a.disconnect,
            malformed: a.malformed,
            stall: a.stall,
        },
        stall: a.stall_for,
        seed: a.seed,
    }
}

pub fn exact(args: ExactArgs) -> anyhow::Result<Exit> {
    let faults = exact_config(&args).faults;
    let total = faults.http_429
        + faults.http_500
        + faults.http_503
        + faults.disconnect
        + faults.malformed
        + faults.stall;
    if total > 1.0 {
        eprintln!("tokenscope: error: the fault shares add up to {total}, more than 1");
        return Ok(Exit::Usage);
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
        println!("tokenscope exact server listening on {}", server.url());
        eprintln!(
            "model {} · TTFT {:?} · ITL {:?} · {} token(s) per chunk · Ctrl-C stops",
            args.model, args.ttft, args.itl, args.tokens_per_chunk
        );
        tokio::signal::ctrl_c().await?;
        server.shutdown().await;
        Ok(Exit::Success)
    })
}
