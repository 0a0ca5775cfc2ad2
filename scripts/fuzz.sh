#!/usr/bin/env bash
# Drives the SSE framer, the stream-chunk parser and the Prometheus parser
# with mutated corpus inputs (fuzz/corpus/): FUZZ_INPUTS each (default ten
# million). cargo-fuzz needs a nightly toolchain this machine cannot fetch;
# these harnesses are the same tests the suite runs at 20,000 inputs.
set -euo pipefail
cd "$(dirname "$0")/.."
export FUZZ_INPUTS="${FUZZ_INPUTS:-10000000}"
cargo test --release -p tokenscope-load --test fuzz -- --nocapture 2>&1 | grep -E "^fuzz|test result"
cargo test --release -p tokenscope-telemetry --test fuzz -- --nocapture 2>&1 | grep -E "^fuzz|test result"
