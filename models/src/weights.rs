//! Tensor loading: safetensors (single file or sharded with an index) and
//! GGUF, into one name → array map under Hugging Face names.
//!
//! Layers [`take`](Weights::take) their tensors by name; whatever is left at
//! the end is reported, so a checkpoint that does not match its config is
//! noticed instead of silently half-loaded. Quantized layers are recognised
//! by their `.scales` companion (as mlx-lm does); their bit width is checked
//! against the tensor shapes so a wrong config fails at load with the
//! tensor's name.
//!
//! Loading reads every tensor into memory before the model is built
//! ([`read_all`]), in batches, reporting [`LoadProgress`] (tensors and bytes
//! read of the total) so a server can show a real progress bar. MLX reads
//! safetensors lazily, so this is where the file bytes are read; a GGUF file
//! is read by MLX in one call, after which its renamed tensors are counted.

use std::{
    collections::{BTreeSet, HashMap},
    path::{Path, PathBuf},
};

use mlx_rs::{io::GgufFile, Array, Dtype};

use crate::{
    config::{ModelConfig, QuantConfig, QuantParams},
    error::{ModelError, Result},
};

/// How far reading a model's weights has got.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadProgress {
    pub tensors_done: usize,
    pub tensors_total: usize,
    pub bytes_done: u64,
    pub bytes_total: u64,
}

/// Bytes evaluated per batch while reading weights: large enough that the
/// per-call overhead is nothing, small enough for a smooth progress bar.
const READ_BATCH_BYTES: u64 = 64 << 20;

/// Evaluates (reads into memory) every tensor of `tensors` in name order,
/// in batches of about [`READ_BATCH_BYTES`], calling `progress` first with
/// nothing done and then after each batch; the last call has
/// `bytes_done == bytes_total`.
pub fn read_all(
    tensors: &HashMap<String, Array>,
    source: &Path,
    progress: &mut dyn FnMut(LoadProgress),
) -> Result<()> {
    let mut names: Vec<&String> = tensors.keys().collect();
    names.sort();
    let mut state = LoadProgress {
        tensors_total: names.len(),
        bytes_total: tensors.values().map(|a| a.nbytes() as u64).sum(),
        ..LoadProgress::default()
    };
    progress(state);
    let mut batch: Vec<&Array> = Vec::new();
    let mut batch_bytes = 0u64;
    for (i, name) in names.iter().enumerate() {
        let array = &tensors[*name];
        batch.push(array);
        batch_bytes += array.nbytes() as u64;
        if batch_bytes >= READ_BATCH_BYTES || i + 1 == names.len() {
            mlx_rs::transforms::eval(batch.iter().copied()).map_err(|e| ModelError::Weights {
                path: source.to_path_buf(),
                message: format!("cannot read tensors (up to `{name}`): {e}"),
            })?;
            state.tensors_done += batch.len();
            state.bytes_done += batch_bytes;
            progress(state);
            batch.clear();
            batch_bytes = 0;
        }
    }
    if names.is_empty() {
        progress(state);
    }
    Ok(())
}

/// Runs `load` (which builds lazy `Load` arrays) on the default device's
/// stream, so the tensors are read where they will be used. mlx-rs builds
/// them on the CPU stream unless told otherwise; on MLX's CUDA backend that
/// leaves every weight in managed (host-migratable) memory, and the profile
/// in bench/results/h200-2026-11-30.md showed decode kernels reading such
/// weights many times slower than from device memory. On Metal and on the
/// CPU there is one memory and this changes nothing.
fn on_default_device<T>(load: impl FnOnce() -> T) -> T {
    mlx_rs::with_stream(&mlx_rs::Stream::new(), load)
}

/// Group size of GGUF's Q4_0 / Q4_1 / Q8_0 blocks.
pub const GGUF_GROUP_SIZE: i32 = 32;

/// Where the tensors came from; changes naming and quantization defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightFormat {
    Safetensors,
    Gguf,
}

#[derive(Debug)]
pub struct Weights {
    tensors: HashMap<String, Array>,
    quantization: Option<QuantConfig>,
    format: WeightFormat,
    /// File (or folder) named in error messages.
    source: PathBuf,
    /// Quantized weights (`Linear`s, embeddings, MoE experts) are expanded to float32 as they
    /// are taken ([`Weights::set_expand_quantized`]).
    expand_quantized: bool,
}

impl Weights {
    pub fn new(
        tensors: HashMap<String, Array>,
        quantization: Option<QuantConfig>,
        format: WeightFormat,
        source: PathBuf,
    ) -> Self {
        Weights {
            tensors,
            quantization,
            format,
            source,
            expand_quantized: false,
        }
    }

    /// Loads every safetensors shard of a model folder.
    pub fn from_dir(dir: &Path, config: &ModelConfig) -> Result<Self> {
        Self::from_dir_with_progress(dir, config, &mut |_| {})
    }

    /// [`Weights::from_dir`], reading the tensors with progress reports
    /// ([`read_all`]).
    pub fn from_dir_with_progress(
        dir: &Path,
        config: &ModelConfig,
        progress: &mut dyn FnMut(LoadProgress),
    ) -> Result<Self> {
        let files = safetensors_files(dir)?;
        let mut tensors = HashMap::new();
        for file in &files {
            check_safetensors(file)?;
            let loaded = on_default_device(|| Array::load_safetensors(file)).map_err(|e| {
                ModelError::Weights {
                    path: file.clone(),
                    message: format!("cannot read safetensors: {e}"),
                }
            })?;
            tensors.extend(loaded);
        }
        tensors.retain(|name, _| !name.contains("rotary_emb.inv_freq"));
        read_all(&tensors, dir, progress)?;
        Ok(Weights::new(
            tensors,
            config.quantization.clone(),
            WeightFormat::Safetensors,
            dir.to_path_buf(),
        ))
    }

    /// Loads a GGUF file's tensors, renamed to Hugging Face names and with
    /// Llama's Q/K rows restored to Hugging Face's rotary layout.
    pub fn from_gguf(path: &Path, config: &ModelConfig) -> Result<Self> {
        Self::from_gguf_with_progress(path, config, &mut |_| {})
    }

    /// [`Weights::from_gguf`] with progress reports ([`read_all`]; MLX reads
    /// the file itself in one call before the first report).
    pub fn from_gguf_with_progress(
        path: &Path,
        config: &ModelConfig,
        progress: &mut dyn FnMut(LoadProgress),
    ) -> Result<Self> {
        let file = on_default_device(|| GgufFile::load(path)).map_err(|e| ModelError::Weights {
            path: path.to_path_buf(),
            message: format!("cannot read GGUF tensors: {e}"),
        })?;
        let arrays = file.arrays().map_err(|e| ModelError::Weights {
            path: path.to_path_buf(),
            message: format!("cannot read GGUF tensors: {e}"),
        })?;
        let mut tensors = HashMap::new();
        for (name, array) in arrays {
            let Some(hf) = hf_name_from_gguf(&name) else {
                continue;
            };
            let array = if config.model_type == "llama" {
                unpermute_llama_rows(&hf, array, config)?
            } else {
                array
            };
            tensors.insert(hf, array);
        }
        read_all(&tensors, path, progress)?;
        Ok(Weights::new(
            tensors,
            None,
            WeightFormat::Gguf,
            path.to_path_buf(),
        ))
    }

    pub fn source(&self) -> &Path {
        &self.source
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    pub fn get(&self, name: &str) -> Option<&Array> {
        self.tensors.get(name)
    }

    /// Removes and returns a required tensor.
    pub fn take(&mut self, name: &str) -> Result<Array> {
        self.tensors
            .remove(name)
            .ok_or_else(|| ModelError::MissingTensor {
                path: self.source.clone(),
                name: name.to_string(),
            })
    }

    pub fn take_optional(&mut self, name: &str) -> Option<Array> {
        self.tensors.remove(name)
    }

    /// Puts a (converted) tensor back under `name`.
    pub fn insert(&mut self, name: String, array: Array) {
        self.tensors.insert(name, array);
    }

    /// Drops the tensors whose name fails `keep` (e.g. a vision tower).
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.tensors.retain(|name, _| keep(name));
    }

    /// Every tensor name (sorted).
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.tensors.keys().cloned().collect();
        names.sort();
        names
    }

    /// Quantization of the layer at `prefix` whose `.weight` is `weight`, or
    /// `None` for a dense layer. Errors when the config and shapes disagree.
    pub fn quantization_of(&self, prefix: &str, weight: &Array) -> Result<Option<QuantParams>> {
        let Some(scales) = self.tensors.get(&format!("{prefix}.scales")) else {
            if weight.dtype() == Dtype::Uint32 {
                return Err(ModelError::MissingTensor {
                    path: self.source.clone(),
                    name: format!("{prefix}.scales"),
                });
            }
            return Ok(None);
        };
        let name = format!("{prefix}.weight");
        if weight.dtype() != Dtype::Uint32 {
            return Err(ModelError::bad_tensor(
                &self.source,
                name,
                format!(
                    "has `.scales` but dtype {:?} (quantized weights are packed uint32)",
                    weight.dtype()
                ),
            ));
        }
        if !self.tensors.contains_key(&format!("{prefix}.biases")) {
            return Err(ModelError::MissingTensor {
                path: self.source.clone(),
                name: format!("{prefix}.biases"),
            });
        }
        let configured = self
            .quantization
            .as_ref()
            .and_then(|q| q.for_module(prefix));
        let group_size = match (configured, self.format) {
            (Some(q), _) => q.group_size,
            (None, WeightFormat::Gguf) => GGUF_GROUP_SIZE,
            (None, WeightFormat::Safetensors) => {
                return Err(ModelError::bad_tensor(
                    &self.source,
                    name,
                    "is quantized but config.json has no `quantization` section",
                ))
            }
        };
        let packed_cols = i64::from(weight.dim(-1));
        let groups = i64::from(scales.dim(-1));
        let in_features = groups * i64::from(group_size);
        if in_features == 0 || (packed_cols * 32) % in_features != 0 {
            return Err(ModelError::bad_tensor(
                &self.source,
                name,
                format!(
                    "shape {:?} with scales {:?} does not fit group size {group_size}",
                    weight.shape(),
                    scales.shape()
                ),
            ));
        }
        let bits = (packed_cols * 32 / in_features) as i32;
        if ![2, 3, 4, 5, 6, 8].contains(&bits) {
            return Err(ModelError::bad_tensor(
                &self.source,
                name,
                format!("implies {bits}-bit quantization, which MLX does not support"),
            ));
        }
        if let Some(q) = configured {
            if q.bits != bits {
                return Err(ModelError::bad_tensor(
                    &self.source,
                    name,
                    format!(
                        "config says {}-bit quantization but the tensor shapes imply {bits}-bit",
                        q.bits
                    ),
                ));
            }
        }
        Ok(Some(QuantParams { group_size, bits }))
    }

    /// Whether quantized weights become dense float32
    /// as they are loaded (see [`crate::QuantizedWeights`]).
    pub fn expand_quantized(&self) -> bool {
        self.expand_quantized
    }

    pub fn set_expand_quantized(&mut self, expand: bool) {
        self.expand_quantized = expand;
    }

    /// Bytes every quantized tensor would take expanded to float32 (what
    /// [`Weights::set_expand_quantized`] costs).
    pub fn expanded_float32_bytes(&self) -> Result<u64> {
        let mut total = 0u64;
        for name in self.tensors.keys() {
            let Some(prefix) = name.strip_suffix(".scales") else {
                continue;
            };
            let Some(weight) = self.tensors.get(&format!("{prefix}.weight")) else {
                continue;
            };
            if let Some(q) = self.quantization_of(prefix, weight)? {
                let groups = self.tensors[name].size() as u64;
                total += groups * q.group_size as u64 * 4;
            }
        }
        Ok(total)
    }

    /// Names not taken by any layer (reported after loading).
    pub fn leftover(&self) -> BTreeSet<&str> {
        self.tensors.keys().map(String::as_str).collect()
    }

    /// All tensors, for conversion.
    pub fn into_tensors(self) -> HashMap<String, Array> {
        self.tensors
    }
}

/// Checks a safetensors header before MLX maps the file: the header must be
/// JSON and every tensor's byte range must lie inside the file, so a
/// truncated download fails here with its name instead of at first use.
pub fn check_safetensors(file: &Path) -> Result<()> {
    use std::io::Read;
    let bad = |message: String| ModelError::Weights {
        path: file.to_path_buf(),
        message,
    };
    let mut f = std::fs::File::open(file).map_err(|e| ModelError::io(file, e))?;
    let size = f.metadata().map_err(|e| ModelError::io(file, e))?.len();
    let mut len = [0u8; 8];
    f.read_exact(&mut len)
        .map_err(|_| bad("not a safetensors file (too short)".into()))?;
    let header_len = u64::from_le_bytes(len);
    if header_len > size.saturating_sub(8) || header_len > 100 << 20 {
        return Err(bad(format!(
            "not a safetensors file or truncated (header of {header_len} bytes in a {size}-byte file)"
        )));
    }
    let mut header = vec![0u8; header_len as usize];
    f.read_exact(&mut header)
        .map_err(|e| bad(format!("cannot read header: {e}")))?;
    let header: serde_json::Value = serde_json::from_slice(&header)
        .map_err(|e| bad(format!("safetensors header is not valid JSON: {e}")))?;
    let data_len = size - 8 - header_len;
    let end = header
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(_, t)| t.get("data_offsets")?.as_array()?.get(1)?.as_u64())
        .max()
        .unwrap_or(0);
    if end > data_len {
        return Err(bad(format!(
            "truncated: tensors need {end} bytes of data but the file has {data_len}"
        )));
    }
    Ok(())
}

/// Safetensors files of a folder: from the shard index when present.
pub fn safetensors_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    if index.exists() {
        let text = std::fs::read_to_string(&index).map_err(|e| ModelError::io(&index, e))?;
        let json: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| ModelError::config(&index, format!("not valid JSON: {e}")))?;
        let map = json
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| ModelError::config(&index, "missing `weight_map`"))?;
        let files: BTreeSet<&str> = map.values().filter_map(|v| v.as_str()).collect();
        let files: Vec<PathBuf> = files.into_iter().map(|f| dir.join(f)).collect();
        if let Some(missing) = files.iter().find(|f| !f.exists()) {
            return Err(ModelError::io(
                missing,
                "listed in model.safetensors.index.json but missing",
            ));
        }
        return Ok(files);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| ModelError::io(dir, e))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(ModelError::io(dir, "no *.safetensors weight files"));
    }
    Ok(files)
}

/// Maps a GGUF tensor name (`blk.3.attn_q.weight`) to its Hugging Face name
/// (`model.layers.3.self_attn.q_proj.weight`). `None` for tensors we do not
/// use (precomputed rope frequencies).
pub fn hf_name_from_gguf(name: &str) -> Option<String> {
    let (stem, suffix) = name.rsplit_once('.')?;
    let mapped = match stem {
        "token_embd" => "model.embed_tokens".to_string(),
        "output_norm" => "model.norm".to_string(),
        "output" => "lm_head".to_string(),
        "rope_freqs" => return None,
        _ => {
            let rest = stem.strip_prefix("blk.")?;
            let (layer, part) = rest.split_once('.')?;
            let part = match part {
                "attn_norm" => "input_layernorm",
                "ffn_norm" => "post_attention_layernorm",
                "attn_q" => "self_attn.q_proj",
                "attn_k" => "self_attn.k_proj",
                "attn_v" => "self_attn.v_proj",
                "attn_output" => "self_attn.o_proj",
                "attn_q_norm" => "self_attn.q_norm",
                "attn_k_norm" => "self_attn.k_norm",
                "ffn_gate" => "mlp.gate_proj",
                "ffn_up" => "mlp.up_proj",
                "ffn_down" => "mlp.down_proj",
                _ => return Some(name.to_string()),
            };
            format!("model.layers.{layer}.{part}")
        }
    };
    Some(format!("{mapped}.{suffix}"))
}

/// llama.cpp stores Llama's q/k projection rows interleaved per head (for
/// GPT-J style rotary); Hugging Face layout keeps the two halves apart. Rows
/// are independent under MLX quantization (groups run along columns), so the
/// same row permutation applies to `weight`, `scales`, `biases` and `bias`.
fn unpermute_llama_rows(name: &str, array: Array, config: &ModelConfig) -> Result<Array> {
    let heads = if name.contains(".self_attn.q_proj.") {
        config.num_attention_heads
    } else if name.contains(".self_attn.k_proj.") {
        config.num_key_value_heads
    } else {
        return Ok(array);
    } as i32;
    let shape = array.shape().to_vec();
    let rows = shape[0];
    if rows % (2 * heads) != 0 {
        return Err(ModelError::bad_tensor(
            "gguf",
            name,
            format!("{rows} rows cannot be split into {heads} rotary heads"),
        ));
    }
    let mut split = vec![heads, rows / heads / 2, 2];
    split.extend_from_slice(&shape[1..]);
    Ok(array.reshape(&split)?.swap_axes(1, 2)?.reshape(&shape)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gguf_names_map_to_hf() {
        assert_eq!(
            hf_name_from_gguf("blk.12.attn_q.scales").as_deref(),
            Some("model.layers.12.self_attn.q_proj.scales")
        );
        assert_eq!(
            hf_name_from_gguf("token_embd.weight").as_deref(),
            Some("model.embed_tokens.weight")
        );
        assert_eq!(
            hf_name_from_gguf("blk.0.ffn_down.biases").as_deref(),
            Some("model.layers.0.mlp.down_proj.biases")
        );
        assert_eq!(hf_name_from_gguf("rope_freqs.weight"), None);
    }

    #[test]
    fn unpermute_inverts_llama_cpp_permute() {
        // llama.cpp: w.reshape(h, 2, r/h/2, c).swapaxes(1, 2).reshape(r, c)
        let (h, r, c) = (2, 8, 3);
        let hf = Array::from_iter(0..(r * c), &[r, c]);
        let gguf = hf
            .reshape(&[h, 2, r / h / 2, c])
            .unwrap()
            .swap_axes(1, 2)
            .unwrap()
            .reshape(&[r, c])
            .unwrap();
        let raw = serde_json::json!({"model_type": "llama", "vocab_size": 10, "hidden_size": 8,
            "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
            "num_key_value_heads": 2});
        let config = ModelConfig::from_json(&raw, Path::new("c")).unwrap();
        let back =
            unpermute_llama_rows("model.layers.0.self_attn.q_proj.weight", gguf, &config).unwrap();
        assert!(back.eq_values(&hf).unwrap());
    }
}
