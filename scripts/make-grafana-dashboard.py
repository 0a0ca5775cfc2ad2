#!/usr/bin/env python3
"""Writes deploy/grafana/tokenscope.json: a Grafana dashboard of
`tokenscope --serve-metrics`'s figures. Its bands are the chat profile's
default objectives (TTFT p99 1 s, TPOT p99 50 ms) and tokenscope's health
bands (crates/tokenscope-report/src/health.rs: green at most 80 % of a
limit, yellow up to it, red past it; failures green at 0, yellow up to 1 %).
tests/live_metrics.rs runs every query against a real Prometheus server.
The server panels (`tokenscope_server`, from tokenscope's own scrapes of the
target's /metrics) and the windows' (`tokenscope_window`, once a window
closes) have data only where those exist."""
import json
import pathlib

SEL = '{run=~"$run", model=~"$model", tag=~"$tag"}'


def panel(i, title, exprs, unit, x, y, thresholds=None):
    p = {
        "id": i, "type": "timeseries", "title": title,
        "gridPos": {"x": x, "y": y, "w": 12, "h": 8},
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "targets": [{"refId": chr(65 + k), "expr": e, "legendFormat": l}
                    for k, (e, l) in enumerate(exprs)],
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
    }
    if thresholds:
        p["fieldConfig"]["defaults"]["thresholds"] = {"mode": "absolute", "steps": thresholds}
        p["fieldConfig"]["defaults"]["custom"] = {"thresholdsStyle": {"mode": "line+area"}}
    return p


def quantile(metric, q):
    # Native histograms where Prometheus ingests them (native-histograms on:
    # it scrapes the protobuf exposition), else the classic buckets.
    return (f"histogram_quantile({q}, sum by (run) "
            f"(rate(tokenscope_{metric}_seconds{SEL}[1m]))) or "
            f"histogram_quantile({q}, sum by (le, run) "
            f"(rate(tokenscope_{metric}_seconds_bucket{SEL}[1m])))")


def server(figure):
    return f'tokenscope_server{{figure="{figure}", model=~"$model", tag=~"$tag"}}'


def bands(good_max, limit):
    return [{"color": "green", "value": None}, {"color": "yellow", "value": good_max},
            {"color": "red", "value": limit}]


def variable(name):
    return {"name": name, "label": name, "type": "query",
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "query": f"label_values(tokenscope_requests_total, {name})",
            "includeAll": True, "multi": True, "allValue": ".*",
            "current": {"text": "All", "value": "$__all"}, "refresh": 2}


def main():
    not_ok = '{outcome!="ok", run=~"$run", model=~"$model", tag=~"$tag"}'
    output = '{kind="output", run=~"$run", model=~"$model", tag=~"$tag"}'
    panels = [
        panel(1, "TTFT p50 / p99 (chat limit 1 s: green ≤ 0.8 s, yellow ≤ 1 s)",
              [(quantile("ttft", 0.5), "p50 {{run}}"), (quantile("ttft", 0.99), "p99 {{run}}")],
              "s", 0, 0, bands(0.8, 1.0)),
        panel(2, "TPOT p50 / p99 (chat limit 50 ms: green ≤ 40 ms, yellow ≤ 50 ms)",
              [(quantile("tpot", 0.5), "p50 {{run}}"), (quantile("tpot", 0.99), "p99 {{run}}")],
              "s", 12, 0, bands(0.04, 0.05)),
        panel(3, "ITL p99 and E2E p99",
              [(quantile("itl", 0.99), "ITL p99 {{run}}"), (quantile("e2e", 0.99), "E2E p99 {{run}}")],
              "s", 0, 8),
        panel(4, "Answer start p99 (reasoning models: after the thinking)",
              [(quantile("answer_start", 0.99), "p99 {{run}}")], "s", 12, 8, bands(0.8, 1.0)),
        panel(5, "Requests/s by outcome",
              [(f"sum by (outcome) (rate(tokenscope_requests_total{SEL}[1m]))", "{{outcome}}")],
              "reqps", 0, 16),
        panel(6, "Failed share (green 0, yellow ≤ 1 %, red > 1 %)",
              # `or vector(0)`: no failure yet is 0 %, not no data.
              [(f"(sum(rate(tokenscope_requests_total{not_ok}[1m])) or vector(0)) / "
                f"sum(rate(tokenscope_requests_total{SEL}[1m]))", "failed")],
              "percentunit", 12, 16,
              [{"color": "green", "value": None}, {"color": "yellow", "value": 1e-6},
               {"color": "red", "value": 0.01}]),
        panel(7, "Output tokens/s",
              [(f"sum by (run) (rate(tokenscope_tokens_total{output}[1m]))", "{{run}}")],
              "short", 0, 24),
        panel(8, "Requests in flight, and the client's send lag p99 (its own lateness)",
              [(f"sum by (run) (tokenscope_in_flight{SEL})", "in flight {{run}}"),
               (quantile("send_lag", 0.99), "send lag p99 {{run}}")],
              "short", 12, 24),
        panel(9, "Server: requests running and waiting (its own /metrics, as tokenscope scrapes them)",
              [(server("running"), "running"), (server("waiting"), "waiting")],
              "short", 0, 32),
        panel(10, "Server: KV-cache usage and speculative decoding's acceptance",
              [(server("kv_usage"), "KV cache"),
               (server("spec_decode_acceptance"), "draft tokens accepted")],
              "percentunit", 12, 32),
        panel(11, "Each window's SLO (1 met, 0 not; --slo) and the client's loop delay",
              [(f'tokenscope_window{{figure="slo_met", run=~"$run", model=~"$model", tag=~"$tag"}}',
                "SLO met {{run}}"),
               (f"tokenscope_loop_delay_seconds{SEL}", "loop delay (s) {{run}}")],
              "short", 0, 40),
    ]
    dashboard = {
        "title": "tokenscope: live load test", "uid": "tokenscope-live",
        "schemaVersion": 39, "version": 1, "editable": True,
        "description": "tokenscope --serve-metrics: a load test's or canary's own figures "
                       "(docs/observability.md).",
        "time": {"from": "now-30m", "to": "now"}, "refresh": "5s",
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus",
             "label": "Prometheus"},
            variable("run"), variable("model"), variable("tag")]},
        "panels": panels,
    }
    out = pathlib.Path(__file__).resolve().parent.parent / "deploy/grafana/tokenscope.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dashboard, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
