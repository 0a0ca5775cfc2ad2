//! `tokenscope selftest`: the client run on this
//! machine against the built-in exact server at a given load, its TTFT and
//! TPOT compared per request with the server's own send times. The result is
//! the error floor of this machine's measurements at that load — what a
//! reader needs to know before trusting a difference of a few milliseconds.

use crate::cli::SelftestArgs;
use crate::exit::Exit;
use crate::self_check::{measure, Load};
use std::time::Duration;
use tokenscope_core::results::SelfCheck;

/// `tokenscope selftest`.
pub fn run(args: SelftestArgs) -> anyhow::Result<Exit> {
    let load = Load {
        streams: args.concurrency,
        requests: args.requests.unwrap_or(args.concurrency),
        ttft: args.ttft,
        itl: args.itl,
        output_tokens: args.output_tokens,
        client_threads: args.client_threads,
    };
    let threads = crate::run::builtin::client_threads(load.client_threads);
    // The built-in server is plain http on loopback: `auto`, as a bench of it would.
    let wake_batch = tokenscope_load::runtime::WakeBatch::Auto;
    let _stamping = tokenscope_load::rx_stamp::wait_until_on(crate::run::builtin::STAMPING_WAIT);
    let rt = tokenscope_load::runtime::client(threads, wake_batch.resolve(true))?;
    if !args.json {
        eprintln!(
            "tokenscope selftest: {} requests at {} streams, all at once, against the built-in exact server (TTFT {} ms, {} ms between tokens, {} tokens)…",
            load.requests,
            load.streams,
            load.ttft.as_millis(),
            load.itl.as_millis(),
            load.output_tokens
        );
    }
    let check = rt.block_on(measure(load));
    rt.shutdown_timeout(Duration::from_secs(1));
    let check = check?;
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&check)?);
    } else {
        print(&check);
    }
    Ok(Exit::Success)
}

fn print(c: &SelfCheck) {
    crate::outln!("{}", c.sentence());
    let row = |name: &str, s: &Option<tokenscope_core::stats::Summary>| {
        if let Some(s) = s {
            crate::outln!(
                "  {name:<22}{:>9.3}{:>9.3}{:>9.3}{:>9.3}",
                s.p50,
                s.p90,
                s.p99,
                s.max
            );
        }
    };
    crate::outln!("\nError (ms)                  p50      p90      p99      max");
    row("TTFT", &c.ttft_error_ms);
    row("TPOT", &c.tpot_error_ms);
    row("  first token read", &c.first_read_delay_ms);
    row("  last token read", &c.last_read_delay_ms);
    row("  server's queue", &c.server_queue_ms);
    row("client loop delay", &c.loop_delay_ms);
}
