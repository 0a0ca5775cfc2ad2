"""Writes agent traces as an instrumented agent's OpenTelemetry SDK does:
spans made by the SDK's tracer with the GenAI semantic conventions'
attributes, encoded by the SDK's own OTLP encoder, written as OTLP JSON.

usage: otel_trace.py OUT.json [--hex]

Without --hex the ids are base64, as protobuf's JSON mapping writes bytes;
with --hex they are hex, as the OTLP/JSON specification asks (what the
Collector's file exporter writes). tokenscope reads both.

The traces (times in ms from each trace's start):
  trace 1 (starts at 0 s): an agent span over all of it; chat `plan`
    0-100 (50 in, 10 out); execute_tool 100-150; three chats in parallel
    150-300 (70/20), 150-250 (71/21), 151-300 (72/22); chat `join`
    320-400 (200/30).
  trace 2 (starts 2 s later): chat 0-80 (40/8); execute_tool 80-280;
    chat 280-360 (90/12).
"""
import base64
import sys

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry import trace
import json

MS = 1_000_000
T0 = 1_700_000_000_000 * MS


def chat(tracer, start, end, tokens, parent):
    s = tracer.start_span("chat model", context=parent, start_time=start,
                          attributes={"gen_ai.operation.name": "chat",
                                      "gen_ai.usage.input_tokens": tokens[0],
                                      "gen_ai.usage.output_tokens": tokens[1]})
    s.end(end_time=end)


def tool(tracer, start, end, parent):
    s = tracer.start_span("execute_tool search", context=parent, start_time=start,
                          attributes={"gen_ai.operation.name": "execute_tool"})
    s.end(end_time=end)


def main():
    out, hexids = sys.argv[1], "--hex" in sys.argv
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("agent")

    t = T0
    agent = tracer.start_span("invoke_agent", start_time=t,
                              attributes={"gen_ai.operation.name": "invoke_agent"})
    ctx = trace.set_span_in_context(agent)
    chat(tracer, t, t + 100 * MS, (50, 10), ctx)
    tool(tracer, t + 100 * MS, t + 150 * MS, ctx)
    chat(tracer, t + 150 * MS, t + 300 * MS, (70, 20), ctx)
    chat(tracer, t + 150 * MS, t + 250 * MS, (71, 21), ctx)
    chat(tracer, t + 151 * MS, t + 300 * MS, (72, 22), ctx)
    chat(tracer, t + 320 * MS, t + 400 * MS, (200, 30), ctx)
    agent.end(end_time=t + 400 * MS)

    t = T0 + 2000 * MS
    agent = tracer.start_span("invoke_agent", start_time=t,
                              attributes={"gen_ai.operation.name": "invoke_agent"})
    ctx = trace.set_span_in_context(agent)
    chat(tracer, t, t + 80 * MS, (40, 8), ctx)
    tool(tracer, t + 80 * MS, t + 280 * MS, ctx)
    chat(tracer, t + 280 * MS, t + 360 * MS, (90, 12), ctx)
    agent.end(end_time=t + 360 * MS)

    doc = MessageToDict(encode_spans(exporter.get_finished_spans()))
    if hexids:
        for rs in doc["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in span:
                            span[key] = base64.b64decode(span[key]).hex()
    with open(out, "w") as f:
        json.dump(doc, f)


if __name__ == "__main__":
    main()
