#!/usr/bin/env bash
# Benchmark of the client's own cost and precision (not a test): CPU per
# streamed token, tokens/s ingested on one core, the error of TTFT and TPOT
# against the server's own send times at 64 / 1,024 / 10,000 streams, peak
# memory over long runs, and a one-hour simulated plan. Markdown on stdout.
#
# The exact server runs as a separate process pinned to CPU 1, the client to
# CPU 0 with one worker thread, so the client's numbers are one core's. Every
# burst starts all its streams at once: no ramp-up, no warm-up round.
#
#   scripts/bench-client.sh > /tmp/bench.md
#   SECTIONS="timing memory" scripts/bench-client.sh   # a subset
#   SECTIONS=apis scripts/bench-client.sh              # each streaming API against chat
#   SECTIONS=exporter scripts/bench-client.sh          # --serve-metrics on and off
#   SECTIONS=ratio scripts/bench-client.sh             # CPU per token ÷ the floor, same run, two servers
#   BIN=/tmp/tokenscope-old SECTIONS=ratio scripts/bench-client.sh   # an older build, for a before/after
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
cargo build --release --quiet -p tokenscope-load --example kernel_floor
# BIN: another build of tokenscope to measure (a before/after: build the old
# commit, copy its binary aside, then BIN=/tmp/old scripts/bench-client.sh).
bin=${BIN:-target/release/tokenscope}
work="$(mktemp -d)"
server_pid=""
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
sections="${SECTIONS:-ratio throughput apis timing floor memory plan}"

# A server on CPU 1: the command after the port placeholder PORT; $url once /health answers.
serve_on_cpu1() {
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  taskset -c 1 "${@//PORT/$port}" > "$work/server.log" 2>&1 &
  server_pid=$!
  url="http://127.0.0.1:$port"
  for _ in $(seq 100); do
    curl -sf "$url/health" >/dev/null 2>&1 && break
    sleep 0.1
  done
}
start_server() { serve_on_cpu1 "$bin" sim exact --port PORT --threads 1 "$@"; } # args for `sim exact`
stop_server() { kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""; }
# scripts/sse_server.py (asyncio, no code of tokenscope's): the second server.
start_python_server() { serve_on_cpu1 python3 scripts/sse_server.py PORT "$@"; } # args after the port
median() { python3 -c "import statistics, sys; print(f'{statistics.median(map(float, sys.argv[1:])):.2f}')" "$@"; }

# `bench` on CPU 0, one client thread; peak RSS (KiB) and CPU seconds go to $work/time.
client() { # out-dir, then bench args; CLIENT_CPUS / CLIENT_THREADS override 0 / 1
  local out="$1"; shift
  /usr/bin/time -f "%M %U %S" -o "$work/time" taskset -c "${CLIENT_CPUS:-0}" "$bin" bench --url "$url" --quiet \
    --client-threads "${CLIENT_THREADS:-1}" --model tokenscope-exact --api "${API:-openai-chat}" --input-tokens 16 --no-metrics \
    --db "$work/history.db" --out "$out" "$@" > /dev/null
}
peak_mb() { awk '{printf "%.0f", $1 / 1024}' "$work/time"; }
cpu_s() { awk '{printf "%.2f", $2 + $3}' "$work/time"; }

# Figures of a run directory: results.json, and the per-request error against
# the exact server's own times (its `timings` on every answer).
figures() { python3 - "$1" <<'EOF'
import json, sys
run = sys.argv[1]
r = json.load(open(f"{run}/results.json"))
origin = r["client"]["monotonic_origin_us"]
ttft, tpot, read1, readn, queue, sent = [], [], [], [], [], []
for line in open(f"{run}/requests.jsonl"):
    q = json.loads(line)
    sent.append(q["sent_at_us"])
    t = q.get("server_timings")
    if q.get("error_kind") or not t:
        continue
    ttft.append((q["first_token_at_us"] - q["sent_at_us"]) / 1e3 - t["ttft_ms"])
    last = sum(q["chunks"]["at_us"])
    n = q["output_tokens"]
    if n >= 2:
        tpot.append(abs((last - q["first_token_at_us"]) / 1e3 / (n - 1) - t["tpot_ms"]))
    # On the host's shared clock: the client's read stamps − the server's sends,
    # and the server's handler arrival − the client's send stamp.
    read1.append((origin + q["first_token_at_us"] - t["first_sent_mono_us"]) / 1e3)
    readn.append((origin + last - t["last_sent_mono_us"]) / 1e3)
    queue.append((t["arrived_mono_us"] - origin - q["sent_at_us"]) / 1e3)
def q(a, p):
    a = sorted(a)
    return a[min(len(a) - 1, int(p * len(a)))] if a else float("nan")
c, l = r["client"], r["latency"]
tokens = r["tokens"]["output_total"]
print(json.dumps({
    "ok": r["counts"]["succeeded"], "n": r["counts"]["requests"],
    "ttft50": q(ttft, .5), "ttft99": q(ttft, .99),
    "read1_50": q(read1, .5), "read1_99": q(read1, .99), "readn_50": q(readn, .5), "readn_99": q(readn, .99),
    "queue50": q(queue, .5), "queue99": q(queue, .99), "tpot50": q(tpot, .5), "tpot99": q(tpot, .99),
    "spread": (max(sent) - min(sent)) / 1e3 if sent else float("nan"),
    "lag99": l["client_lag_ms"]["p99"], "loop99": c["loop_delay_ms"]["p99"],
    "unstamped": c.get("unstamped_reads", float("nan")),
    "cpu100k": c["cpu_seconds"] / tokens * 1e5 if tokens else float("nan"),
    "tps": r["throughput"]["output_tokens_per_s"], "cores": c["cpu_cores"],
    "rules": sorted({f["rule"] for f in r["diagnosis"]}),
}))
EOF
}
get() { python3 -c "
import json, sys
v = json.loads(sys.argv[1])[sys.argv[2]]
print(', '.join(v) if isinstance(v, list) else format(v, sys.argv[3]))" "$1" "$2" "$3"; }

echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))."

if [[ $sections == *ratio* ]]; then
  runs=${RATIO_RUNS:-3}
  echo
  echo "## CPU per output token ÷ the kernel's floor, measured in the same run against the same server"
  echo
  echo '1,024 streams started together, 256 tokens each, TTFT 100 ms, ITL 20 ms: one token a read.'
  echo 'Each client on CPU 0, the server on CPU 1. **Whole process**: user + system CPU of the'
  echo "client's process from start to exit (\`/usr/bin/time\`: its start-up, recorder, results and"
  echo 'report included) ÷ output tokens. The floor (`examples/kernel_floor.rs`: epoll and one'
  echo '`recv` a ready socket, no parsing) counts its read phase. **First token read** = the'
  echo "client's read stamp − the exact server's send of that token (CLOCK_MONOTONIC, both"
  echo "processes): the client's own error in TTFT. Medians of $runs runs. Two servers:"
  echo "tokenscope's exact server (Rust, tokio) and \`scripts/sse_server.py\` (asyncio, chunked"
  echo "encoding, vLLM's chunk shape), which share no code."
  echo
  echo "| server | client | CPU per output token | × the floor | first token read p50 / p99 |"
  echo "|---|---|---|---|---|"
  ratio_rows() { # server name, then API names to run through bench
    local server="$1"; shift
    local floor=() fl per
    for _ in $(seq "$runs"); do
      fl=$(taskset -c 0 target/release/examples/kernel_floor "${url##*:}" 1024 256)
      floor+=("$(python3 -c "
import json, sys
f = json.loads(sys.argv[1])
print(f['cpu_us_per_event'] * f['events'] / (f['streams'] * 256))" "$fl")")
    done
    local fm
    fm=$(median "${floor[@]}")
    printf '| %s | kernel floor | %s µs | 1.00 | |\n' "$server" "$fm"
    for api in "$@"; do
      local cpu=() err=""
      for i in $(seq "$runs"); do
        API=$api client "$work/r-$api-$i" --concurrency 1024 --requests 1024 --output-tokens 256
        cpu+=("$(python3 -c "print($(cpu_s) * 1e6 / (1024 * 256))")")
        f=$(figures "$work/r-$api-$i")
        [ "$server" = exact ] && err="$(get "$f" read1_50 +.2f) / $(get "$f" read1_99 +.2f) ms"
        rm -rf "$work/r-$api-$i"
      done
      per=$(median "${cpu[@]}")
      printf '| %s | tokenscope bench --api %s | %s µs | %s | %s |\n' "$server" "$api" "$per" \
        "$(python3 -c "print(f'{$per / $fm:.2f}')")" "$err"
    done
  }
  start_server --ttft 100ms --itl 20ms
  ratio_rows exact openai-chat openai-completions openai-responses anthropic-messages tgi sglang
  stop_server
  start_python_server --ttft-ms 100 --itl-ms 20
  ratio_rows sse_server.py openai-chat
  stop_server
fi

if [[ $sections == *throughput* ]]; then
  echo
  echo "## Ingest on one core (server sends as fast as it can: TTFT 0, ITL 0, 2,048 tokens)"
  echo
  echo "| streams | requests | output tokens/s | client CPU cores | client CPU-s per 100k tokens | peak RSS |"
  echo "|---|---|---|---|---|---|"
  start_server --ttft 0ms --itl 0ms
  for spec in "1 400" "64 800" "1024 2048"; do
    set -- $spec
    client "$work/tp-$1" --concurrency "$1" --requests "$2" --output-tokens 2048
    f=$(figures "$work/tp-$1")
    printf '| %s | %s | %s | %s | %s | %s MB |\n' "$1" "$2" "$(get "$f" tps .0f)" \
      "$(get "$f" cores .2f)" "$(get "$f" cpu100k .3f)" "$(peak_mb)"
  done
  # Scaling with cores: two client threads on both cores. The server keeps
  # CPU 1, so tokens/s cannot double here; the CPU per token says whether the
  # threads cost more together than apart (contention), i.e. whether a
  # second free core would double the ingest.
  CLIENT_CPUS=0,1 CLIENT_THREADS=2 client "$work/tp-2t" --concurrency 1024 --requests 2048 --output-tokens 2048
  f=$(figures "$work/tp-2t")
  printf '| 1024, two client threads on both cores (the server on CPU 1) | 2048 | %s | %s | %s | %s MB |\n' \
    "$(get "$f" tps .0f)" "$(get "$f" cores .2f)" "$(get "$f" cpu100k .3f)" "$(peak_mb)"
  stop_server
fi

if [[ $sections == *apis* ]]; then
  echo
  echo "## Each streaming API on one core (64 streams, 800 requests of 2,048 tokens, TTFT 0, ITL 0)"
  echo
  echo "| API | output tokens/s | client CPU-s per 100k tokens | × OpenAI chat's |"
  echo "|---|---|---|---|"
  start_server --ttft 0ms --itl 0ms
  chat=""
  # Each row: a name, the API, and its extra flags (Triton's per-event
  # counts; chat with two 640x480 images a request, encoded once).
  rows=(
    "openai-chat|openai-chat|"
    "openai-completions|openai-completions|"
    "openai-responses|openai-responses|"
    "anthropic-messages|anthropic-messages|"
    "tgi|tgi|"
    "sglang|sglang|"
    "triton|triton|--extra-body {\"return_num_output_tokens\":true}"
    "openai-chat, 2 images 640x480|openai-chat|--images 2 --image-size 640x480"
  )
  for row in "${rows[@]}"; do
    IFS='|' read -r name api extra <<< "$row"
    dir="$work/api-${name//[^a-z0-9-]/_}"
    # shellcheck disable=SC2086
    API=$api client "$dir" --concurrency 64 --requests 800 --output-tokens 2048 $extra
    f=$(figures "$dir")
    cpu=$(get "$f" cpu100k .3f)
    [ -z "$chat" ] && chat=$cpu
    printf '| %s | %s | %s | %s |\n' "$name" "$(get "$f" tps .0f)" "$cpu" \
      "$(python3 -c "print(f'{$cpu / $chat:.2f}')")"
  done
  stop_server
fi

if [[ $sections == *exporter* ]]; then
  echo
  echo "## The live exporters' cost (--serve-metrics scraped every 100 ms; --otlp-endpoint pushing every 5 s; 64 streams, 800 requests of 2,048 tokens, TTFT 0, ITL 0)"
  echo
  echo "| run | output tokens/s | client CPU-s per 100k tokens | × without | whole process CPU-s (recorder and exporter threads too) | × without |"
  echo "|---|---|---|---|---|---|"
  start_server --ttft 0ms --itl 0ms
  base=""
  base_all=""
  # An OTLP receiver that takes every push and answers 200, on the server's core.
  oport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  taskset -c 1 python3 -c '
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200); self.send_header("content-length", "0"); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()' "$oport" &
  receiver=$!
  for with in no yes otlp; do
    extra=()
    scraper=""
    if [ "$with" = otlp ]; then
      extra=(--otlp-endpoint "http://127.0.0.1:$oport")
    fi
    if [ "$with" = yes ]; then
      mport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
      extra=(--serve-metrics "127.0.0.1:$mport")
      # A scraper on the server's core, as Prometheus would be elsewhere.
      (while true; do taskset -c 1 curl -s "http://127.0.0.1:$mport/metrics" > /dev/null || true; sleep 0.1; done) &
      scraper=$!
    fi
    client "$work/exp-$with" --concurrency 64 --requests 800 --output-tokens 2048 "${extra[@]}"
    [ -n "$scraper" ] && { kill "$scraper" 2>/dev/null || true; }
    f=$(figures "$work/exp-$with")
    cpu=$(get "$f" cpu100k .3f)
    all=$(cpu_s)
    [ -z "$base" ] && base=$cpu && base_all=$all
    name="--serve-metrics: $with"
    [ "$with" = otlp ] && name="--otlp-endpoint (a receiver on the server's core)"
    printf '| %s | %s | %s | %s | %s | %s |\n' "$name" "$(get "$f" tps .0f)" "$cpu" \
      "$(python3 -c "print(f'{$cpu / $base:.3f}')")" "$all" "$(python3 -c "print(f'{$all / $base_all:.3f}')")"
  done
  kill "$receiver" 2>/dev/null || true
  stop_server
fi

if [[ $sections == *timing* ]]; then
  echo
  echo "## Error against the server's own send times (all streams started at once)"
  echo
  echo "On the host's shared clock (CLOCK_MONOTONIC, stamped by both processes):"
  echo "**first / last token read** = the client's read stamp − the server's send of that"
  echo "token: the client's own error in TTFT and in E2E. **Server queue** = the server's"
  echo "handler arrival − the client's send stamp: the kernel and the one-core server"
  echo "accepting the burst, time a real server's TTFT contains too. **TTFT vs server's"
  echo "own** = client TTFT − the server's (handler arrival → first token sent), which"
  echo "holds both. TPOT error = client TPOT − the server's, by size. Lag = the send"
  echo "spread (actual send − intended start); loop delay = the client's 1 ms probe."
  echo
  echo "| streams | server TTFT / ITL / tokens | first token read p50 / p99 | last token read p50 / p99 | server queue p50 / p99 | TTFT vs server's own p50 / p99 | TPOT error p50 / p99 | lag p99 | loop delay p99 | unstamped reads | client CPU-s per 100k tokens | tokens/s | peak RSS | findings |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  for spec in "64 100ms 20ms 256" "1024 100ms 20ms 256" "10000 1000ms 500ms 32"; do
    set -- $spec
    start_server --ttft "$2" --itl "$3"
    client "$work/t-$1" --concurrency "$1" --requests "$1" --output-tokens "$4"
    f=$(figures "$work/t-$1")
    printf '| %s | %s / %s / %s | %+.2f / %+.2f ms | %+.2f / %+.2f ms | %.2f / %.2f ms | %+.2f / %+.2f ms | %.3f / %.3f ms | %.1f ms | %.2f ms | %.0f | %.2f | %.0f | %s MB | %s |\n' \
      "$1" "$2" "$3" "$4" "$(get "$f" read1_50 f)" "$(get "$f" read1_99 f)" \
      "$(get "$f" readn_50 f)" "$(get "$f" readn_99 f)" "$(get "$f" queue50 f)" "$(get "$f" queue99 f)" \
      "$(get "$f" ttft50 f)" "$(get "$f" ttft99 f)" "$(get "$f" tpot50 f)" \
      "$(get "$f" tpot99 f)" "$(get "$f" lag99 f)" "$(get "$f" loop99 f)" "$(get "$f" unstamped f)" \
      "$(get "$f" cpu100k f)" "$(get "$f" tps f)" "$(peak_mb)" "$(get "$f" rules s)"
    stop_server
  done
fi

if [[ $sections == *floor* ]]; then
  echo
  echo "## The kernel's floor on this host (one core, TTFT 100 ms, ITL 20 ms, 256 tokens)"
  echo
  echo "\`examples/kernel_floor.rs\` is the least a client can do: N requests written in a"
  echo "tight loop on open connections, then every stream read with epoll and one"
  echo "\`recv\` per ready socket, counting SSE events (no parsing, no stamps, no runtime)."
  echo "tokenscope's row is the same load through \`bench\` (one client thread)."
  echo
  echo "| streams | client | burst: all requests sent in | CPU per send | CPU per output token |"
  echo "|---|---|---|---|---|"
  start_server --ttft 100ms --itl 20ms
  for n in 64 1024; do
    fl=$(taskset -c 0 target/release/examples/kernel_floor "${url##*:}" "$n" 256)
    python3 -c "
import json, sys
f = json.loads(sys.argv[1])
per_token = f['cpu_us_per_event'] * f['events'] / (f['streams'] * 256)
print(f\"| {f['streams']} | kernel floor | {f['burst_ms']:.1f} ms | {f['cpu_us_per_send']:.1f} µs | {per_token:.1f} µs |\")" "$fl"
    client "$work/f-$n" --concurrency "$n" --requests "$n" --output-tokens 256
    f=$(figures "$work/f-$n")
    printf '| %s | tokenscope bench | %.1f ms | | %.1f µs |\n' "$n" "$(get "$f" spread f)" \
      "$(python3 -c "print($(get "$f" cpu100k f) * 10)")"
  done
  stop_server
fi

if [[ $sections == *memory* ]]; then
  echo
  echo "## Memory over long runs (256 streams, 256 tokens each, TTFT 0, ITL 0)"
  echo
  echo "| requests | output tokens | peak RSS | client CPU-s | run directory |"
  echo "|---|---|---|---|---|"
  start_server --ttft 0ms --itl 0ms
  for n in 16384 131072; do
    client "$work/m-$n" --concurrency 256 --requests "$n" --output-tokens 256
    printf '| %s | %s | %s MB | %s | %s |\n' "$n" "$((n * 256))" "$(peak_mb)" "$(cpu_s)" \
      "$(du -sh "$work/m-$n" | cut -f1)"
    rm -rf "$work/m-$n"
  done
  stop_server
fi

if [[ $sections == *plan* ]]; then
  echo
  echo "## A one-hour simulated plan (Llama-3.1-8B on an H100, 20 requests/s, 512 in / 256 out)"
  echo
  echo "| command | CPU-s | peak RSS | run directory |"
  echo "|---|---|---|---|"
  cpus=() peaks=()
  for _ in $(seq "${PLAN_RUNS:-3}"); do
    rm -rf "$work/plan"
    /usr/bin/time -f "%M %U %S" -o "$work/time" "$bin" sim plan --model llama-3.1-8b --gpu h100-sxm \
      --rate 20 --duration 1h --input-tokens 512 --output-tokens 256 --quiet --out "$work/plan" \
      --db "$work/plan-history.db" > /dev/null
    rm -f "$work/plan-history.db"
    cpus+=("$(cpu_s)") peaks+=("$(peak_mb)")
  done
  printf '| sim plan --rate 20 --duration 1h (with its report; median of %s) | %s | %s MB | %s |\n' \
    "${#cpus[@]}" "$(median "${cpus[@]}")" "$(median "${peaks[@]}")" "$(du -sh "$work/plan" | cut -f1)"
  /usr/bin/time -f "%M %U %S" -o "$work/time" "$bin" report "$work/plan" > /dev/null
  printf '| report of that run | %s | %s MB | |\n' "$(cpu_s)" "$(peak_mb)"
fi
