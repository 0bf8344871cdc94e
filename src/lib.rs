//! Hearth core: the inference engine and the tools around it.
//!
//! Request flow (see docs/architecture.md): a validated job goes to the
//! engine, which owns MLX; the engine streams tokens back as events. The CLI
//! (`src/main.rs`) and, later, the HTTP server are callers of this library.

pub mod engine;
pub mod home;
pub mod tools;
