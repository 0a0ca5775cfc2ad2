//! A sub-millisecond timer for the exact server.
//!
//! tokio's timer wheel has 1 ms ticks and fires a sleep on the tick at or
//! after its deadline, so a token due at 100 ms leaves between 100 and ~102 ms.
//! The exact server's whole point is known timing, so its deadlines are kept
//! by one thread instead: a min-heap of deadlines, slept on with the OS's
//! high-resolution timer, each waking its task through a oneshot channel.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::OnceLock;
use std::time::Instant;
use tokio::sync::oneshot;

struct Entry {
    at: Instant,
    seq: u64,
    wake: oneshot::Sender<()>,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

fn timer_thread() -> &'static mpsc::Sender<(Instant, oneshot::Sender<()>)> {
    static TX: OnceLock<mpsc::Sender<(Instant, oneshot::Sender<()>)>> = OnceLock::new();
    TX.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<(Instant, oneshot::Sender<()>)>();
        std::thread::Builder::new()
            .name("srv-timer".into())
            .spawn(move || {
                let mut heap: BinaryHeap<Reverse<Entry>> = BinaryHeap::new();
                let mut seq = 0u64;
                loop {
                    let now = Instant::now();
                    while heap.peek().is_some_and(|Reverse(e)| e.at <= now) {
                        let Reverse(e) = heap.pop().expect("peeked");
                        let _ = e.wake.send(());
                    }
                    let next = match heap.peek() {
                        Some(Reverse(e)) => rx.recv_timeout(e.at.saturating_duration_since(now)),
                        None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                    };
                    match next {
                        Ok((at, wake)) => {
                            seq += 1;
                            heap.push(Reverse(Entry { at, seq, wake }));
                        }
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
            })
            .expect("spawning the timer thread");
        tx
    })
}

/// Completes at `at`, within the OS timer's slack (tens of microseconds).
pub async fn sleep_until(at: Instant) {
    if at <= Instant::now() {
        return;
    }
    let (tx, rx) = oneshot::channel();
    if timer_thread().send((at, tx)).is_ok() {
        let _ = rx.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn wakes_at_the_deadline_in_order() {
        let start = Instant::now();
        let mut late = vec![];
        for ms in [5u64, 1, 3] {
            let at = start + Duration::from_millis(ms * 10);
            late.push(tokio::spawn(async move {
                sleep_until(at).await;
                Instant::now().saturating_duration_since(at)
            }));
        }
        for h in late {
            let lateness = h.await.unwrap();
            // Generous for a loaded machine; the benchmark measures the real figure.
            assert!(lateness < Duration::from_millis(20), "{lateness:?}");
        }
    }
}
