#!/usr/bin/env bash
# The Python the tests check tokenscope against its peers with: a venv
# holding jsonschema (the peers' schemas) and the OpenTelemetry Python SDK
# with its OTLP encoder (agent traces written as an instrumented agent
# writes them), all pinned, made once and kept in the cache. Prints its
# python's path.
set -euo pipefail
venv="${TOKENSCOPE_CACHE:-$HOME/.cache/tokenscope}/peer-check-venv"
stamp="$venv/.jsonschema-4.23.0-otel-1.29.0"
if [[ ! -f "$stamp" ]]; then
    rm -rf "$venv"
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check --only-binary=:all: \
        jsonschema==4.23.0 opentelemetry-sdk==1.29.0 \
        opentelemetry-exporter-otlp-proto-common==1.29.0 >&2
    touch "$stamp"
fi
echo "$venv/bin/python"
