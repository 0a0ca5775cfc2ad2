#!/usr/bin/env bash
# Compares two sim plan run trees: every results.json / sweep.json without its
# time stamps and version, every run's records (its segments decompressed and
# joined before requests.jsonl: where rotation cut them may differ) and every
# timeseries.jsonl byte for byte.
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
# A run's records, segments (zstd, gzip or plain, in order) then requests.jsonl.
records() {
  local f
  for f in $(cd "$1" && ls requests.*.jsonl* 2>/dev/null | sort); do
    case $f in
      *.zst) zstd -dc "$1/$f" ;;
      *.gz) gzip -dc "$1/$f" ;;
      *) cat "$1/$f" ;;
    esac
  done
  [ -f "$1/requests.jsonl" ] && cat "$1/requests.jsonl"
}
for d in $(cd "$a" && find . -name requests.jsonl -printf '%h\n' | sort); do
  cmp -s <(records "$a/$d") <(records "$b/$d") || { echo "DIFFERS: $d/requests*"; rc=1; }
done
for f in $(cd "$a" && find . -name timeseries.jsonl | sort); do
  cmp -s "$a/$f" "$b/$f" || { echo "DIFFERS: $f"; rc=1; }
done
echo "compared $(cd "$a" && find . -name '*.json*' | wc -l) files"; exit $rc
