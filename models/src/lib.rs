//! Model architectures, weight loading and tokenizers for Hearth, on mlx-rs.
//!
//! A model folder (Hugging Face / MLX layout: `config.json`, safetensors,
//! tokenizer files) or a single GGUF file is turned into a [`LoadedModel`]:
//! a [`Model`] that runs forward passes over per-sequence
//! [`KvCache`]s, plus the [`Tokenizer`] (with its chat template).
//!
//! Architectures live one per file (`llama`, `qwen2`, `qwen3`, `qwen3_moe`,
//! `qwen3_5`) and share the layers in [`layers`] (the sparse MoE block in
//! [`moe`], Qwen3.5's Gated DeltaNet layer in [`deltanet`]); [`load`] picks
//! one by `model_type`.

pub mod cache;
pub mod chat_template;
pub mod config;
pub mod cuda_attn;
pub mod cuda_delta;
pub mod cuda_experts;
pub mod cuda_gemv;
mod cuda_kernel;
pub mod cuda_moe;
pub mod cuda_norm;
pub mod cuda_qk;
pub mod cuda_swiglu;
pub mod deltanet;
pub mod detokenizer;
pub mod error;
pub mod fused;
pub mod gguf;
pub mod layers;
pub mod lean;
pub mod llama;
pub mod model;
pub mod moe;
pub mod qwen2;
pub mod qwen3;
pub mod qwen3_5;
pub mod qwen3_moe;
#[cfg(test)]
mod test_util;
pub mod tokenizer;
pub mod weights;

use std::path::{Path, PathBuf};

pub use cache::{
    BatchKv, BatchShape, CacheView, DecodeStep, KvCache, PrefillBatch, PrefillChunk, RecurrentState,
};
pub use config::ModelConfig;
pub use error::{ModelError, Result};
pub use model::Model;
pub use tokenizer::Tokenizer;
pub use weights::{LoadProgress, Weights};

/// What a model was loaded from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelFormat {
    /// A Hugging Face / MLX folder with safetensors.
    Folder,
    /// A single GGUF file.
    Gguf,
}

/// A model ready to run, with its tokenizer.
#[derive(Debug)]
pub struct LoadedModel {
    pub model: Model,
    pub tokenizer: Tokenizer,
    pub path: PathBuf,
    pub format: ModelFormat,
}

impl LoadedModel {
    pub fn config(&self) -> &ModelConfig {
        &self.model.config
    }

    /// End-of-sequence ids: the model config's and the tokenizer's.
    pub fn eos_token_ids(&self) -> Vec<u32> {
        let mut ids = self.model.config.eos_token_ids.clone();
        for &id in self.tokenizer.eos_token_ids() {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        ids
    }
}

/// How quantized weights are held once loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QuantizedWeights {
    /// As stored, multiplied by MLX's quantized kernels: what Metal and
    /// CUDA want, and what mlx-lm does.
    #[default]
    Keep,
    /// Every quantized weight (`Linear` layers, embeddings, MoE experts)
    /// expanded to dense float32 at load: on MLX's CPU backend a float32 product
    /// on OpenBLAS is many times faster than the scalar quantized one
    /// (docs/mlx-on-linux.md), at 8x the memory of 4-bit weights.
    Float32,
    /// [`QuantizedWeights::Float32`] when every quantized tensor expanded
    /// would take at most this many bytes, else [`QuantizedWeights::Keep`].
    Float32UpTo(u64),
}

/// Choices made while loading.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadOptions {
    pub quantized: QuantizedWeights,
}

/// Loads the config, weights and tokenizer at `path` (folder or `.gguf`).
pub fn load(path: &Path) -> Result<LoadedModel> {
    load_with_progress(path, &mut |_| {})
}

/// [`load`], calling `progress` as the weights are read (tensors and bytes
/// of the total: from nothing done to everything, see [`weights::read_all`]).
pub fn load_with_progress(
    path: &Path,
    progress: &mut dyn FnMut(LoadProgress),
) -> Result<LoadedModel> {
    load_with_options(path, LoadOptions::default(), progress)
}

/// [`load_with_progress`] with [`LoadOptions`].
pub fn load_with_options(
    path: &Path,
    options: LoadOptions,
    progress: &mut dyn FnMut(LoadProgress),
) -> Result<LoadedModel> {
    let (config, mut weights, tokenizer, format) = if is_gguf(path) {
        let meta = gguf::GgufMetadata::read(path)?;
        let config = ModelConfig::from_gguf(&meta, path)?;
        let tokenizer = Tokenizer::from_gguf(&meta, path)?;
        let weights = Weights::from_gguf_with_progress(path, &config, progress)?;
        (config, weights, tokenizer, ModelFormat::Gguf)
    } else if path.is_dir() {
        let config = ModelConfig::from_dir(path)?;
        let tokenizer = Tokenizer::from_dir(path)?;
        let weights = Weights::from_dir_with_progress(path, &config, progress)?;
        (config, weights, tokenizer, ModelFormat::Folder)
    } else {
        return Err(ModelError::io(
            path,
            "not a model: expected a folder with config.json or a .gguf file",
        ));
    };
    let expand = match options.quantized {
        QuantizedWeights::Keep => false,
        QuantizedWeights::Float32 => true,
        QuantizedWeights::Float32UpTo(limit) => {
            let bytes = weights.expanded_float32_bytes()?;
            bytes > 0 && bytes <= limit
        }
    };
    weights.set_expand_quantized(expand);
    let model = build(config, &mut weights)?;
    // Projections joined at build time (`LinearGroup`) leave their parts'
    // buffers in MLX's cache: give them back.
    let _ = mlx_rs::memory::clear_cache();
    Ok(LoadedModel {
        model,
        tokenizer,
        path: path.to_path_buf(),
        format,
    })
}

/// Builds the architecture named by `config.model_type` from `weights`.
pub fn build(config: ModelConfig, weights: &mut Weights) -> Result<Model> {
    match config.model_type.as_str() {
        "llama" => llama::load(config, weights).map(Model::from),
        "qwen2" => qwen2::load(config, weights).map(Model::from),
        "qwen3" => qwen3::load(config, weights).map(Model::from),
        "qwen3_moe" => qwen3_moe::load(config, weights).map(Model::from),
        "qwen3_5" | "qwen3_5_moe" => qwen3_5::load(config, weights).map(Model::from),
        other => Err(ModelError::UnknownArchitecture {
            path: weights.source().to_path_buf(),
            arch: other.to_string(),
            supported: config::SUPPORTED_ARCHITECTURES.join(", "),
        }),
    }
}

/// True for paths ending in `.gguf` (case-insensitive).
pub fn is_gguf(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
}
