//! The command's words on stdout: a reader that went away (`… | head`)
//! ends them quietly, without a panic or a changed exit code.

use std::io::Write;

/// Writes to stdout; a reader that went away (`… | head`, `… | true`) ends
/// the output quietly, and the command keeps its own exit code.
pub fn to_stdout(text: &str) {
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// `println!` for a command's output: a closed stdout (`| head`) ends it
/// quietly, never a panic.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::to_stdout(&format!("{}\n", format_args!($($arg)*)))
    };
}
