//! Model configuration: read from a Hugging Face / MLX `config.json` (plus
//! `generation_config.json`) or derived from GGUF metadata.
//!
//! Field names follow `config.json` so a folder loads without translation;
//! GGUF keys (`llama.block_count`, ...) are mapped onto the same struct.

use std::{collections::BTreeMap, path::Path};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{
    error::{ModelError, Result},
    gguf::GgufMetadata,
};

/// Architectures this crate can run, by `model_type`.
pub const SUPPORTED_ARCHITECTURES: &[&str] = &[
    "llama",
    "qwen2",
    "qwen3",
    "qwen3_moe",
    "qwen3_5",
    "qwen3_5_moe",
];

/// Quantization parameters of one layer (MLX affine quantization).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuantParams {
    pub group_size: i32,
    pub bits: i32,
}

/// The `quantization` section of an MLX config: a default plus per-layer
/// overrides keyed by module path (`model.layers.0.mlp.gate_proj`).
/// A per-layer value of `false` means "not quantized".
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QuantConfig {
    pub default: Option<QuantParams>,
    pub overrides: BTreeMap<String, Option<QuantParams>>,
}

impl QuantConfig {
    fn from_json(value: &Value) -> Option<Self> {
        let map = value.as_object()?;
        let default = match (map.get("group_size"), map.get("bits")) {
            (Some(g), Some(b)) => Some(QuantParams {
                group_size: g.as_i64()? as i32,
                bits: b.as_i64()? as i32,
            }),
            _ => None,
        };
        let mut overrides = BTreeMap::new();
        for (key, v) in map {
            match v {
                Value::Object(o) => {
                    let (Some(g), Some(b)) = (o.get("group_size"), o.get("bits")) else {
                        continue;
                    };
                    let (Some(g), Some(b)) = (g.as_i64(), b.as_i64()) else {
                        continue;
                    };
                    overrides.insert(
                        key.clone(),
                        Some(QuantParams {
                            group_size: g as i32,
                            bits: b as i32,
                        }),
                    );
                }
                Value::Bool(false) => {
                    overrides.insert(key.clone(), None);
                }
                _ => {}
            }
        }
        Some(QuantConfig { default, overrides })
    }

    /// Quantization of the module at `path`, if the config says anything.
    pub fn for_module(&self, path: &str) -> Option<QuantParams> {
        match self.overrides.get(path) {
            Some(p) => *p,
            None => self.default,
        }
    }

    pub fn to_json(&self) -> Value {
        let mut map = serde_json::Map::new();
        if let Some(d) = self.default {
            map.insert("group_size".into(), d.group_size.into());
            map.insert("bits".into(), d.bits.into());
        }
        for (k, v) in &self.overrides {
            let value = match v {
                Some(p) => serde_json::json!({"group_size": p.group_size, "bits": p.bits}),
                None => Value::Bool(false),
            };
            map.insert(k.clone(), value);
        }
        Value::Object(map)
    }
}

/// RoPE frequency scaling variants we implement.
#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    /// Positions divided by `factor`.
    Linear { factor: f32 },
    /// Llama 3.x frequency-dependent scaling.
    Llama3 {
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_max_position_embeddings: f32,
    },
}

/// Qwen3.5 (`qwen3_5`, `qwen3_5_moe`): which layers are Gated DeltaNet
/// (linear attention) and their dimensions. The sparse MoE block of
/// `qwen3_5_moe` is read by [`crate::moe::MoeConfig`].
#[derive(Debug, Clone, PartialEq)]
pub struct HybridConfig {
    /// One entry per layer: true for full (softmax) attention.
    pub full_attention: Vec<bool>,
    pub linear_num_key_heads: usize,
    pub linear_num_value_heads: usize,
    pub linear_key_head_dim: usize,
    pub linear_value_head_dim: usize,
    pub linear_conv_kernel_dim: usize,
    /// Share of `head_dim` that full attention rotates (0.25).
    pub partial_rotary_factor: f32,
}

impl HybridConfig {
    fn from_json(obj: &serde_json::Map<String, Value>, layers: usize, path: &Path) -> Result<Self> {
        let num = |k: &str, default: usize| -> usize {
            obj.get(k)
                .and_then(Value::as_u64)
                .map_or(default, |v| v as usize)
        };
        let full_attention = match obj.get("layer_types").and_then(Value::as_array) {
            Some(types) => {
                let types: Vec<bool> = types
                    .iter()
                    .map(|t| t.as_str() == Some("full_attention"))
                    .collect();
                if types.len() != layers {
                    return Err(ModelError::config(
                        path,
                        format!(
                            "`layer_types` has {} entries for {layers} layers",
                            types.len()
                        ),
                    ));
                }
                types
            }
            None => {
                let interval = num("full_attention_interval", 4).max(1);
                (0..layers).map(|i| (i + 1) % interval == 0).collect()
            }
        };
        let rope = obj
            .get("rope_parameters")
            .or_else(|| obj.get("rope_scaling"));
        let partial_rotary_factor = obj
            .get("partial_rotary_factor")
            .or_else(|| rope.and_then(|r| r.get("partial_rotary_factor")))
            .and_then(Value::as_f64)
            .unwrap_or(0.25) as f32;
        let config = HybridConfig {
            full_attention,
            linear_num_key_heads: num("linear_num_key_heads", 16),
            linear_num_value_heads: num("linear_num_value_heads", 32),
            linear_key_head_dim: num("linear_key_head_dim", 128),
            linear_value_head_dim: num("linear_value_head_dim", 128),
            linear_conv_kernel_dim: num("linear_conv_kernel_dim", 4),
            partial_rotary_factor,
        };
        let bad = |m: &str| Err(ModelError::config(path, m.to_string()));
        if config.linear_num_key_heads == 0
            || !config
                .linear_num_value_heads
                .is_multiple_of(config.linear_num_key_heads)
        {
            return bad("linear_num_value_heads must be a multiple of linear_num_key_heads");
        }
        if config.linear_conv_kernel_dim < 2 {
            return bad("linear_conv_kernel_dim must be at least 2");
        }
        Ok(config)
    }

    /// Number of full-attention layers (the only ones with a KV cache).
    pub fn attention_layers(&self) -> usize {
        self.full_attention.iter().filter(|&&f| f).count()
    }

    /// Channels of the depthwise convolution: queries, keys and values.
    pub fn conv_dim(&self) -> usize {
        2 * self.linear_num_key_heads * self.linear_key_head_dim
            + self.linear_num_value_heads * self.linear_value_head_dim
    }

    /// Bytes of one sequence's recurrent state over all linear layers: the
    /// conv window (`kernel - 1` positions, at `bytes_per_element`) and the
    /// f32 delta-rule state (`value_heads x key_dim x value_dim`).
    pub fn state_bytes_per_sequence(&self, bytes_per_element: usize) -> usize {
        let linear = self.full_attention.len() - self.attention_layers();
        let conv = (self.linear_conv_kernel_dim - 1) * self.conv_dim() * bytes_per_element;
        let ssm =
            self.linear_num_value_heads * self.linear_key_head_dim * self.linear_value_head_dim * 4;
        linear * (conv + ssm)
    }
}

/// Everything needed to build and run a dense decoder-only transformer.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub model_type: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f32,
    pub rope_theta: f32,
    pub rope_traditional: bool,
    pub rope_scaling: Option<RopeScaling>,
    pub max_position_embeddings: usize,
    pub tie_word_embeddings: bool,
    pub attention_bias: bool,
    pub mlp_bias: bool,
    /// Query/key RMSNorm per head (Qwen3).
    pub qk_norm: bool,
    /// Qwen3.5's hybrid layout (Gated DeltaNet layers, sparse MoE); `None`
    /// for plain decoders.
    pub hybrid: Option<HybridConfig>,
    pub quantization: Option<QuantConfig>,
    /// End-of-sequence ids from config.json and generation_config.json.
    pub eos_token_ids: Vec<u32>,
    pub bos_token_id: Option<u32>,
    /// Default sampling settings from generation_config.json, if any.
    pub generation_defaults: GenerationDefaults,
    /// The raw config.json, kept so conversion can write it back faithfully.
    pub raw: Value,
}

/// Sampling defaults a model ships in `generation_config.json`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenerationDefaults {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<usize>,
    pub repetition_penalty: Option<f32>,
}

fn ids_from(value: Option<&Value>) -> Vec<u32> {
    match value {
        Some(Value::Number(n)) => n.as_u64().map(|v| vec![v as u32]).unwrap_or_default(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|v| v.as_u64().map(|v| v as u32))
            .collect(),
        _ => Vec::new(),
    }
}

impl ModelConfig {
    /// Reads `config.json` (and `generation_config.json` if present) in `dir`.
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|e| ModelError::io(&path, e))?;
        let raw: Value = serde_json::from_str(&text)
            .map_err(|e| ModelError::config(&path, format!("not valid JSON: {e}")))?;
        let mut config = Self::from_json(&raw, &path)?;

        let gen_path = dir.join("generation_config.json");
        if let Ok(text) = std::fs::read_to_string(&gen_path) {
            let gen: Value = serde_json::from_str(&text)
                .map_err(|e| ModelError::config(&gen_path, format!("not valid JSON: {e}")))?;
            for id in ids_from(gen.get("eos_token_id")) {
                if !config.eos_token_ids.contains(&id) {
                    config.eos_token_ids.push(id);
                }
            }
            let f = |k: &str| gen.get(k).and_then(Value::as_f64).map(|v| v as f32);
            config.generation_defaults = GenerationDefaults {
                temperature: f("temperature"),
                top_p: f("top_p"),
                top_k: gen.get("top_k").and_then(Value::as_u64).map(|v| v as usize),
                repetition_penalty: f("repetition_penalty"),
            };
        }
        Ok(config)
    }

    /// Builds a config from parsed `config.json`; `path` is used in errors.
    pub fn from_json(raw: &Value, path: &Path) -> Result<Self> {
        let obj = raw
            .as_object()
            .ok_or_else(|| ModelError::config(path, "top level is not an object"))?;
        // Multimodal checkpoints nest the language model's config.
        let obj = match obj.get("text_config").and_then(Value::as_object) {
            Some(text) if !obj.contains_key("hidden_size") => text,
            _ => obj,
        };
        // Qwen3.5's nested text config says `qwen3_5_text` / `qwen3_5_moe_text`.
        let model_type = obj
            .get("model_type")
            .and_then(Value::as_str)
            .ok_or_else(|| ModelError::config(path, "missing `model_type`"))?;
        let model_type = model_type
            .strip_suffix("_text")
            .unwrap_or(model_type)
            .to_string();
        if !SUPPORTED_ARCHITECTURES.contains(&model_type.as_str()) {
            return Err(ModelError::UnknownArchitecture {
                path: path.into(),
                arch: model_type,
                supported: SUPPORTED_ARCHITECTURES.join(", "),
            });
        }
        let req = |k: &str| -> Result<usize> {
            obj.get(k)
                .and_then(Value::as_u64)
                .map(|v| v as usize)
                .filter(|&v| v > 0)
                .ok_or_else(|| ModelError::config(path, format!("missing or invalid `{k}`")))
        };
        let opt_f = |k: &str| obj.get(k).and_then(Value::as_f64).map(|v| v as f32);
        let opt_b = |k: &str| obj.get(k).and_then(Value::as_bool);

        let hidden_size = req("hidden_size")?;
        let is_hybrid = model_type.starts_with("qwen3_5");
        let hybrid = if is_hybrid {
            Some(HybridConfig::from_json(
                obj,
                req("num_hidden_layers")?,
                path,
            )?)
        } else {
            None
        };
        // Qwen3.5 keeps rope_theta in `rope_parameters`.
        let rope_theta = opt_f("rope_theta").or_else(|| {
            obj.get("rope_parameters")
                .and_then(|r| r.get("rope_theta"))
                .and_then(Value::as_f64)
                .map(|v| v as f32)
        });
        let num_attention_heads = req("num_attention_heads")?;
        let num_key_value_heads = obj
            .get("num_key_value_heads")
            .and_then(Value::as_u64)
            .map(|v| v as usize)
            .unwrap_or(num_attention_heads);
        let head_dim = obj
            .get("head_dim")
            .and_then(Value::as_u64)
            .map(|v| v as usize)
            .unwrap_or(hidden_size / num_attention_heads);
        if num_key_value_heads == 0 || num_attention_heads % num_key_value_heads != 0 {
            return Err(ModelError::config(
                path,
                format!(
                    "num_attention_heads ({num_attention_heads}) must be a multiple of \
                     num_key_value_heads ({num_key_value_heads})"
                ),
            ));
        }
        let rope_scaling = match obj.get("rope_scaling").or(obj.get("rope_parameters")) {
            None | Some(Value::Null) => None,
            Some(v) => parse_rope_scaling(v, path)?,
        };
        // Nested (multimodal) configs keep `quantization` at the top level.
        let quantization = ["quantization", "quantization_config"]
            .iter()
            .find_map(|k| obj.get(*k).or_else(|| raw.get(*k)))
            .and_then(QuantConfig::from_json)
            .filter(|q| q.default.is_some() || !q.overrides.is_empty());

        Ok(ModelConfig {
            vocab_size: req("vocab_size")?,
            hidden_size,
            // Sparse Qwen3.5 has no dense MLP size.
            intermediate_size: if model_type == "qwen3_5_moe" {
                obj.get("intermediate_size")
                    .and_then(Value::as_u64)
                    .unwrap_or(0) as usize
            } else {
                req("intermediate_size")?
            },
            num_hidden_layers: req("num_hidden_layers")?,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            rms_norm_eps: opt_f("rms_norm_eps").unwrap_or(1e-6),
            rope_theta: rope_theta.unwrap_or(if is_hybrid { 1e5 } else { 10000.0 }),
            rope_traditional: opt_b("rope_traditional").unwrap_or(false),
            rope_scaling,
            max_position_embeddings: obj
                .get("max_position_embeddings")
                .and_then(Value::as_u64)
                .map(|v| v as usize)
                .unwrap_or(4096),
            // mlx-lm's default; a checkpoint without `lm_head` must be tied anyway.
            tie_word_embeddings: opt_b("tie_word_embeddings").unwrap_or(true),
            // Qwen2 always has q/k/v biases; Llama only when configured.
            attention_bias: opt_b("attention_bias").unwrap_or(model_type == "qwen2"),
            mlp_bias: opt_b("mlp_bias").unwrap_or(false),
            qk_norm: model_type == "qwen3" || model_type == "qwen3_moe" || is_hybrid,
            hybrid,
            quantization,
            eos_token_ids: ids_from(obj.get("eos_token_id")),
            bos_token_id: obj
                .get("bos_token_id")
                .and_then(Value::as_u64)
                .map(|v| v as u32),
            generation_defaults: GenerationDefaults::default(),
            raw: raw.clone(),
            model_type,
        })
    }

    /// Derives the config from GGUF metadata (`general.architecture` + its keys).
    pub fn from_gguf(meta: &GgufMetadata, path: &Path) -> Result<Self> {
        let arch = meta
            .get_str("general.architecture")
            .ok_or_else(|| ModelError::config(path, "missing `general.architecture`"))?
            .to_string();
        if !SUPPORTED_ARCHITECTURES.contains(&arch.as_str()) {
            return Err(ModelError::UnknownArchitecture {
                path: path.into(),
                arch,
                supported: SUPPORTED_ARCHITECTURES.join(", "),
            });
        }
        let key = |k: &str| format!("{arch}.{k}");
        let req = |k: &str| -> Result<usize> {
            meta.get_u64(&key(k))
                .map(|v| v as usize)
                .filter(|&v| v > 0)
                .ok_or_else(|| ModelError::config(path, format!("missing `{}`", key(k))))
        };
        let hidden_size = req("embedding_length")?;
        let heads = req("attention.head_count")?;
        let kv_heads = meta
            .get_u64(&key("attention.head_count_kv"))
            .map(|v| v as usize)
            .unwrap_or(heads);
        let head_dim = meta
            .get_u64(&key("attention.key_length"))
            .map(|v| v as usize)
            .unwrap_or(hidden_size / heads);
        let vocab_size = meta
            .get_u64(&key("vocab_size"))
            .map(|v| v as usize)
            .or_else(|| match meta.get("tokenizer.ggml.tokens") {
                Some(crate::gguf::GgufValue::Array(a)) => Some(a.len()),
                _ => None,
            })
            .ok_or_else(|| ModelError::config(path, "cannot tell the vocabulary size"))?;
        let has_output = meta.tensors.iter().any(|t| t.name == "output.weight");
        let rope_scaling = match meta.get_str(&key("rope.scaling.type")) {
            Some("linear") => meta
                .get_f64(&key("rope.scaling.factor"))
                .map(|f| RopeScaling::Linear { factor: f as f32 }),
            _ => None,
        };
        let eos: Vec<u32> = meta
            .get_u64("tokenizer.ggml.eos_token_id")
            .map(|v| vec![v as u32])
            .unwrap_or_default();
        let raw = serde_json::json!({
            "model_type": arch,
            "architectures": [match arch.as_str() {
                "llama" => "LlamaForCausalLM",
                "qwen2" => "Qwen2ForCausalLM",
                _ => "Qwen3ForCausalLM",
            }],
            "vocab_size": vocab_size,
            "hidden_size": hidden_size,
            "intermediate_size": req("feed_forward_length")?,
            "num_hidden_layers": req("block_count")?,
            "num_attention_heads": heads,
            "num_key_value_heads": kv_heads,
            "head_dim": head_dim,
            "rms_norm_eps": meta.get_f64(&key("attention.layer_norm_rms_epsilon")).unwrap_or(1e-6),
            "rope_theta": meta.get_f64(&key("rope.freq_base")).unwrap_or(10000.0),
            "max_position_embeddings": meta.get_u64(&key("context_length")).unwrap_or(4096),
            "tie_word_embeddings": !has_output,
            "eos_token_id": eos.first().copied(),
            "bos_token_id": meta.get_u64("tokenizer.ggml.bos_token_id"),
        });
        let mut config = Self::from_json(&raw, path)?;
        config.rope_scaling = rope_scaling.or(config.rope_scaling);
        Ok(config)
    }

    /// Bytes of KV cache per token of one sequence at `bytes_per_element`.
    /// Only full-attention layers count: linear-attention layers keep a
    /// fixed-size state instead ([`Self::state_bytes_per_sequence`]).
    pub fn kv_bytes_per_token(&self, bytes_per_element: usize) -> usize {
        let layers = self
            .hybrid
            .as_ref()
            .map_or(self.num_hidden_layers, HybridConfig::attention_layers);
        2 * layers * self.num_key_value_heads * self.head_dim * bytes_per_element
    }

    /// Bytes of per-sequence recurrent state that does not grow with length
    /// (0 for plain transformers).
    pub fn state_bytes_per_sequence(&self, bytes_per_element: usize) -> usize {
        self.hybrid
            .as_ref()
            .map_or(0, |h| h.state_bytes_per_sequence(bytes_per_element))
    }
}

fn parse_rope_scaling(v: &Value, path: &Path) -> Result<Option<RopeScaling>> {
    let kind = v
        .get("rope_type")
        .or_else(|| v.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    let f = |k: &str, default: f64| v.get(k).and_then(Value::as_f64).unwrap_or(default) as f32;
    match kind {
        "default" => Ok(None),
        "linear" => Ok(Some(RopeScaling::Linear {
            factor: f("factor", 1.0),
        })),
        "llama3" => Ok(Some(RopeScaling::Llama3 {
            factor: f("factor", 8.0),
            low_freq_factor: f("low_freq_factor", 1.0),
            high_freq_factor: f("high_freq_factor", 4.0),
            original_max_position_embeddings: f("original_max_position_embeddings", 8192.0),
        })),
        other => Err(ModelError::config(
            path,
            format!("unsupported rope_scaling type `{other}` (supported: linear, llama3)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Value {
        serde_json::json!({
            "model_type": "qwen3", "vocab_size": 100, "hidden_size": 64,
            "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "eos_token_id": [5, 6],
            "quantization": {"group_size": 64, "bits": 4,
                             "model.layers.0.mlp.gate_proj": {"group_size": 64, "bits": 8},
                             "lm_head": false}
        })
    }

    #[test]
    fn parses_qwen3_with_mixed_quantization() {
        let c = ModelConfig::from_json(&base(), Path::new("config.json")).unwrap();
        assert!(c.qk_norm && c.tie_word_embeddings && !c.attention_bias);
        assert_eq!(c.eos_token_ids, vec![5, 6]);
        let q = c.quantization.unwrap();
        assert_eq!(q.for_module("model.layers.1.mlp.up_proj").unwrap().bits, 4);
        assert_eq!(
            q.for_module("model.layers.0.mlp.gate_proj").unwrap().bits,
            8
        );
        assert_eq!(q.for_module("lm_head"), None);
    }

    #[test]
    fn rejects_unknown_arch_and_bad_heads() {
        let mut v = base();
        v["model_type"] = "mamba".into();
        let e = ModelConfig::from_json(&v, Path::new("x/config.json")).unwrap_err();
        assert!(
            e.to_string().contains("unsupported architecture `mamba`"),
            "{e}"
        );
        let mut v = base();
        v["num_key_value_heads"] = 3.into();
        let e = ModelConfig::from_json(&v, Path::new("config.json")).unwrap_err();
        assert!(e.to_string().contains("multiple of"), "{e}");
        let mut v = base();
        v.as_object_mut().unwrap().remove("hidden_size");
        let e = ModelConfig::from_json(&v, Path::new("config.json")).unwrap_err();
        assert!(e.to_string().contains("hidden_size"), "{e}");
    }

    /// The shape of mlx-community's Qwen3.5-35B-A3B config: text model nested
    /// under `text_config` (model_type `qwen3_5_moe_text`), rope in
    /// `rope_parameters`, no dense `intermediate_size`.
    #[test]
    fn parses_nested_qwen3_5_moe() {
        let mut types = vec!["linear_attention"; 40];
        for i in (3..40).step_by(4) {
            types[i] = "full_attention";
        }
        let raw = serde_json::json!({
            "model_type": "qwen3_5_moe",
            "text_config": {
                "model_type": "qwen3_5_moe_text", "vocab_size": 248320, "hidden_size": 2048,
                "num_hidden_layers": 40, "num_attention_heads": 16, "num_key_value_heads": 2,
                "head_dim": 256, "layer_types": types, "linear_num_key_heads": 16,
                "linear_num_value_heads": 32, "linear_key_head_dim": 128,
                "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
                "num_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 512,
                "shared_expert_intermediate_size": 512,
                "rope_parameters": {"rope_type": "default", "rope_theta": 10000000,
                                    "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10]}
            },
            "quantization": {"group_size": 64, "bits": 4,
                             "language_model.model.layers.0.mlp.gate": {"group_size": 64, "bits": 8}}
        });
        let c = ModelConfig::from_json(&raw, Path::new("config.json")).unwrap();
        assert_eq!(c.model_type, "qwen3_5_moe");
        assert_eq!(c.rope_theta, 1e7);
        assert!(c.rope_scaling.is_none() && c.qk_norm);
        let h = c.hybrid.as_ref().unwrap();
        assert_eq!(h.attention_layers(), 10);
        assert!(h.full_attention[3] && !h.full_attention[4]);
        assert_eq!(h.partial_rotary_factor, 0.25);
        assert_eq!(h.conv_dim(), 8192);
        // KV only for the 10 attention layers; the 30 linear layers hold
        // 3 x 8192 conv inputs (bf16) and a 32 x 128 x 128 f32 memory each.
        assert_eq!(c.kv_bytes_per_token(2), 2 * 10 * 2 * 256 * 2);
        assert_eq!(
            c.state_bytes_per_sequence(2),
            30 * (3 * 8192 * 2 + 32 * 128 * 128 * 4)
        );
        let q = c.quantization.unwrap();
        assert_eq!(
            q.for_module("language_model.model.layers.0.mlp.gate")
                .unwrap()
                .bits,
            8
        );
        // Without layer_types: every full_attention_interval-th layer.
        let mut flat = raw["text_config"].clone();
        flat.as_object_mut().unwrap().remove("layer_types");
        flat["full_attention_interval"] = 2.into();
        let c = ModelConfig::from_json(&flat, Path::new("config.json")).unwrap();
        assert_eq!(c.hybrid.unwrap().attention_layers(), 20);
        flat["layer_types"] = serde_json::json!(["full_attention"]);
        assert!(ModelConfig::from_json(&flat, Path::new("config.json")).is_err());
    }

    #[test]
    fn llama3_rope_scaling() {
        let mut v = base();
        v["model_type"] = "llama".into();
        v["rope_scaling"] = serde_json::json!({"rope_type": "llama3", "factor": 32.0});
        let c = ModelConfig::from_json(&v, Path::new("config.json")).unwrap();
        assert!(
            matches!(c.rope_scaling, Some(RopeScaling::Llama3 { factor, .. }) if factor == 32.0)
        );
        v["rope_scaling"] = serde_json::json!({"type": "yarn", "factor": 4.0});
        assert!(ModelConfig::from_json(&v, Path::new("config.json")).is_err());
    }
}
