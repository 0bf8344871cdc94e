//! Model tools behind `hearth convert` and `hearth dev`.

pub mod convert;
pub mod cuda_profiler;
pub mod decode_bench;
pub mod dummy;
pub mod prefill_bench;
pub mod step_ops;
