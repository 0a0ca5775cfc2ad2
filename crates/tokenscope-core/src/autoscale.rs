//! The load per replica an autoscaler should hold: from a sweep's SLO
//! capacity, the server's own running-request count and the request rate
//! there, less a headroom — and the same as ready-to-paste KEDA and HPA
//! settings on the server's metric.
//!
//! Past its capacity a replica queues and TTFT climbs, so an autoscaler
//! should add a replica before a replica's load reaches it: the threshold
//! is the capacity's load × (1 − headroom), read on the axis the autoscaler
//! sees — the requests in the server, running plus waiting (vLLM
//! `num_requests_running` + `num_requests_waiting`), or requests/s. Running
//! alone is not monotonic in load: once prefills queue, a busier replica
//! can show fewer running requests (and never trigger a scale-up), so the
//! queue is counted too. Between sweep points the capacity is interpolated, so the
//! threshold is given with the interval it could lie in: from the heaviest
//! load that met the SLO to the lightest that did not.

use crate::capacity::SloCapacity;
use serde::{Deserialize, Serialize};

/// One sweep point as the autoscaler sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScalePoint {
    /// The sweep's load (concurrency or requests/s).
    pub load: f64,
    /// The server's mean requests in it (running + waiting) over the point, when it said.
    pub in_server: Option<f64>,
    pub requests_per_s: f64,
}

/// A threshold and the interval it could lie in.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bounded {
    pub value: f64,
    pub low: f64,
    /// `None`: the SLO held at every point, so the capacity (and this) may be higher.
    pub high: Option<f64>,
}

/// What a sweep says an autoscaler should hold per replica.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scaling {
    /// The SLO capacity on the sweep's own load axis.
    pub capacity_load: Bounded,
    /// The share of the capacity kept free for the time a new replica takes to come up.
    pub headroom_pct: f64,
    /// Requests in the server per replica (running + waiting, as it counts
    /// them), at capacity × (1 − headroom).
    pub in_server: Option<Bounded>,
    /// Requests/s per replica there.
    pub requests_per_s: Bounded,
    /// The server kind detected, and its running and waiting gauges.
    pub server_kind: Option<String>,
    pub metric: Option<String>,
    #[serde(default)]
    pub waiting_metric: Option<String>,
    /// The rule and the data it rests on, in words.
    pub rests_on: String,
}

/// The waiting-requests (queue) gauge of each server kind.
pub fn waiting_metric(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "vllm" | "vllm-v0" | "tokenscope-sim" => "vllm:num_requests_waiting",
        "sglang" => "sglang:num_queue_reqs",
        "tgi" => "tgi_queue_size",
        "llama.cpp" => "llamacpp:requests_deferred",
        "trtllm-serve" => "trtllm_num_requests_waiting",
        "triton-trtllm" => "nv_trt_llm_request_metrics{request_type=\"waiting\"}",
        _ => return None,
    })
}

/// The running-requests gauge of each server kind (docs/engines.md §8).
pub fn running_metric(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "vllm" | "vllm-v0" | "tokenscope-sim" => "vllm:num_requests_running",
        "sglang" => "sglang:num_running_reqs",
        "tgi" => "tgi_batch_current_size",
        "llama.cpp" => "llamacpp:requests_processing",
        "triton-trtllm" => "nv_trt_llm_request_metrics{request_type=\"active\"}",
        "trtllm-serve" => "trtllm_num_requests_running",
        _ => return None,
    })
}

/// Linear interpolation of `f` over `points` (ascending load) at `load`.
fn at(points: &[ScalePoint], load: f64, f: impl Fn(&ScalePoint) -> Option<f64>) -> Option<f64> {
    let first = points.first()?;
    if load <= first.load {
        return f(first).map(|v| v * load / first.load.max(f64::MIN_POSITIVE));
    }
    for w in points.windows(2) {
        if load <= w[1].load {
            let (a, b) = (f(&w[0])?, f(&w[1])?);
            let t = (load - w[0].load) / (w[1].load - w[0].load);
            return Some(a + t * (b - a));
        }
    }
    points.last().and_then(f)
}

/// The threshold a sweep supports, or `None` when it supports none (no
/// `--slo`, or not even the lightest load met it).
pub fn threshold(
    points: &[ScalePoint],
    capacity: &SloCapacity,
    headroom: f64,
    server_kind: Option<&str>,
    in_server_from: &str,
) -> Option<Scaling> {
    let met = capacity.highest_met_load?;
    let first_failed = points.iter().map(|p| p.load).find(|&l| l > met);
    let beyond = capacity.beyond_series() || first_failed.is_none();
    let cap = match (capacity.interpolated_load, beyond) {
        (Some(c), false) => c,
        _ => met,
    };
    let keep = 1.0 - headroom;
    let bounded = |f: &dyn Fn(&ScalePoint) -> Option<f64>| -> Option<Bounded> {
        let low = at(points, met, f)? * keep;
        let high = match beyond {
            true => None,
            false => Some(at(points, first_failed?, f)? * keep),
        };
        Some(Bounded {
            value: at(points, cap, f)? * keep,
            low: high.map_or(low, |h| low.min(h)),
            high: high.map(|h| h.max(low)),
        })
    };
    let in_server = bounded(&|p| p.in_server);
    let requests_per_s = bounded(&|p| Some(p.requests_per_s))?;
    let rests_on = format!(
        "{} met up to load {met}{}; threshold = that capacity × (1 − {:.0} % headroom), read on the requests in the server (running + waiting; from {in_server_from}) and requests/s interpolated between the sweep's points{}",
        capacity.objectives,
        match (beyond, capacity.interpolated_load) {
            (true, _) => " (every point met it: the capacity, and the threshold, may be higher)".to_string(),
            (false, Some(c)) => format!(", reaching its limit near load {c:.1} (interpolated; before load {})", first_failed.unwrap_or(c)),
            (false, None) => String::new(),
        },
        headroom * 100.0,
        if in_server.is_none() { "; the server did not report its running requests, so only requests/s is given" } else { "" }
    );
    Some(Scaling {
        capacity_load: Bounded {
            value: cap,
            low: met,
            high: if beyond { None } else { first_failed },
        },
        headroom_pct: headroom * 100.0,
        in_server,
        requests_per_s,
        server_kind: server_kind.map(str::to_string),
        metric: server_kind.and_then(running_metric).map(str::to_string),
        waiting_metric: server_kind.and_then(waiting_metric).map(str::to_string),
        rests_on,
    })
}

/// The PromQL sum of the requests in the server (running + waiting) in
/// the deployment's namespace (`default`: edit it).
fn in_server_query(s: &Scaling) -> Option<String> {
    let running = in_namespace(s.metric.as_deref()?);
    Some(match s.waiting_metric.as_deref() {
        Some(w) => format!("sum({running}) + sum({})", in_namespace(w)),
        None => format!("sum({running})"),
    })
}

/// The per-replica target: the threshold, whole requests.
fn target(s: &Scaling) -> Option<f64> {
    Some(s.in_server?.value.floor().max(1.0))
}

/// A KEDA ScaledObject scaling `deployment` on the requests in the server
/// per replica, through Prometheus.
pub fn keda_yaml(s: &Scaling, deployment: &str) -> Option<String> {
    let (query, target) = (in_server_query(s)?, target(s)?);
    Some(format!(
        "# tokenscope: scale {deployment} when its replicas average more than {target} requests\n\
         # in the server (running + waiting)\n\
         # ({}).\n\
         apiVersion: keda.sh/v1alpha1\n\
         kind: ScaledObject\n\
         metadata:\n  name: {deployment}-tokenscope\n\
         spec:\n  scaleTargetRef:\n    name: {deployment}\n  minReplicaCount: 1\n  maxReplicaCount: 8\n\
         \x20 # a new replica takes minutes to load its model: scale up at once, down slowly\n\
         \x20 cooldownPeriod: 300\n  triggers:\n    - type: prometheus\n      metadata:\n\
         \x20       serverAddress: http://prometheus-operated.monitoring.svc:9090\n\
         \x20       # KEDA divides the sum over replicas by the threshold to get the replicas\n\
         \x20       query: {query}\n\
         \x20       threshold: \"{target}\"\n",
        s.rests_on.replace('\n', " "),
    ))
}

/// The name prometheus-adapter gives the requests in the server of one pod
/// (Kubernetes metric names have no colon).
fn adapter_name(s: &Scaling) -> Option<String> {
    let running = s.metric.as_deref()?.split('{').next()?;
    let prefix = running.split([':', '_']).next().unwrap_or("llm");
    Some(format!("{prefix}_requests_in_server"))
}

/// An HPA on the same signal as a per-pod custom metric, with the
/// prometheus-adapter rule that serves it.
pub fn hpa_yaml(s: &Scaling, deployment: &str) -> Option<String> {
    let (name, target) = (adapter_name(s)?, target(s)?);
    let running = s.metric.as_deref()?;
    let sum = match s.waiting_metric.as_deref() {
        Some(w) => format!("{running} + {w}"),
        None => running.to_string(),
    };
    Some(format!(
        "# tokenscope: the same threshold as an HPA on a per-pod custom metric. It needs\n\
         # prometheus-adapter to serve `{name}` (running + waiting requests), e.g.:\n\
         #   rules:\n\
         #     - seriesQuery: '{}'\n\
         #       resources: {{overrides: {{namespace: {{resource: namespace}}, pod: {{resource: pod}}}}}}\n\
         #       name: {{as: \"{name}\"}}\n\
         #       metricsQuery: 'sum({sum}) by (<<.GroupBy>>)'\n\
         apiVersion: autoscaling/v2\n\
         kind: HorizontalPodAutoscaler\n\
         metadata:\n  name: {deployment}-tokenscope\n\
         spec:\n  scaleTargetRef:\n    apiVersion: apps/v1\n    kind: Deployment\n    name: {deployment}\n\
         \x20 minReplicas: 1\n  maxReplicas: 8\n  metrics:\n    - type: Pods\n      pods:\n\
         \x20       metric:\n          name: {name}\n        target:\n          type: AverageValue\n\
         \x20         averageValue: \"{target}\"\n  behavior:\n    scaleDown:\n      stabilizationWindowSeconds: 300\n",
        running.split('{').next().unwrap_or(running)
    ))
}

/// The metric selected in the deployment's namespace (`default`: edit it).
fn in_namespace(metric: &str) -> String {
    match metric.strip_suffix('}') {
        Some(open) => format!("{open},namespace=\"default\"}}"),
        None => format!("{metric}{{namespace=\"default\"}}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capacity(met: Option<f64>, interpolated: Option<f64>) -> SloCapacity {
        SloCapacity {
            objectives: "ttft_p99 ≤ 500 ms".into(),
            highest_met_load: met,
            interpolated_load: interpolated,
            margin_pct: None,
            limiting: Some("ttft_p99".into()),
            undecided_load: None,
            undecided_reason: None,
            target_load: None,
            target_met: None,
        }
    }

    fn points() -> Vec<ScalePoint> {
        [(8.0, 7.5, 4.0), (16.0, 15.0, 7.0), (32.0, 24.0, 9.0)]
            .iter()
            .map(|&(load, in_server, rps)| ScalePoint {
                load,
                in_server: Some(in_server),
                requests_per_s: rps,
            })
            .collect()
    }

    #[test]
    fn the_threshold_is_the_interpolated_capacity_less_the_headroom() {
        let s = threshold(
            &points(),
            &capacity(Some(16.0), Some(24.0)),
            0.2,
            Some("vllm"),
            "test",
        )
        .unwrap();
        assert_eq!(s.capacity_load.value, 24.0);
        // running at load 24 = 19.5, less 20 %.
        assert!((s.in_server.unwrap().value - 15.6).abs() < 1e-9);
        assert_eq!(s.in_server.unwrap().low, 15.0 * 0.8);
        assert_eq!(s.in_server.unwrap().high, Some(24.0 * 0.8));
        assert!((s.requests_per_s.value - 8.0 * 0.8).abs() < 1e-9);
        assert_eq!(s.metric.as_deref(), Some("vllm:num_requests_running"));
    }

    #[test]
    fn a_capacity_past_the_series_is_a_lower_bound_and_none_met_gives_nothing() {
        let s = threshold(
            &points(),
            &capacity(Some(32.0), None),
            0.2,
            Some("sglang"),
            "test",
        )
        .unwrap();
        assert_eq!(s.in_server.unwrap().high, None);
        assert!(s.rests_on.contains("may be higher"));
        assert_eq!(s.metric.as_deref(), Some("sglang:num_running_reqs"));
        assert!(threshold(&points(), &capacity(None, None), 0.2, None, "test").is_none());
    }

    #[test]
    fn without_the_servers_count_only_the_rate_is_given() {
        let mut p = points();
        p.iter_mut().for_each(|p| p.in_server = None);
        let s = threshold(&p, &capacity(Some(16.0), Some(24.0)), 0.2, None, "test").unwrap();
        assert!(s.in_server.is_none() && s.metric.is_none());
        assert!(keda_yaml(&s, "llm").is_none());
        assert!(s.rests_on.contains("only requests/s"));
    }

    #[test]
    fn keda_and_hpa_are_valid_yaml_on_each_servers_metrics() {
        use yaml_rust2::YamlLoader;
        for (kind, running, waiting, name) in [
            (
                "vllm",
                "vllm:num_requests_running",
                "vllm:num_requests_waiting",
                "vllm_requests_in_server",
            ),
            (
                "sglang",
                "sglang:num_running_reqs",
                "sglang:num_queue_reqs",
                "sglang_requests_in_server",
            ),
            (
                "tokenscope-sim",
                "vllm:num_requests_running",
                "vllm:num_requests_waiting",
                "vllm_requests_in_server",
            ),
            (
                "llama.cpp",
                "llamacpp:requests_processing",
                "llamacpp:requests_deferred",
                "llamacpp_requests_in_server",
            ),
            (
                "triton-trtllm",
                "nv_trt_llm_request_metrics{",
                "request_type=\"waiting\"",
                "nv_requests_in_server",
            ),
        ] {
            let s = threshold(
                &points(),
                &capacity(Some(16.0), Some(24.0)),
                0.2,
                Some(kind),
                "test",
            )
            .unwrap();
            let keda = &YamlLoader::load_from_str(&keda_yaml(&s, "llm").unwrap()).unwrap()[0];
            assert_eq!(keda["kind"].as_str(), Some("ScaledObject"));
            let trigger = &keda["spec"]["triggers"][0];
            assert_eq!(trigger["type"].as_str(), Some("prometheus"));
            let query = trigger["metadata"]["query"].as_str().unwrap();
            assert!(
                query.starts_with(&format!("sum({running}")) && query.contains(waiting),
                "{query}"
            );
            assert_eq!(query.matches("namespace=\"default\"").count(), 2, "{query}");
            assert_eq!(query.matches('{').count(), 2, "one label set each: {query}");
            // 15.6 requests in the server: the threshold is its floor.
            assert_eq!(trigger["metadata"]["threshold"].as_str(), Some("15"));
            let hpa = &YamlLoader::load_from_str(&hpa_yaml(&s, "llm").unwrap()).unwrap()[0];
            assert_eq!(hpa["apiVersion"].as_str(), Some("autoscaling/v2"));
            let m = &hpa["spec"]["metrics"][0]["pods"];
            assert_eq!(m["metric"]["name"].as_str(), Some(name));
            assert_eq!(m["target"]["averageValue"].as_str(), Some("15"));
        }
    }
}
