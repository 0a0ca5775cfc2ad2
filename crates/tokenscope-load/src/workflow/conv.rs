//! A workflow's conversations as shared lists: each call's conversation is
//! its parent's plus one exchange, linked, never copied — a chain of a
//! thousand calls holds a thousand exchanges, not half a million — and two
//! branches' shared prefix is where their lists meet.

use std::sync::Arc;
use tokenscope_workload::session::Exchange;

/// A conversation: its last exchange, and the conversation before it.
#[derive(Debug)]
pub(super) struct Conv {
    exchange: Exchange,
    len: usize,
    prev: Option<Arc<Conv>>,
}

impl Drop for Conv {
    /// Unlinks the list one node at a time: a long chain dropped by
    /// recursion would run out of stack.
    fn drop(&mut self) {
        let mut next = self.prev.take();
        while let Some(c) = next {
            match Arc::try_unwrap(c) {
                Ok(mut alone) => next = alone.prev.take(),
                Err(_) => break,
            }
        }
    }
}

/// A conversation, possibly empty.
pub(super) type Thread = Option<Arc<Conv>>;

/// `thread` with `exchange` after it.
pub(super) fn push(thread: &Thread, exchange: Exchange) -> Thread {
    Some(Arc::new(Conv {
        exchange,
        len: len(thread) + 1,
        prev: thread.clone(),
    }))
}

pub(super) fn len(thread: &Thread) -> usize {
    thread.as_ref().map_or(0, |c| c.len)
}

/// The part of `thread` `n` exchanges long (its first `n`).
fn cut(thread: &Thread, n: usize) -> Thread {
    let mut at = thread.clone();
    while len(&at) > n {
        at = at.and_then(|c| c.prev.clone());
    }
    at
}

/// The longest conversation both start with.
pub(super) fn common(a: &Thread, b: &Thread) -> Thread {
    let n = len(a).min(len(b));
    let (mut x, mut y) = (cut(a, n), cut(b, n));
    loop {
        match (&x, &y) {
            (Some(p), Some(q)) if !Arc::ptr_eq(p, q) => {
                (x, y) = (p.prev.clone(), q.prev.clone());
            }
            _ => return x,
        }
    }
}

/// Its exchanges, oldest first (what a request's history is).
pub(super) fn exchanges(thread: &Thread) -> Vec<Exchange> {
    answers_after(thread, 0)
        .into_iter()
        .map(|c| c.exchange.clone())
        .collect()
}

/// The answers of `thread` past its first `n` exchanges, oldest first.
pub(super) fn answers_past(thread: &Thread, n: usize) -> Vec<String> {
    answers_after(thread, n)
        .into_iter()
        .map(|c| c.exchange.assistant.clone())
        .collect()
}

fn answers_after(thread: &Thread, n: usize) -> Vec<&Conv> {
    let mut out = Vec::new();
    let mut at = thread.as_deref();
    while let Some(c) = at.filter(|c| c.len > n) {
        out.push(c);
        at = c.prev.as_deref();
    }
    out.reverse();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(text: &str) -> Exchange {
        Exchange {
            user: Some(format!("q {text}")),
            assistant: text.into(),
            calls: Vec::new(),
        }
    }

    #[test]
    fn branches_share_the_prefix_they_forked_from() {
        let root = push(&None, said("plan"));
        let a = push(&push(&root, said("a1")), said("a2"));
        let b = push(&root, said("b1"));
        let shared = common(&a, &b);
        assert_eq!(len(&shared), 1);
        assert_eq!(answers_past(&a, len(&shared)), ["a1", "a2"]);
        assert_eq!(answers_past(&b, len(&shared)), ["b1"]);
        assert_eq!(exchanges(&a).len(), 3);
        assert_eq!(len(&common(&a, &None)), 0);
        assert_eq!(len(&common(&a, &a)), 3);
    }

    #[test]
    fn a_long_chain_costs_one_exchange_a_call() {
        let mut t: Thread = None;
        for i in 0..200_000 {
            t = push(&t, said(&i.to_string()));
        }
        assert_eq!(len(&t), 200_000);
        assert_eq!(answers_past(&t, 199_998), ["199998", "199999"]);
        drop(t); // unlinked without recursion
    }
}
