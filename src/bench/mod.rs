//! `hearth bench`: a client-side benchmark for any OpenAI-compatible server.
//!
//! It reproduces the methodology of the published MLX server comparison so
//! Hearth can be measured against its peers (and itself) honestly:
//! - **single**: sequential streaming requests over a set of prompt lengths
//!   (TTFT, prefill tok/s, decode tok/s vs prompt length);
//! - **sweep**: 1, 2, 4, 8 streaming requests released together by a gate
//!   after all their connections are open; speed-up = aggregate wall tok/s at
//!   c / at 1 (c = 2 is the seeds' **double**);
//! - **interference**: short requests while a long prompt is prefilling.
//!
//! Every request is repeated (`repeats`, medians reported), servers are run
//! alternately repeat by repeat, prompts are synthetic text of exactly N
//! tokens under the model's tokenizer (identical for every server), and the
//! generated tokens are *counted by the harness* by tokenizing the received
//! text, then cross-checked against the server's `usage` and the number of
//! stream events; disagreements are flagged in the report. See docs/bench.md
//! for definitions and how to run comparisons.
//!
//! Library use (the web UI's one-click report):
//! ```no_run
//! # async fn demo() -> Result<(), hearth::bench::BenchError> {
//! use hearth::bench::{BenchConfig, Preset, Target};
//! let mut config = BenchConfig::preset(
//!     Preset::Quick,
//!     vec![Target::parse("hearth=http://127.0.0.1:8000", "hearth")?],
//! );
//! config.tokenizer = Some("path/to/model".into());
//! let report = hearth::bench::run_with_progress(config, |p| {
//!     eprintln!("{}/{} {} {}", p.done, p.total, p.target, p.step)
//! })
//! .await?;
//! println!("{}", report.to_markdown());
//! # Ok(()) }
//! ```
//!
//! Layout: [`sse`] parses event streams, [`http`] opens connections before
//! the gate and reads bodies, [`request`] consumes one completion stream,
//! [`prompt`] builds exact-length prompts, [`check`] cross-checks token
//! counts, [`runner`] orders the work, [`report`] summarizes and renders,
//! [`cli`] is the `hearth bench` front end.

pub mod check;
pub mod cli;
pub mod config;
pub mod error;
pub mod http;
pub mod prompt;
pub mod report;
pub mod request;
pub mod runner;
pub mod sse;
pub mod stats;

#[cfg(test)]
mod tests;

use std::{
    path::{Path, PathBuf},
    time::{Instant, SystemTime, UNIX_EPOCH},
};

pub use cli::{run_bench, BenchArgs};
pub use config::{
    Api, BenchConfig, InterferenceConfig, Preset, SingleConfig, SweepConfig, Target, Tolerance,
};
pub use error::BenchError;
pub use report::{Report, RequestSample, TargetSummary};
pub use runner::Progress;

use prompt::TokenCounter;
use report::Environment;
use runner::{resolve_target, Runner};

/// Version of the JSON report layout.
pub const REPORT_SCHEMA_VERSION: u32 = 1;

/// Run a benchmark; see [`run_with_progress`].
pub async fn run(config: BenchConfig) -> Result<Report, BenchError> {
    run_with_progress(config, |_| {}).await
}

/// Run a benchmark, calling `progress` before and after every step (one
/// scenario point on one target). Drop the future to cancel: open requests
/// are closed with it.
pub async fn run_with_progress(
    config: BenchConfig,
    progress: impl Fn(Progress) + Send + Sync,
) -> Result<Report, BenchError> {
    config.validate()?;
    let started_unix_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let clock = Instant::now();
    let mut environment = Environment::current();
    let mut targets = Vec::with_capacity(config.targets.len());
    for target in &config.targets {
        targets.push(resolve_target(target, config.api_key.as_deref()).await?);
    }
    let tokenizer_path = match &config.tokenizer {
        Some(path) => path.clone(),
        None => find_tokenizer(&targets).ok_or_else(|| BenchError::NoTokenizer {
            target: config.targets[0].name.clone(),
        })?,
    };
    let counter = TokenCounter::load(&tokenizer_path)?;
    let samples = Runner::new(&config, &targets, &counter, &progress)
        .run()
        .await?;
    environment.load_average_end = report::load_average();
    let mut report = Report {
        schema_version: REPORT_SCHEMA_VERSION,
        hearth_version: env!("CARGO_PKG_VERSION").into(),
        started_unix_s,
        duration_s: clock.elapsed().as_secs_f64(),
        environment,
        baseline: config.baseline_name().unwrap_or_default().to_owned(),
        tokenizer: counter.path().display().to_string(),
        targets: targets.into_iter().map(|t| t.info).collect(),
        config,
        summaries: Vec::new(),
        comparison: Vec::new(),
        samples,
    };
    report.summarize();
    Ok(report)
}

/// A served model id that is a local folder with a tokenizer.json.
fn find_tokenizer(targets: &[runner::ResolvedTarget]) -> Option<PathBuf> {
    targets
        .iter()
        .map(|t| Path::new(&t.info.model).join("tokenizer.json"))
        .find(|p| p.is_file())
}
