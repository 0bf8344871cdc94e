//! Errors of the benchmark harness.
//!
//! A run only fails for things the user must fix before any number means
//! anything (bad configuration, unreadable tokenizer, unreachable server).
//! Failures of individual requests during a run are *recorded* in the report
//! (`RequestSample::error`) instead, so one 429 or one dropped stream never
//! throws away minutes of measurements.

use std::path::PathBuf;

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The configuration is inconsistent (empty prompt set, bad target, ...).
    #[error("invalid benchmark configuration: {0}")]
    Config(String),
    /// The tokenizer file could not be read or used.
    #[error("tokenizer {path}: {message}")]
    Tokenizer { path: PathBuf, message: String },
    /// No tokenizer was given and none could be found next to the served model.
    #[error(
        "no tokenizer for target '{target}': pass --tokenizer path/to/tokenizer.json \
         (or a model folder) so prompts and generated tokens are counted with the model's own tokenizer"
    )]
    NoTokenizer { target: String },
    /// Exact-length prompt construction failed (tokenizer cannot express it).
    #[error("cannot build a prompt of exactly {wanted} tokens: {message}")]
    Prompt { wanted: usize, message: String },
    /// A server could not be reached or answered the probe with an error.
    #[error("target '{target}' ({url}): {message}")]
    Target {
        target: String,
        url: String,
        message: String,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Why one request failed; stored as text in the report.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("connect: {0}")]
    Connect(String),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("malformed HTTP response: {0}")]
    Http(String),
    #[error("server error in stream: {0}")]
    Stream(String),
    #[error("timed out after {0:.0} s")]
    Timeout(f64),
    #[error("{0}")]
    Client(String),
}
