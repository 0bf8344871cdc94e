//! Qwen3.5 text models: `qwen3_5` (dense MLP) and `qwen3_5_moe` (sparse MoE
//! with a shared expert). A hybrid stack: most layers are Gated DeltaNet
//! linear attention ([`crate::deltanet`]), every `full_attention_interval`-th
//! (or as `layer_types` says) a gated softmax attention layer with q/k
//! RMSNorm, partial rotary embedding and an output gate `sigmoid(g)`.
//!
//! Checkpoint layouts handled: mlx-community (`language_model.model.*`,
//! `language_model.lm_head`, quantization overrides keyed by those paths),
//! Hugging Face (`model.language_model.*`, `lm_head`, conv1d weights as
//! `[C, 1, K]` and norm weights stored as offsets from 1) and flat
//! (`model.*`). Vision tower and multi-token-prediction weights are ignored.

use mlx_rs::{nn, ops::indexing::IndexOp, Array};

use crate::{
    cache::{CacheView, KvCache},
    config::{HybridConfig, ModelConfig},
    deltanet::GatedDeltaNet,
    error::{ModelError, Result},
    layers::{last_position, pre_norm_stack, Embedding, Linear, LinearGroup, RmsNorm, Rope},
    moe::{FeedForward, MoeConfig},
    weights::Weights,
};

/// Softmax attention with a per-head output gate (q_proj yields both).
#[derive(Debug)]
pub struct GatedAttention {
    /// `q_proj` (queries and gate), `k_proj`, `v_proj`, run as one.
    qkv: LinearGroup,
    o_proj: Linear,
    q_norm: RmsNorm,
    k_norm: RmsNorm,
    n_heads: i32,
    n_kv_heads: i32,
    head_dim: i32,
    scale: f32,
    rope: Rope,
}

impl GatedAttention {
    fn load(
        weights: &mut Weights,
        prefix: &str,
        config: &ModelConfig,
        hybrid: &HybridConfig,
    ) -> Result<Self> {
        let bias = config.attention_bias;
        let eps = config.rms_norm_eps;
        let rotary = (config.head_dim as f32 * hybrid.partial_rotary_factor) as usize;
        Ok(GatedAttention {
            qkv: LinearGroup::load(weights, prefix, &["q_proj", "k_proj", "v_proj"], bias)?,
            o_proj: Linear::load(weights, &format!("{prefix}.o_proj"), bias)?,
            q_norm: RmsNorm::load(weights, &format!("{prefix}.q_norm"), eps)?,
            k_norm: RmsNorm::load(weights, &format!("{prefix}.k_norm"), eps)?,
            n_heads: config.num_attention_heads as i32,
            n_kv_heads: config.num_key_value_heads as i32,
            head_dim: config.head_dim as i32,
            scale: (config.head_dim as f32).powf(-0.5),
            rope: Rope::with_dims(config, rotary),
        })
    }

    fn forward(&self, x: &Array, cache: &mut CacheView) -> Result<Array> {
        let (b, l) = (x.dim(0), x.dim(1));
        let hd = self.head_dim;
        let qkv = self.qkv.forward(x)?;
        let qg = qkv[0].reshape(&[b, l, self.n_heads, 2 * hd])?;
        let q = qg.index((.., .., .., ..hd));
        let gate = qg
            .index((.., .., .., hd..))
            .reshape(&[b, l, self.n_heads * hd])?;
        let q = self.q_norm.forward(&q)?.transpose_axes(&[0, 2, 1, 3])?;
        let k = self
            .k_norm
            .forward(&qkv[1].reshape(&[b, l, self.n_kv_heads, hd])?)?
            .transpose_axes(&[0, 2, 1, 3])?;
        let v = qkv[2]
            .reshape(&[b, l, self.n_kv_heads, hd])?
            .transpose_axes(&[0, 2, 1, 3])?;
        let (q, k) = {
            let offset = cache.rope_offset();
            (
                self.rope.forward(&q, &offset)?,
                self.rope.forward(&k, &offset)?,
            )
        };
        let (k, v) = cache.update_and_fetch(&k, &v)?;
        let out = crate::layers::attend(&q, &k, &v, self.scale, cache)?;
        let out = out
            .transpose_axes(&[0, 2, 1, 3])?
            .reshape(&[b, l, self.n_heads * hd])?;
        self.o_proj.forward(&out.multiply(nn::sigmoid(&gate)?)?)
    }

    fn nbytes(&self) -> usize {
        self.qkv.nbytes()
            + self.o_proj.nbytes()
            + self.q_norm.weight.nbytes()
            + self.k_norm.weight.nbytes()
    }
}

#[derive(Debug)]
enum Mixer {
    Linear(GatedDeltaNet),
    Attention(GatedAttention),
}

#[derive(Debug)]
struct DecoderLayer {
    mixer: Mixer,
    mlp: FeedForward,
    input_layernorm: RmsNorm,
    post_attention_layernorm: RmsNorm,
}

impl DecoderLayer {
    fn mix(&self, normed: &Array, cache: &mut CacheView) -> Result<Array> {
        match &self.mixer {
            Mixer::Linear(m) => m.forward(normed, cache),
            Mixer::Attention(m) => m.forward(normed, cache),
        }
    }

    fn norms(&self) -> (&RmsNorm, &RmsNorm) {
        (&self.input_layernorm, &self.post_attention_layernorm)
    }

    fn nbytes(&self) -> usize {
        let mixer = match &self.mixer {
            Mixer::Linear(m) => m.nbytes(),
            Mixer::Attention(m) => m.nbytes(),
        };
        mixer
            + self.mlp.nbytes()
            + self.input_layernorm.weight.nbytes()
            + self.post_attention_layernorm.weight.nbytes()
    }
}

/// A Qwen3.5 text model.
#[derive(Debug)]
pub struct Model {
    pub config: ModelConfig,
    embed_tokens: Embedding,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    lm_head: Option<Linear>,
}

/// Where the text model's tensors live in a checkpoint.
struct Layout {
    model: &'static str,
    lm_head: &'static str,
}

fn layout(weights: &Weights) -> Layout {
    if weights.contains("language_model.model.embed_tokens.weight") {
        Layout {
            model: "language_model.model",
            lm_head: "language_model.lm_head",
        }
    } else if weights.contains("model.language_model.embed_tokens.weight") {
        Layout {
            model: "model.language_model",
            lm_head: "lm_head",
        }
    } else {
        Layout {
            model: "model",
            lm_head: "lm_head",
        }
    }
}

/// Hugging Face checkpoints store conv1d weights as `[C, 1, K]` (MLX:
/// `[C, K, 1]`) and the decoder's RMSNorm weights as offsets from 1; MLX
/// conversions have both already folded in. Returns whether it converted.
fn fold_hf_norms(weights: &mut Weights, model: &str) -> Result<bool> {
    let names = weights.names();
    let hf = names.iter().any(|n| {
        n.ends_with("conv1d.weight")
            && weights
                .get(n)
                .is_some_and(|w| w.ndim() == 3 && w.dim(-1) != 1)
    });
    if !hf {
        return Ok(false);
    }
    let final_norm = format!("{model}.norm.weight");
    for name in names {
        let is_norm = [
            ".input_layernorm.weight",
            ".post_attention_layernorm.weight",
            ".q_norm.weight",
            ".k_norm.weight",
        ]
        .iter()
        .any(|s| name.ends_with(s))
            || name == final_norm;
        if !is_norm {
            continue;
        }
        if let Some(w) = weights.take_optional(&name) {
            let dtype = w.dtype();
            let folded = w.add(Array::from_f32(1.0))?.as_dtype(dtype)?;
            weights.insert(name, folded);
        }
    }
    Ok(true)
}

impl Model {
    pub fn load(config: ModelConfig, weights: &mut Weights) -> Result<Self> {
        let Some(hybrid) = config.hybrid.clone() else {
            return Err(ModelError::config(
                weights.source(),
                "qwen3_5 config without linear-attention settings",
            ));
        };
        if hybrid.full_attention.len() != config.num_hidden_layers {
            return Err(ModelError::config(
                weights.source(),
                "layer_types does not match num_hidden_layers",
            ));
        }
        weights.retain(|n| {
            !(n.starts_with("vision_tower")
                || n.starts_with("model.visual")
                || n.starts_with("mtp.")
                || n.contains(".mtp."))
        });
        let Layout { model, lm_head } = layout(weights);
        fold_hf_norms(weights, model)?;
        // Hugging Face's Qwen3.5 default renormalises the top-k weights.
        let moe = MoeConfig::from_config(&config, true)?;
        if config.model_type == "qwen3_5_moe" && moe.is_none() {
            return Err(ModelError::config(
                weights.source(),
                "qwen3_5_moe config without `num_experts`",
            ));
        }
        let eps = config.rms_norm_eps;
        let embed_tokens = Embedding::load(weights, &format!("{model}.embed_tokens"))?;
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for (i, &full) in hybrid.full_attention.iter().enumerate() {
            let p = format!("{model}.layers.{i}");
            let mixer = if full {
                Mixer::Attention(GatedAttention::load(
                    weights,
                    &format!("{p}.self_attn"),
                    &config,
                    &hybrid,
                )?)
            } else {
                Mixer::Linear(GatedDeltaNet::load(
                    weights,
                    &format!("{p}.linear_attn"),
                    &hybrid,
                    eps,
                )?)
            };
            layers.push(DecoderLayer {
                mixer,
                mlp: FeedForward::load(weights, &format!("{p}.mlp"), &config, moe.as_ref(), i)?,
                input_layernorm: RmsNorm::load(weights, &format!("{p}.input_layernorm"), eps)?,
                post_attention_layernorm: RmsNorm::load(
                    weights,
                    &format!("{p}.post_attention_layernorm"),
                    eps,
                )?,
            });
        }
        let norm = RmsNorm::load(weights, &format!("{model}.norm"), eps)?;
        let tied = tie_word_embeddings(&config.raw)
            .unwrap_or(!weights.contains(&format!("{lm_head}.weight")));
        let mut config = config;
        config.tie_word_embeddings = tied;
        let lm_head = if tied {
            for suffix in ["weight", "scales", "biases"] {
                weights.take_optional(&format!("{lm_head}.{suffix}"));
            }
            None
        } else {
            Some(Linear::load(weights, lm_head, false)?)
        };
        let leftover = weights.leftover();
        if !leftover.is_empty() {
            let names: Vec<&str> = leftover.iter().take(5).copied().collect();
            return Err(ModelError::Weights {
                path: weights.source().to_path_buf(),
                message: format!(
                    "{} tensors not used by the `{}` architecture (e.g. {}): \
                     the checkpoint does not match its config",
                    leftover.len(),
                    config.model_type,
                    names.join(", ")
                ),
            });
        }
        Ok(Model {
            config,
            embed_tokens,
            layers,
            norm,
            lm_head,
        })
    }

    pub fn activation_dtype(&self) -> mlx_rs::Dtype {
        self.embed_tokens.output_dtype()
    }

    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    pub fn new_cache(&self) -> Vec<KvCache> {
        (0..self.layers.len()).map(|_| KvCache::new()).collect()
    }

    pub fn forward(&self, ids: &Array, cache: &mut [CacheView], last_only: bool) -> Result<Array> {
        let h = self.embed_tokens.forward(ids)?;
        let mut h = pre_norm_stack(
            h,
            &self.layers,
            cache,
            DecoderLayer::norms,
            |layer, x, view| layer.mix(x, view),
            |layer, x| layer.mlp.forward(x),
        )?;
        if last_only {
            h = last_position(&h, cache)?;
        }
        let h = self.norm.forward(&h)?;
        match &self.lm_head {
            Some(head) => head.forward(&h),
            None => self.embed_tokens.as_linear(&h),
        }
    }

    pub fn nbytes(&self) -> usize {
        self.layers.iter().map(DecoderLayer::nbytes).sum::<usize>()
            + self.embed_tokens.nbytes()
            + self.norm.weight.nbytes()
            + self.lm_head.as_ref().map_or(0, Linear::nbytes)
    }
}

/// `tie_word_embeddings` of the text model (nested config first).
fn tie_word_embeddings(raw: &serde_json::Value) -> Option<bool> {
    raw.get("text_config")
        .and_then(|t| t.get("tie_word_embeddings"))
        .or_else(|| raw.get("tie_word_embeddings"))
        .and_then(serde_json::Value::as_bool)
}

pub fn load(config: ModelConfig, weights: &mut Weights) -> Result<Model> {
    Model::load(config, weights)
}
