//! Hearth core: engine, scheduler, HTTP API, benchmark harness and tools.
//!
//! Request flow (docs/architecture.md): the API validates a request and turns
//! it into a [`scheduler::Job`]; the scheduler's engine thread (the only
//! owner of MLX) batches it with the others and streams token ids back; the
//! API turns them into text ([`engine::text::TextStream`]) and SSE/JSON.
//! The CLI (`src/main.rs`), the menu-bar app and the web UI are callers.

pub mod bench;
pub mod blas;
pub mod device;
pub mod documents;
pub mod engine;
pub mod home;
pub mod hub;
pub mod scheduler;
pub mod server;
pub mod tools;
pub mod webui;
