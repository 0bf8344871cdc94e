//! Qwen3-MoE: the Qwen3 decoder (q/k RMSNorm, no q/k/v biases) whose
//! feed-forward is a sparse mixture-of-experts block on the layers that
//! `decoder_sparse_step` / `mlp_only_layers` select (all of them in the
//! released models), a dense SwiGLU MLP on the others.

use crate::{
    config::ModelConfig,
    error::{ModelError, Result},
    llama::Model,
    moe::MoeConfig,
    weights::Weights,
};

pub fn load(mut config: ModelConfig, weights: &mut Weights) -> Result<Model> {
    config.qk_norm = true;
    // Hugging Face's Qwen3MoeConfig defaults `norm_topk_prob` to false.
    let moe = MoeConfig::from_config(&config, false)?.ok_or_else(|| {
        ModelError::config(
            weights.source().join("config.json"),
            "qwen3_moe needs `num_experts` > 0",
        )
    })?;
    Model::load_with_moe(config, weights, Some(&moe))
}
