#!/usr/bin/env bash
# The Python that checks tokenscope's peer exports against the peers'
# schemas: a venv holding only jsonschema (pinned), made once and kept in
# the cache. Prints its python's path.
set -euo pipefail
venv="${TOKENSCOPE_CACHE:-$HOME/.cache/tokenscope}/peer-check-venv"
stamp="$venv/.jsonschema-4.23.0"
if [[ ! -f "$stamp" ]]; then
    rm -rf "$venv"
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check --only-binary=:all: \
        jsonschema==4.23.0 >&2
    touch "$stamp"
fi
echo "$venv/bin/python"
