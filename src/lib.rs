//! Hearth core: engine, scheduler, API, privacy, bench, metrics.

pub mod engine;
