//! Every server kind, from `/metrics` texts written to each server's documented
//! format (docs/engines.md §8), detected and mapped.

use tokenscope_telemetry::kinds::{concepts, detect, ServerKind};
use tokenscope_telemetry::prometheus::parse;

fn read(text: &str) -> (ServerKind, tokenscope_telemetry::kinds::Concepts) {
    let e = parse(text).expect("fixture parses");
    let kind = detect(&e);
    (kind, concepts(kind, &e))
}

const VLLM_V1: &str = r#"# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 12.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.42
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0
vllm:num_preemptions_created{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.7e9
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1000.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 5000.0
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 250.0
# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_bucket{engine="0",le="0.3",model_name="m"} 8.0
vllm:request_queue_time_seconds_bucket{engine="0",le="0.5",model_name="m"} 10.0
vllm:request_queue_time_seconds_bucket{engine="0",le="+Inf",model_name="m"} 10.0
vllm:request_queue_time_seconds_count{engine="0",model_name="m"} 10.0
vllm:request_queue_time_seconds_sum{engine="0",model_name="m"} 1.5
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{engine="0",le="1.0",model_name="m"} 2.0
vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="m"} 9.0
vllm:iteration_tokens_total_count{engine="0",model_name="m"} 9.0
vllm:iteration_tokens_total_sum{engine="0",model_name="m"} 100.0
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",gpu_memory_utilization="0.9",num_gpu_blocks="27000"} 1.0
"#;

#[test]
fn vllm_v1_with_total_counters_and_cache_config() {
    let (kind, c) = read(VLLM_V1);
    assert_eq!(kind, ServerKind::Vllm);
    assert_eq!(
        (c.running, c.waiting, c.kv_usage),
        (Some(12.0), Some(3.0), Some(0.42))
    );
    assert_eq!(
        c.preemptions,
        Some(7.0),
        "_created samples are not the counter"
    );
    assert_eq!(
        (c.prompt_tokens, c.generation_tokens),
        (Some(1000.0), Some(5000.0))
    );
    assert_eq!(
        (c.prefix_hits, c.prefix_queries),
        (Some(250.0), Some(1000.0))
    );
    assert_eq!(c.kv_capacity_tokens, Some(27000.0 * 16.0));
    let q = c.queue_time.unwrap();
    assert_eq!((q.count, q.sum, q.buckets.len()), (10.0, 1.5, 3));
    assert!(c.ttft.is_none(), "not exposed here: None");
}

#[test]
fn vllm_renamed_kv_usage_and_v0_names() {
    let v0 = "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{model_name=\"m\"} 0.9\n\
              vllm:num_requests_running{model_name=\"m\"} 2\nvllm:num_requests_waiting{model_name=\"m\"} 1\n\
              vllm:time_per_output_token_seconds_bucket{model_name=\"m\",le=\"0.05\"} 4\n\
              vllm:time_per_output_token_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 5\n\
              vllm:time_per_output_token_seconds_sum{model_name=\"m\"} 0.3\n\
              vllm:time_per_output_token_seconds_count{model_name=\"m\"} 5\n";
    let (kind, c) = read(v0);
    assert_eq!(kind, ServerKind::VllmV0);
    assert_eq!(c.kv_usage, Some(0.9));
    assert_eq!(c.itl.unwrap().count, 5.0, "the pre-0.11 ITL name is read");
    // A 0.9/0.10 server exposing both names: the new one wins, still vLLM V1.
    let both = "vllm:kv_cache_usage_perc{model_name=\"m\"} 0.5\nvllm:gpu_cache_usage_perc{model_name=\"m\"} 0.5\n";
    let (kind, c) = read(both);
    assert_eq!(kind, ServerKind::Vllm);
    assert_eq!(c.kv_usage, Some(0.5));
}

#[test]
fn sglang() {
    let text = "sglang:num_running_reqs{model_name=\"m\"} 5\nsglang:num_queue_reqs{model_name=\"m\"} 2\n\
                sglang:token_usage{model_name=\"m\"} 0.75\nsglang:max_total_num_tokens{model_name=\"m\"} 500000\n\
                sglang:num_retracted_requests_total{model_name=\"m\"} 3\nsglang:cached_tokens_total{model_name=\"m\"} 40\n\
                sglang:prompt_tokens_total{model_name=\"m\"} 100\nsglang:generation_tokens_total{model_name=\"m\"} 900\n\
                sglang:queue_time_seconds_bucket{le=\"0.1\"} 1\nsglang:queue_time_seconds_bucket{le=\"+Inf\"} 2\n\
                sglang:queue_time_seconds_sum 0.5\nsglang:queue_time_seconds_count 2\n";
    let (kind, c) = read(text);
    assert_eq!(kind, ServerKind::Sglang);
    assert_eq!(
        (c.running, c.waiting, c.kv_usage, c.kv_capacity_tokens),
        (Some(5.0), Some(2.0), Some(0.75), Some(500000.0))
    );
    assert_eq!((c.preemptions, c.prefix_hits), (Some(3.0), Some(40.0)));
    assert_eq!(c.queue_time.unwrap().count, 2.0);
}

#[test]
fn tgi_without_total_suffixes() {
    let text = "tgi_queue_size 4\ntgi_batch_current_size 8\ntgi_batch_max_total_tokens 100000\n\
                tgi_request_queue_duration_bucket{le=\"0.1\"} 3\ntgi_request_queue_duration_bucket{le=\"+Inf\"} 4\n\
                tgi_request_queue_duration_sum 0.6\ntgi_request_queue_duration_count 4\n\
                tgi_request_generated_tokens_sum 1234\ntgi_request_success 4\n";
    let (kind, c) = read(text);
    assert_eq!(kind, ServerKind::Tgi);
    assert_eq!(
        (c.running, c.waiting, c.kv_capacity_tokens),
        (Some(8.0), Some(4.0), Some(100000.0))
    );
    assert_eq!(c.generation_tokens, Some(1234.0));
    assert!(
        c.kv_usage.is_none() && c.preemptions.is_none(),
        "TGI exposes neither"
    );
}

/// Hugging Face text-embeddings-inference, as its `metrics` exporter writes
/// it (histograms named without a unit suffix).
#[test]
fn tei_the_embeddings_and_rerank_server() {
    let text = "# TYPE te_queue_size gauge\nte_queue_size 3\n# TYPE te_request_count counter\nte_request_count{method=\"single\"} 10\n\
                # TYPE te_request_input_length histogram\nte_request_input_length_bucket{le=\"512\"} 10\nte_request_input_length_bucket{le=\"+Inf\"} 10\n\
                te_request_input_length_sum 2560\nte_request_input_length_count 10\n\
                # TYPE te_request_duration histogram\nte_request_duration_bucket{le=\"0.05\"} 9\nte_request_duration_bucket{le=\"+Inf\"} 10\n\
                te_request_duration_sum 0.31\nte_request_duration_count 10\n\
                # TYPE te_request_queue_duration histogram\nte_request_queue_duration_bucket{le=\"+Inf\"} 10\n\
                te_request_queue_duration_sum 0.02\nte_request_queue_duration_count 10\n\
                # TYPE te_request_inference_duration histogram\nte_request_inference_duration_bucket{le=\"+Inf\"} 10\n\
                te_request_inference_duration_sum 0.25\nte_request_inference_duration_count 10\n";
    let (kind, c) = read(text);
    assert_eq!(kind, ServerKind::Tei);
    assert_eq!((c.waiting, c.prompt_tokens), (Some(3.0), Some(2560.0)));
    assert_eq!(c.e2e.unwrap().count, 10.0);
    assert!((c.prefill_time.unwrap().sum - 0.25).abs() < 1e-12);
    assert_eq!(c.queue_time.unwrap().count, 10.0);
    assert!(
        c.generation_tokens.is_none(),
        "a pooling server generates nothing"
    );
}

#[test]
fn llama_cpp_as_this_build_writes_it() {
    let text = "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n# TYPE llamacpp:prompt_tokens_total counter\n\
                llamacpp:prompt_tokens_total 1200\n# TYPE llamacpp:prompt_tokens_cached_total counter\nllamacpp:prompt_tokens_cached_total 300\n\
                # TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total 4000\n\
                # TYPE llamacpp:n_tokens_max counter\nllamacpp:n_tokens_max 812\n\
                # TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 4\n\
                # TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred 2\n";
    let (kind, c) = read(text);
    assert_eq!(kind, ServerKind::LlamaCpp);
    assert_eq!((c.running, c.waiting), (Some(4.0), Some(2.0)));
    assert_eq!(c.generation_tokens, Some(4000.0));
    assert_eq!(
        (c.prefix_hits, c.prefix_queries),
        (Some(300.0), Some(1500.0))
    );
    assert!(c.kv_usage.is_none() && c.queue_time.is_none());
}

#[test]
fn triton_with_trtllm_backend() {
    let text = "nv_trt_llm_request_metrics{model=\"tensorrt_llm\",request_type=\"active\",version=\"1\"} 6\n\
                nv_trt_llm_request_metrics{model=\"tensorrt_llm\",request_type=\"waiting\",version=\"1\"} 1\n\
                nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"fraction\",model=\"tensorrt_llm\",version=\"1\"} 0.3\n\
                nv_gpu_utilization{gpu_uuid=\"GPU-1\"} 0.97\nnv_gpu_power_usage{gpu_uuid=\"GPU-1\"} 512.5\n";
    let (kind, c) = read(text);
    assert_eq!(kind, ServerKind::TritonTrtllm);
    assert_eq!(
        (c.running, c.waiting, c.kv_usage),
        (Some(6.0), Some(1.0), Some(0.3))
    );
    assert_eq!(c.gpu_util_time_pct, Some(97.0));
    assert_eq!(c.gpu_power_w, Some(512.5));
}

#[test]
fn trtllm_serve() {
    let text = "trtllm_num_requests_running{model_name=\"m\",engine_type=\"trtllm\"} 3\n\
                trtllm_num_requests_waiting{model_name=\"m\",engine_type=\"trtllm\"} 0\n\
                trtllm_kv_cache_utilization{model_name=\"m\",engine_type=\"trtllm\"} 0.2\n\
                trtllm_time_to_first_token_seconds_bucket{le=\"0.1\",model_name=\"m\",engine_type=\"trtllm\"} 2\n\
                trtllm_time_to_first_token_seconds_bucket{le=\"+Inf\",model_name=\"m\",engine_type=\"trtllm\"} 2\n\
                trtllm_time_to_first_token_seconds_sum{model_name=\"m\",engine_type=\"trtllm\"} 0.1\n\
                trtllm_time_to_first_token_seconds_count{model_name=\"m\",engine_type=\"trtllm\"} 2\n";
    let (kind, c) = read(text);
    assert_eq!(kind, ServerKind::TrtllmServe);
    assert_eq!((c.running, c.kv_usage), (Some(3.0), Some(0.2)));
    assert_eq!(c.ttft.unwrap().count, 2.0);
}

#[test]
fn dcgm_exporter_units() {
    let text = "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-a\",modelName=\"NVIDIA H100 80GB HBM3\"} 100\n\
                DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"GPU-b\",modelName=\"NVIDIA H100 80GB HBM3\"} 50\n\
                DCGM_FI_DEV_FB_USED{gpu=\"0\"} 70000\nDCGM_FI_DEV_FB_FREE{gpu=\"0\"} 10000\nDCGM_FI_DEV_FB_RESERVED{gpu=\"0\"} 500\n\
                DCGM_FI_DEV_POWER_USAGE{gpu=\"0\"} 650.5\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu=\"0\"} 5000000\n\
                DCGM_FI_PROF_SM_ACTIVE{gpu=\"0\"} 0.4\n";
    let (kind, c) = read(text);
    assert_eq!(kind, ServerKind::Dcgm);
    assert_eq!(c.gpu_util_time_pct, Some(75.0), "mean over GPUs");
    assert_eq!(
        c.gpu_memory_used_bytes,
        Some(70000.0 * 1024.0 * 1024.0),
        "MiB → bytes"
    );
    assert_eq!(c.gpu_memory_total_bytes, Some(80500.0 * 1024.0 * 1024.0));
    assert_eq!(c.gpu_energy_j, Some(5000.0), "mJ → J");
    assert_eq!(c.gpu_sm_active, Some(0.4));
    assert!(c.running.is_none());
}

#[test]
fn tokenscope_sim_is_told_apart_from_vllm() {
    let text =
        format!("tokenscope:engine_info{{model=\"llama-3.1-8b\",gpu=\"h100-sxm\"}} 1\n{VLLM_V1}");
    let (kind, c) = read(&text);
    assert_eq!(kind, ServerKind::TokenscopeSim);
    assert_eq!(c.running, Some(12.0), "read with vLLM's names");
}
