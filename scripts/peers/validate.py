#!/usr/bin/env python3
"""Validate a tokenscope export against a peer's JSON Schema (made from the
peer's own models by scripts/peers/refresh.py).

    validate.py SCHEMA FILE            one JSON document
    validate.py --jsonl SCHEMA FILE    every line of a JSON Lines file

Prints each error as one line (where in the file, what is wrong) and exits
1 when there is any; 0 and a count when the file conforms.
"""

import json
import sys

from jsonschema import Draft202012Validator


def errors(validator, doc, where):
    for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
        path = "/".join(str(p) for p in e.absolute_path) or "(top)"
        yield f"{where}: {path}: {e.message[:300]}"


def main(argv):
    jsonl = argv[:1] == ["--jsonl"]
    if jsonl:
        argv = argv[1:]
    if len(argv) != 2:
        sys.exit(__doc__)
    schema_path, file_path = argv
    with open(schema_path) as f:
        validator = Draft202012Validator(json.load(f))
    with open(file_path) as f:
        docs = [(f"{file_path}:{i + 1}", json.loads(line)) for i, line in enumerate(f)] \
            if jsonl else [(file_path, json.load(f))]
    found = [e for where, doc in docs for e in errors(validator, doc, where)]
    for e in found[:40]:
        print(e)
    if found:
        print(f"{len(found)} error(s) against {schema_path}")
        return 1
    print(f"{len(docs)} document(s) conform to {schema_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
