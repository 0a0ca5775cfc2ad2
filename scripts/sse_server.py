#!/usr/bin/env python3
"""A second, independent streaming server for scripts/bench-client.sh.

The kernel's floor depends on the server a client reads from (how it frames
its writes, its chunked encoding, its pacing), so the client's cost is
reported as a ratio to the floor measured against the same server. This one
shares no code with tokenscope: Python's asyncio, OpenAI chat chunks as vLLM
frames them (chunked transfer encoding, one event a write), a fixed TTFT and
ITL. Chat completions only; /v1/models and /health for the client's probes.

    scripts/sse_server.py PORT [--ttft-ms 100] [--itl-ms 20]
"""

import argparse
import asyncio
import json

MODEL = "tokenscope-exact"


def chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def event(obj) -> bytes:
    return chunk(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


def delta(i: int, content, finish=None) -> dict:
    d = {} if content is None else {"content": content}
    return {
        "id": f"chatcmpl-{i}",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "delta": d, "logprobs": None, "finish_reason": finish}],
    }


async def answer(writer, n: int, req: int, ttft: float, itl: float) -> None:
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\n\r\n"
    )
    await asyncio.sleep(ttft)
    loop = asyncio.get_running_loop()
    start = loop.time()
    for k in range(n):
        writer.write(event(delta(req, " tok")))
        await writer.drain()
        # Paced from the first token, so a late wake does not stretch the run.
        await asyncio.sleep(max(0.0, start + (k + 1) * itl - loop.time()))
    last = delta(req, None, "length")
    last["usage"] = {"prompt_tokens": 16, "completion_tokens": n, "total_tokens": 16 + n}
    writer.write(event(last) + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    await writer.drain()


def whole(writer, status: str, body: bytes) -> None:
    writer.write(
        b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
        % (status.encode(), len(body), body)
    )


async def serve(reader, writer, args, counter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            length = 0
            for line in lines[1:]:
                if line.lower().startswith("content-length:"):
                    length = int(line.split(":", 1)[1])
            body = await reader.readexactly(length) if length else b""
            if method == "GET" and path.startswith("/v1/models"):
                whole(writer, "200 OK", json.dumps({"data": [{"id": MODEL}]}).encode())
            elif method == "GET" and path.startswith("/health"):
                whole(writer, "200 OK", b"{}")
            elif method == "POST" and path.startswith("/v1/chat/completions"):
                n = int(json.loads(body).get("max_tokens") or 16)
                counter[0] += 1
                await answer(writer, n, counter[0], args.ttft_ms / 1e3, args.itl_ms / 1e3)
            else:
                whole(writer, "404 Not Found", b'{"error":"not found"}')
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        pass
    finally:
        writer.close()


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("port", type=int)
    p.add_argument("--ttft-ms", type=float, default=100.0)
    p.add_argument("--itl-ms", type=float, default=20.0)
    args = p.parse_args()
    counter = [0]
    server = await asyncio.start_server(
        lambda r, w: serve(r, w, args, counter), "127.0.0.1", args.port, backlog=4096
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
