//! Scenario files (`--config FILE.toml`): any set of a command's flags, by
//! their long names (`concurrency = 32`, `input-tokens = "uniform:128..512"`,
//! `ignore-eos = true`, a list for a flag given several times); flags on the
//! command line win. Whatever flags a run used — from a file and from the
//! command line — are written into its directory as `config.toml`, so
//! `tokenscope bench --config RUN/config.toml` repeats the run.
//!
//! The file's flags are put on the command line before the user's, and the
//! parser lets a later flag replace an earlier one: one parser, one set of
//! checks and errors, whichever way a flag came.

use clap::parser::ValueSource;
use clap::{ArgMatches, Command};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Flags never stored: where the run goes (a repeat must not overwrite
/// it), the file itself, headers (they may carry credentials; their
/// names are noted instead) and the history's location (a URL may carry a
/// password).
/// How the output is shown (`json`, `quiet`) is the repeater's choice.
const NOT_STORED: [&str; 7] = ["out", "force", "config", "header", "json", "quiet", "db"];

/// The flags the command ran with, and the run directory they belong in
/// (the first one the command claimed), once both are known.
static RESOLVED: Mutex<(Option<String>, Option<PathBuf>)> = Mutex::new((None, None));

/// The flags given (on the command line or by `--config`, which expands to
/// it), each with its raw values (none for a switch), the stored kinds only.
static GIVEN: Mutex<Vec<(String, Vec<String>)>> = Mutex::new(Vec::new());

/// The flags this command was given — from the command line or a `--config`
/// file alike — as `(long name, raw values)`, in the command's order; the
/// ones `config.toml` leaves out (`--out`, `--header`, `--db`, …) are not here.
pub fn given() -> Vec<(String, Vec<String>)> {
    GIVEN.lock().map(|g| g.clone()).unwrap_or_default()
}

/// The command line with the `--config` file's flags put in after the
/// subcommand (so the user's own flags, after them, win). Errors name the
/// file and the key.
pub fn expand(cmd: &Command, argv: Vec<OsString>) -> Result<Vec<OsString>, String> {
    let Some((at, path)) = config_path(&argv) else {
        return Ok(argv);
    };
    let (sub, depth) = subcommand(cmd, &argv[1..at])
        .ok_or("--config goes after a command (bench, sweep, sim plan)")?;
    let table = read_table(&path)?;
    // Flags of the command line's own: a file's flag that conflicts with one
    // (its --concurrency with the line's --rate) gives way.
    let given: Vec<&clap::Arg> = argv[1..]
        .iter()
        .filter_map(|a| a.to_str()?.strip_prefix("--"))
        .filter_map(|a| {
            let name = a.split('=').next().unwrap_or(a);
            sub.get_arguments().find(|x| x.get_long() == Some(name))
        })
        .collect();
    let mut flags = Vec::new();
    for (key, value) in table {
        let name = key.replace('_', "-");
        let arg = sub
            .get_arguments()
            .find(|a| a.get_long() == Some(name.as_str()))
            .ok_or_else(|| {
                format!(
                    "--config {}: `{key}` is not a flag of `{}`",
                    path.display(),
                    sub.get_name()
                )
            })?;
        let conflicts = sub.get_arg_conflicts_with(arg);
        if given
            .iter()
            .any(|g| conflicts.iter().any(|c| c.get_id() == g.get_id()))
        {
            continue;
        }
        let takes_value = arg.get_action().takes_values();
        let bad = |why: String| format!("--config {}: {why}", path.display());
        flags.extend(as_flags(&key, value, takes_value).map_err(bad)?);
    }
    let mut out = argv[..at].to_vec();
    let mut rest = out.split_off(1 + depth);
    out.extend(flags);
    out.append(&mut rest);
    out.extend(argv[at..].iter().cloned());
    Ok(out)
}

/// The `--config` file's table; an error names the file and the line.
fn read_table(path: &Path) -> Result<toml::Table, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("--config {}: {e}", path.display()))?;
    text.parse().map_err(|e: toml::de::Error| {
        let line = e
            .span()
            .map_or(0, |s| text[..s.start].lines().count().max(1));
        format!(
            "--config {}:{line}: not TOML: {}",
            path.display(),
            e.message()
        )
    })
}

/// One key's command-line words: `--name value` for each value (a list
/// repeats the flag), `--name` for a switch set true, nothing for one set
/// false; an error says what the key must be instead.
fn as_flags(key: &str, value: toml::Value, takes_value: bool) -> Result<Vec<OsString>, String> {
    let name = key.replace('_', "-");
    let values = match value {
        toml::Value::Array(items) => items,
        one => vec![one],
    };
    let mut flags = Vec::new();
    for v in values {
        let text = match v {
            toml::Value::String(s) => s,
            toml::Value::Boolean(b) if !takes_value => {
                if b {
                    flags.push(OsString::from(format!("--{name}")));
                }
                continue;
            }
            toml::Value::Table(_) | toml::Value::Array(_) => {
                return Err(format!("`{key}` must be a value or a list of values"));
            }
            other => other.to_string(),
        };
        if !takes_value {
            return Err(format!("`{key}` is a switch: write `{key} = true`"));
        }
        flags.push(OsString::from(format!("--{name}")));
        flags.push(OsString::from(text));
    }
    Ok(flags)
}

/// Lets every flag be given again, the last one winning: what makes the
/// command line win over the file.
pub fn allow_overrides(cmd: Command) -> Command {
    cmd.args_override_self(true)
        .mut_subcommands(allow_overrides)
}

/// Where `--config` is in `argv` and its path.
fn config_path(argv: &[OsString]) -> Option<(usize, PathBuf)> {
    argv.iter().enumerate().find_map(|(i, a)| {
        let a = a.to_str()?;
        if a == "--config" {
            Some((i, PathBuf::from(argv.get(i + 1)?)))
        } else {
            a.strip_prefix("--config=").map(|p| (i, PathBuf::from(p)))
        }
    })
}

/// The subcommand the leading `words` name (`bench`, `sim plan`…) and how
/// many words name it.
fn subcommand<'a>(cmd: &'a Command, words: &[OsString]) -> Option<(&'a Command, usize)> {
    let mut cur = cmd;
    let mut depth = 0;
    for w in words {
        match cur.find_subcommand(w) {
            Some(sub) => (cur, depth) = (sub, depth + 1),
            None => break,
        }
    }
    (depth > 0).then_some((cur, depth))
}

/// Notes the flags the command was given (from the file or the command
/// line), as the `config.toml` a repeat reads.
pub fn record(cmd: &Command, matches: &ArgMatches) {
    let mut path = Vec::new();
    let (mut cur_cmd, mut cur) = (cmd, matches);
    while let Some((name, sub)) = cur.subcommand() {
        path.push(name.to_string());
        cur_cmd = cur_cmd
            .find_subcommand(name)
            .expect("a parsed subcommand exists");
        cur = sub;
    }
    let mut table = toml::Table::new();
    let mut given = Vec::new();
    let mut headers = Vec::new();
    for arg in cur_cmd.get_arguments() {
        let (Some(long), id) = (arg.get_long(), arg.get_id().as_str()) else {
            continue;
        };
        if cur.value_source(id) != Some(ValueSource::CommandLine) {
            continue;
        }
        if long == "header" {
            headers.extend(
                raw(cur, id)
                    .into_iter()
                    .map(|h| h.split(':').next().unwrap_or("").to_string()),
            );
        }
        if NOT_STORED.contains(&long) {
            continue;
        }
        let takes_values = arg.get_action().takes_values();
        given.push((
            long.to_string(),
            if takes_values {
                raw(cur, id)
            } else {
                Vec::new()
            },
        ));
        let value = match takes_values {
            false => toml::Value::Boolean(true),
            true => {
                let mut values: Vec<toml::Value> = raw(cur, id).into_iter().map(typed).collect();
                match values.len() {
                    1 => values.remove(0),
                    _ => toml::Value::Array(values),
                }
            }
        };
        table.insert(long.to_string(), value);
    }
    let mut text = format!(
        "# tokenscope {}: the flags this run used (its --out and --force left out).\n# Repeat it: tokenscope {} --config config.toml\n",
        path.join(" "),
        path.join(" ")
    );
    if !headers.is_empty() {
        text.push_str(&format!(
            "# It also sent --header {}: not stored (they may carry credentials); pass them again.\n",
            headers.join(", ")
        ));
    }
    text.push_str(&toml::to_string(&table).unwrap_or_default());
    if let Ok(mut g) = GIVEN.lock() {
        *g = given;
    }
    if let Ok(mut r) = RESOLVED.lock() {
        r.0 = Some(text);
    }
}

/// A flag's text as the TOML value a person would write: a number when it is one.
fn typed(text: String) -> toml::Value {
    if let Ok(n) = text.parse::<i64>() {
        return toml::Value::Integer(n);
    }
    match text.parse::<f64>() {
        Ok(x) if x.is_finite() && !text.contains(['e', 'E']) => toml::Value::Float(x),
        _ => toml::Value::String(text),
    }
}

fn raw(m: &ArgMatches, id: &str) -> Vec<String> {
    m.get_raw(id)
        .map(|v| v.map(|s| s.to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

/// The command's run directory, once it has claimed one (the first claim: a
/// sweep's top directory, not its points').
pub fn claimed(dir: &Path) {
    if let Ok(mut r) = RESOLVED.lock() {
        r.1.get_or_insert_with(|| dir.to_path_buf());
    }
}

/// The command's flags as `config.toml` text and the run directory it
/// claimed, when it did both (`run_dir::store_config` writes the file).
pub fn resolved() -> Option<(String, PathBuf)> {
    let r = RESOLVED.lock().ok()?;
    Some((r.0.clone()?, r.1.clone()?))
}
