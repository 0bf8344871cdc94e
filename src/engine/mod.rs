//! The inference engine: one sequence's life from prompt to tokens.

pub mod sampling;
pub mod stop;
