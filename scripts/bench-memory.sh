#!/usr/bin/env bash
# Peak memory under hostile input (docs/performance.md, "Memory under
# hostile input"): the client's own VmHWM (results.json's
# client.peak_rss_mb) for
#  - a server that sends one line that never ends;
#  - a server that streams valid tokens forever;
#  - the largest synthetic media pools the flags accept: 8192x8192 PNG and
#    JPEG images, and 600 s audio clips, each at the largest --media-pool
#    the budget takes (read from the refusal of a larger one).
# Every run is bounded (one request, --timeout 60s; the servers stop after
# 60 s). Prints one line a case. MODES="line" (or "") picks the hostile
# servers; CONCURRENCY (default 1) the media runs' streams.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
ts=target/release/tokenscope
work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

# A hostile server on 127.0.0.1: MODE line (an endless line) or stream
# (endless valid events). Prints its port.
serve() {
  python3 - "$1" <<'PY' &
import socket, sys, threading, time
mode = sys.argv[1]
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0)); s.listen(16)
print(s.getsockname()[1], flush=True)
head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
event = b'data: {"choices":[{"delta":{"content":"tok"}}]}\n\n' * 1024
def answer(c):
    c.recv(65536)
    start = time.time()
    try:
        if mode == "line":
            c.sendall(head + b'data: {"choices":[{"delta":{"content":"')
            piece = b"x" * 65536
        else:
            c.sendall(head)
            piece = event
        while time.time() - start < 60:
            c.sendall(piece)
    except OSError:
        pass
    c.close()
end = time.time() + 120
while time.time() < end:
    c, _ = s.accept()
    threading.Thread(target=answer, args=(c,), daemon=True).start()
PY
}

peak() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['client']['peak_rss_mb'])" "$1/results.json"; }

for mode in ${MODES-line stream}; do
  port_file="$work/$mode.port"
  serve "$mode" > "$port_file"
  while [ ! -s "$port_file" ]; do sleep 0.1; done
  port="$(head -1 "$port_file")"
  out="$work/$mode"
  "$ts" bench --url "http://127.0.0.1:$port" --api openai-chat --model m --no-metrics \
    --requests 1 --timeout 60s --quiet --out "$out" >/dev/null 2>&1 || true
  kind="$(head -c 2000 "$out/requests.jsonl" | grep -o '"error_kind":"[a-z_]*"' || true)"
  echo "endless $mode: peak RSS $(peak "$out") MB ($kind)"
done

# The largest pool the budget takes, from the refusal of a larger one.
largest() {
  local said
  said="$("$ts" bench --builtin exact --requests 1 --quiet --out "$work/refused" "$@" --media-pool 100000 2>&1 >/dev/null || true)"
  echo "$said" | grep -o 'at most [0-9]* fit' | grep -o '[0-9]*' | head -1
}
# The exact server in a process of its own: the client's peak is its own.
"$ts" sim exact --port 0 --ttft 10ms --itl 1ms > "$work/exact.log" 2>&1 &
while ! grep -qo '127.0.0.1:[0-9]*' "$work/exact.log" 2>/dev/null; do sleep 0.1; done
exact="http://$(grep -o '127.0.0.1:[0-9]*' "$work/exact.log" | head -1)"
media_case() {
  local name="$1"; shift
  local n; n="$(largest "$@")"
  local out="$work/media-$name"
  local started=$SECONDS
  "$ts" bench --url "$exact" --no-metrics --requests 4 --concurrency "${CONCURRENCY:-1}" --output-tokens 8 --quiet --out "$out" "$@" --media-pool "${n:-1}" >/dev/null 2>&1
  echo "media $name, --media-pool $n (the largest accepted): peak RSS $(peak "$out") MB, $((SECONDS - started)) s"
}
media_case png-8192 --images 1 --image-size 8192x8192 --image-format png
media_case jpeg-8192 --images 1 --image-size 8192x8192 --image-format jpeg
media_case audio-600s --audio 1 --audio-seconds 600
