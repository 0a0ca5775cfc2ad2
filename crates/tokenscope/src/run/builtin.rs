//! Where a run runs: the client's runtime (its worker threads, read
//! stamping switched on first) and, when there is no `--url`, a built-in
//! server on 127.0.0.1 with a runtime of its own, so its threads' CPU is
//! never counted as the client's.

use super::Site;
use crate::cli::{BuiltinChoice, ClientArgs, TargetArgs};
use crate::exit::Exit;
use crate::spec::pricing::BUILTIN_GPU;
use anyhow::Context;
use std::time::Duration;
use tokenscope_load::runtime;
use tokenscope_sim::engine::catalogue::Catalogue;
use tokenscope_sim::engine::EngineConfig;
use tokenscope_sim::exact::{ExactConfig, ExactServer};
use tokenscope_sim::serve::{EngineServer, ServeOptions};

/// Starts the built-in server when there is no `--url`, builds the client
/// runtime, and runs `body` on it with the [`Site`] it runs from.
pub fn with_runtime<F, Fut>(
    target: &TargetArgs,
    builtin: BuiltinChoice,
    client: &ClientArgs,
    body: F,
) -> anyhow::Result<Exit>
where
    F: FnOnce(Site) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Exit>>,
{
    let threads = client_threads(client.client_threads);
    // The built-in server gets a runtime of its own (threads `srv-…`).
    let server = match &target.url {
        Some(_) => None,
        None => Some(Builtin::start(builtin)?),
    };
    let url = target
        .url
        .clone()
        .or_else(|| server.as_ref().map(|b| b.url.clone()))
        .unwrap_or_default();
    // Kernel stamping on before the first connection, held for the run.
    let stamps = runtime::kernel_stamps(&url);
    let _stamping = stamps
        .then(|| tokenscope_load::rx_stamp::wait_until_on(STAMPING_WAIT))
        .flatten();
    let rt = runtime::client(threads, client.wake_batch.resolve(stamps))?;
    let site = Site {
        url,
        builtin: server.as_ref().map(|b| b.description.clone()),
        threads,
    };
    let result = rt.block_on(body(site));
    rt.shutdown_timeout(Duration::from_secs(1));
    if let Some(b) = server {
        b.rt.shutdown_background();
    }
    result
}

/// The most a run waits for the kernel to switch read stamping on (a few
/// ms when it was off; at once when it is on).
pub const STAMPING_WAIT: Duration = Duration::from_millis(500);

/// Client worker threads: as asked, else one per core.
pub fn client_threads(asked: Option<u64>) -> usize {
    asked
        .map(|n| n as usize)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
}

/// The exact server started when no `--url` is given.
struct Builtin {
    rt: tokio::runtime::Runtime,
    url: String,
    description: String,
}

impl Builtin {
    fn start(choice: BuiltinChoice) -> anyhow::Result<Builtin> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .thread_name("srv-builtin")
            .enable_all()
            .build()?;
        let addr: std::net::SocketAddr = ([127, 0, 0, 1], 0).into();
        let (url, description) = match choice {
            BuiltinChoice::Exact => {
                let config = ExactConfig::default();
                let server = rt
                    .block_on(ExactServer::start(addr, config.clone()))
                    .context("starting the built-in server on 127.0.0.1")?;
                let url = server.url();
                std::mem::forget(server); // lives as long as its runtime
                let description = format!(
                    "built-in exact server: TTFT {} ms, ITL {} ms, {} token/chunk",
                    config.ttft.as_millis(),
                    config.itl.as_millis(),
                    config.tokens_per_chunk
                );
                (url, description)
            }
            BuiltinChoice::Engine => {
                let cat = Catalogue::builtin();
                let config = EngineConfig::new(
                    cat.model("llama-3.1-8b").expect("in the catalogue"),
                    cat.gpu(BUILTIN_GPU).expect("in the catalogue"),
                );
                let description = format!("built-in simulated engine: {}", config.describe());
                let options = ServeOptions::for_config(&config);
                let server = rt
                    .block_on(EngineServer::start(addr, config, options))
                    .map_err(anyhow::Error::msg)
                    .context("starting the built-in server on 127.0.0.1")?;
                let url = server.url();
                std::mem::forget(server); // lives as long as its runtime
                (url, description)
            }
        };
        Ok(Builtin {
            rt,
            url,
            description,
        })
    }
}
