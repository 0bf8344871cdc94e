//! Model tools behind `hearth convert` and `hearth dev`.

pub mod convert;
pub mod dummy;
pub mod step_ops;
