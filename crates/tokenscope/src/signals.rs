//! Stopping on a signal: Ctrl-C (SIGINT) and SIGTERM — what Kubernetes,
//! systemd and CI runners send — both end a run the same way. The handlers
//! are installed when [`Stop::listen`] is called, so a signal that arrives
//! early (during the first metrics scrape) is still caught, not fatal.

use tokio::signal::unix::{signal, Signal, SignalKind};

pub struct Stop {
    interrupt: Signal,
    terminate: Signal,
}

impl Stop {
    /// Installs the handlers now; must run inside the tokio runtime.
    pub fn listen() -> std::io::Result<Stop> {
        Ok(Stop {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    /// Resolves at the first SIGINT or SIGTERM (including one already received).
    pub async fn recv(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}
