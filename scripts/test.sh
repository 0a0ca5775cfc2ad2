#!/usr/bin/env bash
# The test command (README, .ci/run): installs what the tests need, then runs them all.
#  - the llama.cpp fixture: llama-server built from source and generated models,
#    cached under ~/.cache/tokenscope (scripts/llama-fixture.sh);
#  - the Rust workspace's tests, in release mode (timing tests need optimised code).
# Extra arguments go to `cargo test` (e.g. scripts/test.sh --test llama_server).
set -euo pipefail
cd "$(dirname "$0")/.."

fixture="$(scripts/llama-fixture.sh)"
while IFS='=' read -r key value; do
  [ -n "$key" ] && export "$key=$value"
done <<< "$fixture"
echo "llama.cpp fixture: $LLAMA_SERVER" >&2

cargo test --release --workspace --no-fail-fast "$@"
