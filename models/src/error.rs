//! Errors of model loading and execution.
//!
//! Every variant says which file or tensor is at fault and what is wrong with
//! it, so a user can act on the message without reading code.

use std::path::PathBuf;

use crate::{gguf::GgufError, tokenizer::TokenizerError};

/// A failure while loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{path}: {message}")]
    Io { path: PathBuf, message: String },

    #[error("{path}: invalid model config: {message}")]
    Config { path: PathBuf, message: String },

    #[error("{path}: unsupported architecture `{arch}` (supported: {supported})")]
    UnknownArchitecture {
        path: PathBuf,
        arch: String,
        supported: String,
    },

    #[error("{path}: {message}")]
    Weights { path: PathBuf, message: String },

    #[error("missing tensor `{name}` in {path}")]
    MissingTensor { path: PathBuf, name: String },

    #[error("tensor `{name}` in {path}: {message}")]
    BadTensor {
        path: PathBuf,
        name: String,
        message: String,
    },

    #[error(transparent)]
    Gguf(#[from] GgufError),

    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),

    #[error("MLX error: {0}")]
    Mlx(String),
}

impl From<mlx_rs::error::Exception> for ModelError {
    fn from(e: mlx_rs::error::Exception) -> Self {
        ModelError::Mlx(e.what().to_string())
    }
}

impl ModelError {
    pub(crate) fn io(path: impl Into<PathBuf>, err: impl std::fmt::Display) -> Self {
        ModelError::Io {
            path: path.into(),
            message: err.to_string(),
        }
    }

    pub(crate) fn config(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        ModelError::Config {
            path: path.into(),
            message: message.into(),
        }
    }

    pub(crate) fn bad_tensor(
        path: impl Into<PathBuf>,
        name: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        ModelError::BadTensor {
            path: path.into(),
            name: name.into(),
            message: message.into(),
        }
    }
}

pub type Result<T, E = ModelError> = std::result::Result<T, E>;
