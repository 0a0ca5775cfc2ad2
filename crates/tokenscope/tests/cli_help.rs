//! The help a person scans: `bench --help` under headings, shell
//! completions a shell accepts and that complete, and the manual page.

mod common;
use common::*;

fn stdout_of(args: &[&str]) -> String {
    let o = tokenscope().args(args).output().unwrap();
    assert_ok(&o);
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn bench_help_is_grouped_under_headings_most_used_first() {
    let help = stdout_of(&["bench", "--help"]);
    let headings = [
        "Target:",
        "Load:",
        "Workload:",
        "Agents and answers:",
        "Media:",
        "Requests and API:",
        "Server telemetry:",
        "SLO and cost:",
        "Outputs and live export:",
        "Client:",
    ];
    let at: Vec<usize> = headings
        .iter()
        .map(|h| {
            help.lines()
                .position(|l| l == *h)
                .unwrap_or_else(|| panic!("no heading {h} in:\n{help}"))
        })
        .collect();
    // Where to send and how much first; the client's own knobs last.
    assert!(at[0] < at[1] && at[1] < at[2], "{at:?}");
    assert_eq!(at.iter().max(), Some(&at[9]), "{at:?}");
    let under = |flag: &str, heading: &str| {
        let h = help.lines().position(|l| l == heading).unwrap();
        let f = help
            .lines()
            .position(|l| l.trim_start().starts_with(flag))
            .unwrap();
        let next = help
            .lines()
            .skip(h + 1)
            .position(|l| l.ends_with(':') && !l.starts_with(' '));
        assert!(
            f > h && next.is_none_or(|n| f <= h + 1 + n),
            "{flag} not under {heading}"
        );
    };
    under("--url", "Target:");
    under("--rate", "Load:");
    under("--input-tokens", "Workload:");
    under("--images", "Media:");
    under("--tools", "Agents and answers:");
    under("--slo", "SLO and cost:");
    under("--stop-on", "Client:");
    // `-h` is short: the most-used flags under the same headings, the
    // examples after, and it says where the rest are; `--help` has them all.
    let short = stdout_of(&["bench", "-h"]);
    assert!(
        short.contains("Target:") && short.contains("Examples:"),
        "{short}"
    );
    assert!(short.contains("--help shows all"), "{short}");
    for flag in [
        "--url",
        "--concurrency",
        "--rate",
        "--requests",
        "--slo",
        "--out",
    ] {
        assert!(short.contains(flag), "{flag} in -h:\n{short}");
    }
    for flag in ["--stop-on", "--images", "--reasoning-parser"] {
        assert!(!short.contains(flag), "{flag} only in --help:\n{short}");
        assert!(help.contains(flag), "{flag} in --help");
    }
    assert!(
        short.lines().count() * 3 < help.lines().count(),
        "-h {} lines, --help {}",
        short.lines().count(),
        help.lines().count()
    );
    for command in [&["sweep"][..], &["tune"], &["sim", "plan"]] {
        let short = stdout_of(&[command, &["-h"]].concat());
        let long = stdout_of(&[command, &["--help"]].concat());
        assert!(short.lines().count() < long.lines().count(), "{command:?}");
    }
}

#[test]
fn completions_are_scripts_the_shell_takes_and_they_complete() {
    let script = stdout_of(&["completions", "bash"]);
    let file = write_file("tokenscope-completion", &script);
    let check = std::process::Command::new("bash")
        .arg("-n")
        .arg(&file)
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");
    // Sourced, it completes a command and a flag as bash would ask it to.
    let complete = |line: &str| {
        let words: Vec<&str> = line.split(' ').collect();
        let probe = format!(
            "source '{}'; COMP_WORDS=({}); COMP_CWORD={}; COMP_LINE='{line}'; COMP_POINT={}; _tokenscope tokenscope '{}' '{}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            file.display(),
            line,
            words.len() - 1,
            line.len(),
            words[words.len() - 1],
            words[words.len() - 2],
        );
        let o = std::process::Command::new("bash")
            .args(["-c", &probe])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    assert!(complete("tokenscope tu").lines().any(|l| l == "tune"));
    let flags = complete("tokenscope bench --ur");
    assert!(flags.lines().any(|l| l == "--url"), "{flags}");
    for shell in ["zsh", "fish", "powershell", "elvish"] {
        assert!(stdout_of(&["completions", shell]).contains("tokenscope"));
    }
    let o = tokenscope().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("possible values: bash"));
}

#[test]
fn the_manual_has_a_page_for_the_tool_and_each_command() {
    let man = stdout_of(&["man"]);
    assert!(man.contains(".TH tokenscope 1"), "{}", &man[..200]);
    for page in [
        "tokenscope-bench",
        "tokenscope-sweep",
        "tokenscope-tune",
        "tokenscope-history",
    ] {
        assert!(man.contains(&format!(".TH {page} 1")), "no page {page}");
    }
    assert!(man.contains("\\-\\-url"), "the flags are described");
}
