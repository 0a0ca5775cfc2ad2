//! Where the history lives: `--db`, else `TOKENSCOPE_DB`, else a SQLite
//! file under the user's data directory.

use std::path::PathBuf;

/// The history database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A SQLite file, or a SQLite URI (`file:…?mode=ro`).
    Sqlite(String),
    /// A PostgreSQL connection URL (`postgres://user:secret@host/db`).
    Postgres(String),
}

impl Location {
    /// `--db`'s value: a `postgres://` or `postgresql://` URL, else a SQLite
    /// path (or `file:` URI).
    pub fn parse(text: &str) -> Location {
        let lower = text.to_ascii_lowercase();
        if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
            Location::Postgres(text.to_string())
        } else {
            Location::Sqlite(text.to_string())
        }
    }

    /// `--db` if given, else `TOKENSCOPE_DB`, else [`Location::default_path`].
    pub fn resolve(flag: Option<&str>) -> Location {
        let env = std::env::var("TOKENSCOPE_DB")
            .ok()
            .filter(|v| !v.is_empty());
        match flag.map(str::to_owned).or(env) {
            Some(text) => Location::parse(&text),
            None => Location::Sqlite(Location::default_path().display().to_string()),
        }
    }

    /// `$XDG_DATA_HOME/tokenscope/history.db`, by default
    /// `~/.local/share/tokenscope/history.db`.
    pub fn default_path() -> PathBuf {
        let data = std::env::var_os("XDG_DATA_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
            .unwrap_or_else(|| PathBuf::from("."));
        data.join("tokenscope").join("history.db")
    }

    /// The location as it may be shown: a URL's password is replaced by `***`.
    pub fn shown(&self) -> String {
        match self {
            Location::Sqlite(path) => path.clone(),
            Location::Postgres(url) => redact(url),
        }
    }
}

/// `scheme://user:secret@host…` → `scheme://user:***@host…`; a
/// `password=` query parameter is masked the same way.
pub fn redact(url: &str) -> String {
    let mut out = url.to_string();
    if let Some(scheme_end) = out.find("://") {
        let rest_start = scheme_end + 3;
        let authority_end = out[rest_start..]
            .find(['/', '?'])
            .map_or(out.len(), |i| rest_start + i);
        if let Some(at) = out[rest_start..authority_end].rfind('@') {
            let userinfo = &out[rest_start..rest_start + at];
            if let Some(colon) = userinfo.find(':') {
                let from = rest_start + colon + 1;
                out.replace_range(from..rest_start + at, "***");
            }
        }
    }
    if let Some(q) = out.find('?') {
        let (head, query) = out.split_at(q + 1);
        let masked: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => kv.to_string(),
            })
            .collect();
        out = format!("{head}{}", masked.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_urls_are_told_from_paths() {
        assert!(matches!(
            Location::parse("postgres://h/db"),
            Location::Postgres(_)
        ));
        assert!(matches!(
            Location::parse("PostgreSQL://h/db"),
            Location::Postgres(_)
        ));
        assert!(matches!(Location::parse("/tmp/h.db"), Location::Sqlite(_)));
        assert!(matches!(
            Location::parse("file:/tmp/h.db?mode=ro"),
            Location::Sqlite(_)
        ));
    }

    #[test]
    fn passwords_never_shown() {
        assert_eq!(
            redact("postgres://ci:s3cr@t@db.internal:5432/perf"),
            "postgres://ci:***@db.internal:5432/perf"
        );
        assert_eq!(
            redact("postgres://db/perf?user=ci&password=hunter2&sslmode=prefer"),
            "postgres://db/perf?user=ci&password=***&sslmode=prefer"
        );
        assert_eq!(redact("postgres://ci@db/perf"), "postgres://ci@db/perf");
        let shown = Location::parse("postgres://u:pw@h/d").shown();
        assert!(!shown.contains("pw"), "{shown}");
    }
}
