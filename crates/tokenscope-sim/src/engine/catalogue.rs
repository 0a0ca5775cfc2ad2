//! GPUs and models the engine knows, from `docs/engines.md`
//! §5 (dense datasheet peaks) and §5b (Hugging Face `config.json`), plus
//! user-supplied ones from a JSON file (`--catalogue FILE`).

use serde::{Deserialize, Serialize};

/// One accelerator, peak datasheet values (dense, no sparsity).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gpu {
    pub name: String,
    /// Usable memory, GiB.
    pub memory_gib: f64,
    /// Peak memory bandwidth, GB/s.
    pub bandwidth_gbs: f64,
    /// Dense BF16/FP16 tensor TFLOPS.
    pub bf16_tflops: f64,
    /// Dense FP8 TFLOPS (`None`: no FP8 tensor cores; FP8 weights run at BF16 speed).
    pub fp8_tflops: Option<f64>,
    /// GPU-to-GPU bandwidth for tensor-parallel all-reduce, GB/s (one direction).
    pub link_gbs: f64,
    pub tdp_w: f64,
}

/// A link this fast or faster is a GPU fabric (NVLink, Infinity Fabric);
/// slower ones are PCIe.
const FABRIC_GBS: f64 = 100.0;

impl Gpu {
    /// One hop of a ring collective: ~3 µs GPU to GPU over NVLink or
    /// Infinity Fabric, ~8 µs over PCIe through the host bridge (NCCL's
    /// small-message latencies; assumptions to calibrate, docs/simulator.md).
    pub fn hop_latency_s(&self) -> f64 {
        if self.link_gbs >= FABRIC_GBS {
            3e-6
        } else {
            8e-6
        }
    }
}

/// One model's architecture.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Model {
    pub name: String,
    pub layers: u32,
    pub hidden: u32,
    pub heads: u32,
    pub kv_heads: u32,
    pub head_dim: u32,
    pub vocab: u32,
    /// Total parameters, billions (weights in memory).
    pub params_b: f64,
    /// Parameters used per token, billions (MoE: the active ones).
    pub active_params_b: f64,
    pub max_context: u32,
    /// MLA (DeepSeek): KV cache holds `kv_lora_rank + rope_dim` per layer per token.
    pub mla: Option<Mla>,
    /// A vision-language model: its vision encoder (`crate::vision::ENCODERS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vision: Option<String>,
    /// A speech model: its audio encoder (`crate::speech::AUDIO_ENCODERS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Mla {
    pub kv_lora_rank: u32,
    pub rope_dim: u32,
}

impl Model {
    /// KV-cache elements per token (all layers), before dividing by TP.
    pub fn kv_elements_per_token(&self, tp: u32) -> f64 {
        match self.mla {
            Some(m) => self.layers as f64 * (m.kv_lora_rank + m.rope_dim) as f64,
            None => {
                let kv_heads = (self.kv_heads as f64 / tp as f64).max(1.0);
                2.0 * self.layers as f64 * kv_heads * self.head_dim as f64
            }
        }
    }

    /// Query width used by attention FLOPs (`H × d`, or the MLA latent).
    pub fn attention_width(&self) -> f64 {
        match self.mla {
            Some(m) => self.heads as f64 * (m.kv_lora_rank + m.rope_dim) as f64,
            None => self.heads as f64 * self.head_dim as f64,
        }
    }
}

fn gpu(
    name: &str,
    memory_gib: f64,
    bw: f64,
    bf16: f64,
    fp8: Option<f64>,
    link: f64,
    tdp: f64,
) -> Gpu {
    Gpu {
        name: name.into(),
        memory_gib,
        bandwidth_gbs: bw,
        bf16_tflops: bf16,
        fp8_tflops: fp8,
        link_gbs: link,
        tdp_w: tdp,
    }
}

/// The built-in GPUs. Usable memory is nominal GB expressed in GiB less ~0.5 %.
pub fn gpus() -> Vec<Gpu> {
    vec![
        gpu("a10g", 22.0, 600.0, 70.0, None, 32.0, 300.0),
        gpu("l4", 22.0, 300.0, 121.0, Some(242.5), 32.0, 72.0),
        gpu("l40s", 44.4, 864.0, 362.0, Some(733.0), 32.0, 350.0),
        gpu("a100-40gb", 39.4, 1555.0, 312.0, None, 300.0, 400.0),
        gpu("a100-80gb", 79.2, 2039.0, 312.0, None, 300.0, 400.0),
        gpu("h100-sxm", 79.6, 3350.0, 989.0, Some(1979.0), 450.0, 700.0),
        gpu("h100-pcie", 79.6, 2000.0, 756.0, Some(1513.0), 64.0, 350.0),
        gpu("h200", 131.0, 4800.0, 989.0, Some(1979.0), 450.0, 700.0),
        gpu("b200", 178.0, 8000.0, 2250.0, Some(4500.0), 900.0, 1000.0),
        gpu("mi300x", 191.0, 5300.0, 1307.0, Some(2615.0), 448.0, 750.0),
        gpu("rtx-4090", 23.6, 1008.0, 165.0, Some(330.0), 32.0, 450.0),
    ]
}

#[allow(clippy::too_many_arguments)]
fn model(
    name: &str,
    layers: u32,
    hidden: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    vocab: u32,
    params_b: f64,
    active_params_b: f64,
    max_context: u32,
) -> Model {
    Model {
        name: name.into(),
        layers,
        hidden,
        heads,
        kv_heads,
        head_dim,
        vocab,
        params_b,
        active_params_b,
        max_context,
        mla: None,
        vision: None,
        audio: None,
    }
}

/// The built-in models (docs/engines.md §5b).
pub fn models() -> Vec<Model> {
    let mut deepseek = model(
        "deepseek-v3",
        61,
        7168,
        128,
        128,
        128,
        129280,
        671.0,
        37.0,
        131072,
    );
    deepseek.mla = Some(Mla {
        kv_lora_rank: 512,
        rope_dim: 64,
    });
    vec![
        model(
            "llama-3.1-8b",
            32,
            4096,
            32,
            8,
            128,
            128256,
            8.03,
            8.03,
            131072,
        ),
        model(
            "llama-3.1-70b",
            80,
            8192,
            64,
            8,
            128,
            128256,
            70.6,
            70.6,
            131072,
        ),
        model(
            "llama-3.2-1b",
            16,
            2048,
            32,
            8,
            64,
            128256,
            1.24,
            1.24,
            131072,
        ),
        model(
            "llama-3.2-3b",
            28,
            3072,
            24,
            8,
            128,
            128256,
            3.21,
            3.21,
            131072,
        ),
        model("qwen2.5-7b", 28, 3584, 28, 4, 128, 152064, 7.6, 7.6, 32768),
        // Qwen2.5-VL-7B: Qwen2.5-7B's decoder behind a 675M ViT (the
        // Qwen2.5-VL technical report); weights counted with the encoder.
        Model {
            vision: Some("qwen2.5-vl".into()),
            ..model(
                "qwen2.5-vl-7b",
                28,
                3584,
                28,
                4,
                128,
                152064,
                8.3,
                7.6,
                128000,
            )
        },
        // Whisper large-v3: the decoder's 32 layers of width 1280, 20 heads
        // of 64, 51,866 tokens, 448 positions (openai/whisper-large-v3
        // config.json); 1.55B weights with the encoder, 0.91B of them the
        // decoder's, used per token. The encoder is charged apart
        // (`crate::speech::AUDIO_ENCODERS`).
        Model {
            audio: Some("whisper-large-v3".into()),
            ..model(
                "whisper-large-v3",
                32,
                1280,
                20,
                20,
                64,
                51866,
                1.55,
                0.91,
                448,
            )
        },
        // Llama-3.2-11B-Vision: Llama-3.1-8B's 32 layers and 8 cross-attention
        // layers (40 in all) behind an 850M ViT-H/14 (Llama 3 paper §7.2).
        Model {
            vision: Some("llama-3.2-vision".into()),
            ..model(
                "llama-3.2-11b-vision",
                40,
                4096,
                32,
                8,
                128,
                128256,
                10.6,
                9.8,
                131072,
            )
        },
        model(
            "qwen2.5-72b",
            80,
            8192,
            64,
            8,
            128,
            152064,
            72.7,
            72.7,
            32768,
        ),
        model("mistral-7b", 32, 4096, 32, 8, 128, 32768, 7.25, 7.25, 32768),
        model(
            "mixtral-8x7b",
            32,
            4096,
            32,
            8,
            128,
            32000,
            46.7,
            12.9,
            32768,
        ),
        model("gemma-2-9b", 42, 3584, 16, 8, 256, 256000, 9.24, 9.24, 8192),
        deepseek,
    ]
}

/// User-supplied entries: `{"gpus": [...], "models": [...]}` with the fields above.
#[derive(Debug, Default, Deserialize)]
pub struct CatalogueFile {
    #[serde(default)]
    pub gpus: Vec<Gpu>,
    #[serde(default)]
    pub models: Vec<Model>,
}

/// The built-in catalogue with a user file's entries added (same name: the file wins).
#[derive(Debug, Clone)]
pub struct Catalogue {
    pub gpus: Vec<Gpu>,
    pub models: Vec<Model>,
}

#[derive(Debug, thiserror::Error)]
pub enum CatalogueError {
    #[error("cannot read {path}: {reason}")]
    File { path: String, reason: String },
    #[error("unknown {kind} `{name}`; known: {known}")]
    Unknown {
        kind: &'static str,
        name: String,
        known: String,
    },
}

fn normalise(name: &str) -> String {
    name.to_ascii_lowercase().replace(['_', ' '], "-")
}

impl Catalogue {
    pub fn builtin() -> Catalogue {
        Catalogue {
            gpus: gpus(),
            models: models(),
        }
    }

    pub fn with_file(path: &std::path::Path) -> Result<Catalogue, CatalogueError> {
        let err = |reason: String| CatalogueError::File {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        let file: CatalogueFile = serde_json::from_str(&text).map_err(|e| err(e.to_string()))?;
        let mut cat = Catalogue::builtin();
        for g in file.gpus {
            cat.gpus
                .retain(|x| normalise(&x.name) != normalise(&g.name));
            cat.gpus.push(g);
        }
        for m in file.models {
            cat.models
                .retain(|x| normalise(&x.name) != normalise(&m.name));
            cat.models.push(m);
        }
        Ok(cat)
    }

    pub fn gpu(&self, name: &str) -> Result<Gpu, CatalogueError> {
        let n = normalise(name);
        self.gpus
            .iter()
            .find(|g| normalise(&g.name) == n)
            .cloned()
            .ok_or_else(|| CatalogueError::Unknown {
                kind: "GPU",
                name: name.into(),
                known: self
                    .gpus
                    .iter()
                    .map(|g| g.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    pub fn model(&self, name: &str) -> Result<Model, CatalogueError> {
        let n = normalise(name);
        self.models
            .iter()
            .find(|m| normalise(&m.name) == n)
            .cloned()
            .ok_or_else(|| CatalogueError::Unknown {
                kind: "model",
                name: name.into(),
                known: self
                    .models
                    .iter()
                    .map(|m| m.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_bytes_per_token_match_the_reference_table() {
        let cat = Catalogue::builtin();
        let bf16 = |name: &str| cat.model(name).unwrap().kv_elements_per_token(1) * 2.0;
        assert_eq!(bf16("llama-3.1-8b"), 131_072.0);
        assert_eq!(bf16("llama-3.1-70b"), 327_680.0);
        assert_eq!(bf16("Llama-3.2-1B"), 32_768.0);
        assert_eq!(bf16("qwen2.5-7b"), 57_344.0);
        assert_eq!(bf16("gemma-2-9b"), 344_064.0);
        assert_eq!(bf16("deepseek-v3"), 70_272.0);
        // Tensor parallelism splits KV heads, never below one per GPU.
        assert_eq!(
            cat.model("llama-3.1-8b").unwrap().kv_elements_per_token(8) * 2.0,
            16_384.0
        );
        assert_eq!(
            cat.model("llama-3.1-8b").unwrap().kv_elements_per_token(16) * 2.0,
            16_384.0
        );
    }

    #[test]
    fn unknown_names_list_the_known_ones() {
        let err = Catalogue::builtin().gpu("tpu-v5").unwrap_err().to_string();
        assert!(err.contains("tpu-v5") && err.contains("h100-sxm"), "{err}");
    }
}
