//! The `tokenscope` binary: the command line in, the exit code out. All the
//! work is in the `tokenscope` library (`lib.rs`).

fn main() -> std::process::ExitCode {
    tokenscope::main(std::env::args_os().collect())
}
