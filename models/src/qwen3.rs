//! Qwen3 (dense): the Llama decoder with a per-head RMSNorm on queries and
//! keys before rotary embedding, and no q/k/v biases.

use crate::{config::ModelConfig, error::Result, llama::Model, weights::Weights};

pub fn load(mut config: ModelConfig, weights: &mut Weights) -> Result<Model> {
    config.qk_norm = true;
    Model::load(config, weights)
}
