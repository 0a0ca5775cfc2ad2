#!/usr/bin/env bash
# The test command (README, .ci/run): installs what the tests need, then runs them all.
#  - the llama.cpp fixture: llama-server built from source and generated models,
#    cached under ~/.cache/tokenscope (scripts/llama-fixture.sh);
#  - the whisper.cpp fixture: whisper-server built from PyPI's pywhispercpp source
#    package and a generated tiny Whisper model, cached likewise (scripts/whisper-fixture.sh);
#  - a PostgreSQL server from Debian's packages for the history tests, on
#    127.0.0.1, in a temporary directory, stopped after (scripts/postgres-fixture.sh);
#  - Debian's chromium (the HTML report is checked in headless Chromium),
#    tmux (the live dashboard is checked in a tmux pane) and prometheus (a
#    real Prometheus server scrapes --serve-metrics), when missing;
#  - kubernetes-validate (PyPI), in a venv of its own: the manifests checked
#    against Kubernetes' schemas offline;
#  - jsonschema (PyPI), in a venv of its own: the exports checked against the
#    peers' schemas (scripts/peers/);
#  - no import circle between the source files of any crate, and no HTTP
#    client under the simulator (scripts/check-imports.py);
#  - the Rust workspace's tests, in release mode (timing tests need optimised code);
#  - the wheel (scripts/wheel.sh): maturin from PyPI in a cached venv, the wheel
#    installed in a fresh venv and `tokenscope bench --requests 20` run from it.
# Extra arguments go to `cargo test` (e.g. scripts/test.sh --test llama_server).
set -euo pipefail
cd "$(dirname "$0")/.."

# Cheap and first: an import circle fails before any fixture is built.
python3 scripts/check-imports.py

need=()
command -v chromium >/dev/null || need+=(chromium)
command -v tmux >/dev/null || need+=(tmux)
command -v prometheus >/dev/null || need+=(prometheus)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]} (Debian packages)" >&2
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get install -y --no-install-recommends "${need[@]}" >&2 ||
    { $sudo_cmd apt-get update >&2 && $sudo_cmd apt-get install -y --no-install-recommends "${need[@]}" >&2; }
fi

fixture="$(scripts/llama-fixture.sh)"
while IFS='=' read -r key value; do
  [ -n "$key" ] && export "$key=$value"
done <<< "$fixture"
echo "llama.cpp fixture: $LLAMA_SERVER" >&2

# whisper.cpp's server and a generated Whisper model (the speech tests), with the
# llama fixture's build tools.
whisper="$(scripts/whisper-fixture.sh)"
while IFS='=' read -r key value; do
  [ -n "$key" ] && export "$key=$value"
done <<< "$whisper"

# kubernetes-validate (PyPI): Kubernetes' schemas, offline, for the manifests.
k8s_venv="${XDG_CACHE_HOME:-$HOME/.cache}/tokenscope/k8s-venv"
if [ ! -x "$k8s_venv/bin/kubernetes-validate" ]; then
  echo "installing kubernetes-validate in $k8s_venv" >&2
  python3 -m venv "$k8s_venv"
  "$k8s_venv/bin/pip" install --quiet --disable-pip-version-check kubernetes-validate >&2
fi
export KUBERNETES_VALIDATE="$k8s_venv/bin/kubernetes-validate"

# jsonschema (PyPI), in a venv of its own: the peer exports checked against
# the schemas of GuideLLM's, AIPerf's and vLLM's own models.
PEER_CHECK_PYTHON="$(scripts/peers/venv.sh)"
export PEER_CHECK_PYTHON

# A PostgreSQL server for the history tests, stopped however the tests end.
pg="$(scripts/postgres-fixture.sh start)"
while IFS='=' read -r key value; do
  [ -n "$key" ] && export "$key=$value"
done <<< "$pg"
trap 'scripts/postgres-fixture.sh stop "$TOKENSCOPE_TEST_POSTGRES_DIR"' EXIT

cargo test --release --workspace --no-fail-fast "$@"

# The wheel (pyproject.toml, maturin): built from the release artifacts just
# tested, installed in a fresh venv, run from that venv's PATH.
if [ $# -eq 0 ]; then
  scripts/wheel.sh >/dev/null
fi
