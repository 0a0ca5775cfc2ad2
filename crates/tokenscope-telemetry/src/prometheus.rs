//! A strict parser for the Prometheus text format (0.0.4) and the parts of
//! OpenMetrics that servers send (`# EOF`, `_created`, exemplars). It never
//! panics: a line it cannot read is an error naming the line.

use std::collections::HashMap;

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A parsed exposition: samples in order, and the declared family types.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exposition {
    pub samples: Vec<Sample>,
    pub types: HashMap<String, String>,
}

impl Exposition {
    /// Samples named exactly `name`.
    pub fn series<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| s.name == name)
    }

    /// The sum over all label sets of `name`, or `None` when absent.
    pub fn sum(&self, name: &str) -> Option<f64> {
        let mut it = self.series(name).peekable();
        it.peek()?;
        Some(it.map(|s| s.value).sum())
    }

    pub fn has_prefix(&self, prefix: &str) -> bool {
        self.samples.iter().any(|s| s.name.starts_with(prefix))
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("metrics line {line}: {reason}")]
pub struct ParseError {
    pub line: usize,
    pub reason: String,
}

fn is_name_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c == b':'
}

fn is_name_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b':'
}

fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" | "inf" | "+inf" => Some(f64::INFINITY),
        "-Inf" | "-inf" => Some(f64::NEG_INFINITY),
        "NaN" | "nan" => Some(f64::NAN),
        _ => s.parse().ok(),
    }
}

/// Parses a whole exposition.
pub fn parse(text: &str) -> Result<Exposition, ParseError> {
    let mut out = Exposition::default();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim_end_matches('\r').trim();
        let err = |reason: &str| ParseError {
            line: i + 1,
            reason: format!("{reason}: `{}`", line.chars().take(80).collect::<String>()),
        };
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let mut parts = comment.split_whitespace();
            match parts.next() {
                Some("TYPE") => {
                    let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                        return Err(err("TYPE needs a name and a type"));
                    };
                    out.types.insert(name.to_string(), kind.to_string());
                }
                Some("EOF") => break,
                _ => {} // HELP, UNIT and free comments
            }
            continue;
        }
        out.samples.push(parse_sample(line).map_err(|r| err(&r))?);
    }
    Ok(out)
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let b = line.as_bytes();
    if !is_name_start(b[0]) {
        return Err("a metric name must start with a letter, `_` or `:`".into());
    }
    let i = skip(b, 1, is_name_char);
    let name = line[..i].to_string();
    let (labels, i) = match b.get(i) {
        Some(b'{') => parse_labels(line, i + 1)?,
        _ => (Vec::new(), i),
    };
    // Value, optional timestamp, optional OpenMetrics exemplar (` # {...} v`).
    let rest = line[i..].split(" # ").next().unwrap_or("");
    let mut fields = rest.split_whitespace();
    let value = fields.next().ok_or("a sample needs a value")?;
    let value = parse_value(value).ok_or_else(|| format!("`{value}` is not a number"))?;
    if let Some(ts) = fields.next() {
        ts.parse::<f64>()
            .map_err(|_| format!("`{ts}` is not a timestamp"))?;
    }
    if fields.next().is_some() {
        return Err("unexpected text after the value".into());
    }
    Ok(Sample {
        name,
        labels,
        value,
    })
}

/// The first index from `i` whose byte is not `keep`'s.
fn skip(b: &[u8], mut i: usize, keep: impl Fn(u8) -> bool) -> usize {
    while i < b.len() && keep(b[i]) {
        i += 1;
    }
    i
}

/// The labels from just after `{` to the closing `}`, and the index after it.
fn parse_labels(line: &str, mut i: usize) -> Result<(Vec<(String, String)>, usize), String> {
    let b = line.as_bytes();
    let mut labels = Vec::new();
    loop {
        i = skip(b, i, |c| c == b' ');
        if b.get(i) == Some(&b'}') {
            return Ok((labels, i + 1));
        }
        let start = i;
        i = skip(b, i, is_name_char);
        if start == i {
            return Err("expected a label name".into());
        }
        let key = line[start..i].to_string();
        if i + 1 >= b.len() || b[i] != b'=' || b[i + 1] != b'"' {
            return Err(format!("label `{key}` needs =\"value\""));
        }
        let (value, after) = label_value(line, i + 2)?;
        labels.push((key, value));
        i = skip(b, after, |c| c == b' ');
        match b.get(i) {
            Some(b',') => i += 1,
            Some(b'}') => return Ok((labels, i + 1)),
            _ => return Err("expected `,` or `}` after a label".into()),
        }
    }
}

/// A label's value from just after its opening quote, unescaped, and the
/// index after its closing quote.
fn label_value(line: &str, mut i: usize) -> Result<(String, usize), String> {
    let b = line.as_bytes();
    let mut value = String::new();
    loop {
        if i >= b.len() {
            return Err("unterminated label value".into());
        }
        match b[i] {
            b'"' => return Ok((value, i + 1)),
            b'\\' if i + 1 < b.len() && matches!(b[i + 1], b'n' | b'"' | b'\\') => {
                value.push(match b[i + 1] {
                    b'n' => '\n',
                    b'"' => '"',
                    _ => '\\',
                });
                i += 2;
            }
            b'\\' => {
                // An unknown escape is kept as written; the character
                // after it (perhaps several bytes) is copied whole
                // next (found by fuzzing: `\é` split a character).
                value.push('\\');
                i += 1;
            }
            _ => {
                // Copy one UTF-8 character.
                let ch = line[i..].chars().next().ok_or("bad label value")?;
                value.push(ch);
                i += ch.len_utf8();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_escape_before_a_multibyte_character_is_kept() {
        let e = parse("x{a=\"\\é\"} 1\n").unwrap();
        assert_eq!(e.samples[0].labels[0].1, "\\é");
        // The input fuzzing found (it panicked on a split character): an error now.
        assert!(parse("x_topal{path=\"/a\\\u{fffd}\"b\",le=\"1e-3\"} 1.5e3 1700000000\n").is_err());
    }

    #[test]
    fn parses_names_with_colons_labels_escapes_and_specials() {
        let text = "# HELP vllm:x help text\n# TYPE vllm:x counter\nvllm:x_total{model_name=\"a\\\"b\",engine=\"0\"} 3\n\
                    y 1.5e3 1700000000000\nz{le=\"+Inf\"} +Inf\nw NaN\nv{} -2\n";
        let e = parse(text).unwrap();
        assert_eq!(e.types["vllm:x"], "counter");
        assert_eq!(e.samples[0].name, "vllm:x_total");
        assert_eq!(e.samples[0].label("model_name"), Some("a\"b"));
        assert_eq!(e.samples[0].value, 3.0);
        assert_eq!(e.samples[1].value, 1500.0);
        assert_eq!(e.samples[2].value, f64::INFINITY);
        assert!(e.samples[3].value.is_nan());
        assert_eq!(e.samples[4].value, -2.0);
    }

    #[test]
    fn openmetrics_eof_and_exemplars() {
        let e = parse("a_total 1 # {trace_id=\"x\"} 1.0\n# EOF\nignored 2\n").unwrap();
        assert_eq!(e.samples.len(), 1);
        assert_eq!(e.samples[0].value, 1.0);
    }

    #[test]
    fn crlf_and_trailing_comma() {
        let e = parse("a{b=\"c\",} 1\r\n").unwrap();
        assert_eq!(e.samples[0].label("b"), Some("c"));
    }

    #[test]
    fn bad_lines_are_errors_with_their_number_never_panics() {
        for bad in [
            "9abc 1",
            "a{b=c} 1",
            "a{b=\"c} 1",
            "a notanumber",
            "a",
            "a{b=\"c\" d=\"e\"} 1",
            "a 1 2 3",
            "# TYPE onlyname",
            "{a=\"b\"} 1",
        ] {
            let err = parse(&format!("ok 1\n{bad}\n")).unwrap_err();
            assert_eq!(err.line, 2, "{bad}");
        }
        // Arbitrary bytes never panic.
        const ALPHABET: &[u8] = b"a{}=\",\\ #\n1.eE+-_:xyz";
        let mut x: u64 = 1;
        for _ in 0..2000 {
            let s: String = (0..40)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ALPHABET[(x >> 33) as usize % ALPHABET.len()] as char
                })
                .chain("é".chars())
                .collect();
            let _ = parse(&s);
        }
    }
}
