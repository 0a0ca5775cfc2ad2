#!/usr/bin/env bash
# Compares two sim plan run trees: every results.json / sweep.json without its
# time stamps and version, every requests.jsonl and timeseries.jsonl byte for byte.
set -u
a=$1; b=$2; rc=0
norm() { python3 -c '
import json,sys
d=json.load(open(sys.argv[1]))
def strip(x):
    if isinstance(x,dict):
        return {k:strip(v) for k,v in x.items() if k not in ("started_at","version","tool","peak_rss_mb")}
    if isinstance(x,list): return [strip(v) for v in x]
    return x
print(json.dumps(strip(d),indent=1,sort_keys=True))' "$1"; }
for f in $(cd "$a" && find . -name results.json -o -name sweep.json | sort); do
  diff <(norm "$a/$f") <(norm "$b/$f") > /dev/null || { echo "DIFFERS: $f"; rc=1; }
done
for f in $(cd "$a" && find . -name requests.jsonl -o -name timeseries.jsonl | sort); do
  cmp -s "$a/$f" "$b/$f" || { echo "DIFFERS: $f"; rc=1; }
done
echo "compared $(cd "$a" && find . -name '*.json*' | wc -l) files"; exit $rc
