//! [`Model`]: whichever architecture a checkpoint needs, behind one type.
//!
//! Plain decoders (`llama`, `qwen2`, `qwen3`) run [`crate::llama::Model`];
//! Qwen3.5's hybrid stack runs [`crate::qwen3_5::Model`]. Both take one
//! [`CacheView`] per layer, so the engine and the scheduler drive them alike.

use mlx_rs::{Array, Dtype};

use crate::{
    cache::{CacheView, KvCache},
    config::ModelConfig,
    error::Result,
    llama, qwen3_5,
};

#[derive(Debug)]
enum Arch {
    Decoder(llama::Model),
    Hybrid(qwen3_5::Model),
}

/// A loaded language model.
#[derive(Debug)]
pub struct Model {
    pub config: ModelConfig,
    arch: Arch,
}

impl From<llama::Model> for Model {
    fn from(m: llama::Model) -> Self {
        Model {
            config: m.config.clone(),
            arch: Arch::Decoder(m),
        }
    }
}

impl From<qwen3_5::Model> for Model {
    fn from(m: qwen3_5::Model) -> Self {
        Model {
            config: m.config.clone(),
            arch: Arch::Hybrid(m),
        }
    }
}

impl Model {
    /// Dtype of the hidden states (and so of the KV cache).
    pub fn activation_dtype(&self) -> Dtype {
        match &self.arch {
            Arch::Decoder(m) => m.activation_dtype(),
            Arch::Hybrid(m) => m.activation_dtype(),
        }
    }

    /// Number of layers (one cache entry each).
    pub fn num_layers(&self) -> usize {
        match &self.arch {
            Arch::Decoder(m) => m.num_layers(),
            Arch::Hybrid(m) => m.num_layers(),
        }
    }

    /// A fresh cache for one sequence (one entry per layer).
    pub fn new_cache(&self) -> Vec<KvCache> {
        match &self.arch {
            Arch::Decoder(m) => m.new_cache(),
            Arch::Hybrid(m) => m.new_cache(),
        }
    }

    /// Runs `ids: [B, L]` (int32) through the model, appending to the caches
    /// (one view per layer). Returns logits `[B, L, vocab]`, or `[B, 1, vocab]`
    /// when `last_only`.
    pub fn forward(&self, ids: &Array, cache: &mut [CacheView], last_only: bool) -> Result<Array> {
        match &self.arch {
            Arch::Decoder(m) => m.forward(ids, cache, last_only),
            Arch::Hybrid(m) => m.forward(ids, cache, last_only),
        }
    }

    /// Bytes held by the parameters.
    pub fn nbytes(&self) -> usize {
        match &self.arch {
            Arch::Decoder(m) => m.nbytes(),
            Arch::Hybrid(m) => m.nbytes(),
        }
    }
}
