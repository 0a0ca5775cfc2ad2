#!/usr/bin/env bash
# The wheel: `pip install tokenscope` as ruff and uv ship, the binary in a
# wheel (maturin, `bindings = "bin"`, pyproject.toml). Builds it into
# target/wheels (maturin from PyPI, in a venv cached under
# ~/.cache/tokenscope), installs it in a fresh venv, and runs
# `tokenscope bench --requests 20` from that venv's PATH against the
# built-in server. Prints the wheel's path on stdout.
#
#   scripts/wheel.sh            build, install, run
#
# The wheel is for the platform it is built on (its tag says which:
# manylinux_2_X_x86_64 on this glibc, for example); build it on each
# platform to ship.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "[wheel] $*" >&2; }

tools="${XDG_CACHE_HOME:-$HOME/.cache}/tokenscope/maturin-venv"
if [ ! -x "$tools/bin/maturin" ]; then
  log "installing maturin in $tools"
  python3 -m venv "$tools"
  "$tools/bin/pip" install --quiet --disable-pip-version-check 'maturin>=1.5,<2' >&2
fi

rm -rf target/wheels
log "building (cargo's release profile: the test build's artifacts are reused)"
"$tools/bin/maturin" build --release --out target/wheels >&2
wheel="$(ls target/wheels/tokenscope-*.whl)"
log "built $wheel ($(du -h "$wheel" | cut -f1))"

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
python3 -m venv "$scratch/venv"
"$scratch/venv/bin/pip" install --quiet --disable-pip-version-check --no-index "$wheel" >&2
# From the venv's PATH alone: the wheel's own binary, not the build's.
PATH="$scratch/venv/bin:/usr/bin:/bin" tokenscope --version >&2
PATH="$scratch/venv/bin:/usr/bin:/bin" tokenscope bench --requests 20 --quiet --no-history \
  --out "$scratch/run" >&2
test -s "$scratch/run/results.json" || { log "no results.json from the installed binary"; exit 1; }
python3 - "$scratch/run/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
n = r["counts"]["succeeded"]
assert n == 20, f"{n} of 20 requests succeeded"
print(f"[wheel] the installed tokenscope ran 20 requests: {r['throughput']['output_tokens_per_s']:.0f} output tok/s", file=sys.stderr)
PY
echo "$wheel"
