//! Qwen2 / Qwen2.5: the Llama decoder with biases on the q/k/v projections
//! (set by [`ModelConfig`]'s `attention_bias`, true for `qwen2`).

use crate::{config::ModelConfig, error::Result, llama::Model, weights::Weights};

pub fn load(mut config: ModelConfig, weights: &mut Weights) -> Result<Model> {
    // Qwen2 checkpoints always carry q/k/v biases, whatever config.json says.
    config.attention_bias = weights.contains("model.layers.0.self_attn.q_proj.bias");
    Model::load(config, weights)
}
