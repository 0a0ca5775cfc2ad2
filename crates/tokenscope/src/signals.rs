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

/// Raised by the first SIGINT or SIGTERM from its making on: work made of
/// several runs (a tune's settings) stops between them, and a wait that
/// is not a run (a server loading) ends at once.
#[derive(Clone)]
pub struct Raised(tokio::sync::watch::Receiver<bool>);

impl Raised {
    /// Listens from now on; must run inside the tokio runtime.
    pub fn listen() -> std::io::Result<Raised> {
        let mut stop = Stop::listen()?;
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            stop.recv().await;
            let _ = tx.send(true);
        });
        Ok(Raised(rx))
    }

    pub fn is_raised(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once raised (at once if it already was).
    pub async fn wait(&self) {
        let mut rx = self.0.clone();
        let _ = rx.wait_for(|raised| *raised).await;
    }
}
