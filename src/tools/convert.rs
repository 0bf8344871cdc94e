//! `hearth convert`: writes a GGUF model as a Hugging Face / MLX folder.
//!
//! GGUF's Q4_0 / Q4_1 / Q8_0 blocks are MLX affine quantization with group
//! size 32, so quantized tensors are copied as they are (no requantization,
//! no loss); Llama's Q/K rows are put back in Hugging Face order, tensors get
//! Hugging Face names, and the tokenizer and chat template from the GGUF
//! metadata become tokenizer.json / tokenizer_config.json. mlx-lm and
//! Hearth load the result like any MLX model.

use std::{
    collections::{BTreeMap, HashMap},
    path::Path,
};

use anyhow::{Context, Result};
use hearth_models::{
    config::{ModelConfig, QuantConfig, QuantParams},
    gguf::GgufMetadata,
    Tokenizer, Weights,
};
use mlx_rs::Array;

/// What conversion wrote.
#[derive(Debug)]
pub struct ConvertSummary {
    pub tensors: usize,
    pub quantized_layers: usize,
    pub quantization: Option<QuantParams>,
}

pub fn convert_gguf(gguf: &Path, out: &Path) -> Result<ConvertSummary> {
    let meta = GgufMetadata::read(gguf)?;
    let config = ModelConfig::from_gguf(&meta, gguf)?;
    let tokenizer = Tokenizer::from_gguf(&meta, gguf)?;
    let weights = Weights::from_gguf(gguf, &config)?;

    // Per-layer quantization, read off the tensor shapes.
    let mut per_layer: BTreeMap<String, QuantParams> = BTreeMap::new();
    let prefixes: Vec<String> = weights
        .leftover()
        .iter()
        .filter_map(|n| n.strip_suffix(".scales"))
        .map(str::to_string)
        .collect();
    for prefix in &prefixes {
        let weight = weights
            .get(&format!("{prefix}.weight"))
            .with_context(|| format!("{}: `{prefix}.scales` without a weight", gguf.display()))?;
        if let Some(q) = weights.quantization_of(prefix, weight)? {
            per_layer.insert(prefix.clone(), q);
        }
    }
    let quantization = most_common(per_layer.values().copied());
    let mut quant_config = QuantConfig {
        default: quantization,
        overrides: BTreeMap::new(),
    };
    for (prefix, q) in &per_layer {
        if Some(*q) != quantization {
            quant_config.overrides.insert(prefix.clone(), Some(*q));
        }
    }

    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let tensors: HashMap<String, Array> = weights.into_tensors();
    let count = tensors.len();
    let mut metadata = HashMap::new();
    metadata.insert("format".to_string(), "mlx".to_string());
    Array::save_safetensors(&tensors, &metadata, out.join("model.safetensors"))
        .with_context(|| format!("writing {}", out.join("model.safetensors").display()))?;

    let mut raw = config.raw.clone();
    if quantization.is_some() {
        raw["quantization"] = quant_config.to_json();
        raw["quantization_config"] = quant_config.to_json();
    }
    raw["hearth_converted_from"] = gguf
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .into();
    std::fs::write(out.join("config.json"), serde_json::to_string_pretty(&raw)?)?;
    tokenizer.save_hf(out)?;
    Ok(ConvertSummary {
        tensors: count,
        quantized_layers: per_layer.len(),
        quantization,
    })
}

fn most_common(items: impl Iterator<Item = QuantParams>) -> Option<QuantParams> {
    let mut counts: Vec<(QuantParams, usize)> = Vec::new();
    for q in items {
        match counts.iter_mut().find(|(p, _)| *p == q) {
            Some((_, n)) => *n += 1,
            None => counts.push((q, 1)),
        }
    }
    counts.into_iter().max_by_key(|(_, n)| *n).map(|(q, _)| q)
}
