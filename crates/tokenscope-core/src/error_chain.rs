//! An error and what caused it, on one line.

/// The error and its causes down the chain, each said once, joined by `: `
/// ("error sending request: client error (Connect): tcp connect error:
/// Connection refused"): an HTTP or database client's own message often
/// names no cause, and a cause that repeats its parent's words adds none.
pub fn line(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if out.is_empty() {
            out = text;
        } else if !out.contains(&text) {
            out = format!("{out}: {text}");
        }
        cause = c.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::line;
    use std::fmt;

    #[derive(Debug)]
    struct E(&'static str, Option<Box<E>>);
    impl fmt::Display for E {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for E {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn each_cause_is_said_once_in_order() {
        let e = E(
            "sending",
            Some(Box::new(E(
                "connect: refused",
                Some(Box::new(E("refused", None))),
            ))),
        );
        assert_eq!(line(&e), "sending: connect: refused");
        assert_eq!(line(&E("alone", None)), "alone");
    }
}
