//! The Llama decoder: pre-norm transformer blocks of grouped-query attention
//! and a SwiGLU MLP, RMSNorm, rotary positions (incl. Llama 3 scaling) and
//! optionally tied embeddings. Qwen2 and Qwen3 reuse it with their switches
//! (`attention_bias`, `qk_norm`) set by their own files; Qwen3-MoE swaps the
//! MLP of some layers for a sparse mixture-of-experts block ([`crate::moe`]).

use mlx_rs::Array;

use crate::{
    cache::{CacheView, KvCache},
    config::ModelConfig,
    error::{ModelError, Result},
    layers::{last_position, pre_norm_stack, Attention, Embedding, Linear, RmsNorm},
    moe::{FeedForward, MoeConfig},
    weights::Weights,
};

#[derive(Debug)]
pub struct DecoderLayer {
    self_attn: Attention,
    mlp: FeedForward,
    input_layernorm: RmsNorm,
    post_attention_layernorm: RmsNorm,
}

impl DecoderLayer {
    fn load(
        weights: &mut Weights,
        layer: usize,
        config: &ModelConfig,
        moe: Option<&MoeConfig>,
    ) -> Result<Self> {
        let eps = config.rms_norm_eps;
        let prefix = format!("model.layers.{layer}");
        Ok(DecoderLayer {
            self_attn: Attention::load(weights, &format!("{prefix}.self_attn"), config)?,
            mlp: FeedForward::load(weights, &format!("{prefix}.mlp"), config, moe, layer)?,
            input_layernorm: RmsNorm::load(weights, &format!("{prefix}.input_layernorm"), eps)?,
            post_attention_layernorm: RmsNorm::load(
                weights,
                &format!("{prefix}.post_attention_layernorm"),
                eps,
            )?,
        })
    }

    fn norms(&self) -> (&RmsNorm, &RmsNorm) {
        (&self.input_layernorm, &self.post_attention_layernorm)
    }
}

/// A decoder-only language model (dense, or with sparse MoE layers).
#[derive(Debug)]
pub struct Model {
    pub config: ModelConfig,
    embed_tokens: Embedding,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    /// `None` when the output projection is the embedding table.
    lm_head: Option<Linear>,
}

impl Model {
    /// Builds the model from `weights` (Hugging Face names), consuming them.
    pub fn load(config: ModelConfig, weights: &mut Weights) -> Result<Self> {
        Self::load_with_moe(config, weights, None)
    }

    /// As [`Model::load`], with the layers `moe` selects built as sparse
    /// mixture-of-experts blocks.
    pub fn load_with_moe(
        config: ModelConfig,
        weights: &mut Weights,
        moe: Option<&MoeConfig>,
    ) -> Result<Self> {
        let embed_tokens = Embedding::load(weights, "model.embed_tokens")?;
        let layers = (0..config.num_hidden_layers)
            .map(|i| DecoderLayer::load(weights, i, &config, moe))
            .collect::<Result<Vec<_>>>()?;
        let norm = RmsNorm::load(weights, "model.norm", config.rms_norm_eps)?;
        // An explicit `tie_word_embeddings` wins; otherwise a checkpoint
        // without `lm_head` is tied.
        let tied = config
            .raw
            .get("tie_word_embeddings")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(!weights.contains("lm_head.weight"));
        let mut config = config;
        config.tie_word_embeddings = tied;
        let lm_head = if tied {
            for suffix in ["weight", "scales", "biases"] {
                weights.take_optional(&format!("lm_head.{suffix}"));
            }
            None
        } else {
            Some(Linear::load(weights, "lm_head", false)?)
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

    /// Dtype of the hidden states (and so of the KV cache).
    pub fn activation_dtype(&self) -> mlx_rs::Dtype {
        self.embed_tokens.output_dtype()
    }

    /// Number of layers (one cache entry each).
    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    /// A fresh cache for one sequence (one entry per layer).
    pub fn new_cache(&self) -> Vec<KvCache> {
        (0..self.layers.len()).map(|_| KvCache::new()).collect()
    }

    /// Runs `ids: [B, L]` (int32) through the model, appending to the caches
    /// (one view per layer). Returns logits `[B, L, vocab]`, or `[B, 1, vocab]`
    /// when `last_only`.
    pub fn forward(&self, ids: &Array, cache: &mut [CacheView], last_only: bool) -> Result<Array> {
        let h = self.embed_tokens.forward(ids)?;
        let mut h = pre_norm_stack(
            h,
            &self.layers,
            cache,
            DecoderLayer::norms,
            |layer, x, view| layer.self_attn.forward(x, view),
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

    /// Bytes held by the parameters.
    pub fn nbytes(&self) -> usize {
        let layers: usize = self
            .layers
            .iter()
            .map(|l| {
                l.self_attn.nbytes()
                    + l.mlp.nbytes()
                    + l.input_layernorm.weight.nbytes()
                    + l.post_attention_layernorm.weight.nbytes()
            })
            .sum();
        layers
            + self.embed_tokens.nbytes()
            + self.norm.weight.nbytes()
            + self.lm_head.as_ref().map_or(0, Linear::nbytes)
    }
}

/// Loads a `llama` checkpoint.
pub fn load(config: ModelConfig, weights: &mut Weights) -> Result<Model> {
    Model::load(config, weights)
}
