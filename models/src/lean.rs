//! Fewer graph nodes per decode step.
//!
//! Every node of MLX's lazy graph costs host time twice: once to build it
//! (an FFI call, a primitive and an array object) and once in `async_eval`
//! (ordering it, running its `eval_gpu`, keeping its inputs alive until the
//! device is done). On a GPU that host time, not the kernels, bounds a decode
//! step at a few rows (docs/cuda.md), and a node that launches nothing, such as
//! a reshape or a slice, costs most of what a kernel does. So the decode path
//! avoids those where the memory is already in the right order: the
//! small-batch GEMV kernels take and return the caller's shapes, a one-token
//! attention output is reshaped once instead of transposed and reshaped, the
//! KV cache writes each step's tokens with one scatter per buffer on its own
//! shape, and the MLP's SwiGLU reads the joined gate/up product in place.
//!
//! The same graphs as before, node for node, come back with
//! [`set_plain`]`(true)`: only so that `hearth dev decode-bench` can time
//! both in one process.

use std::sync::atomic::{AtomicBool, Ordering};

static PLAIN: AtomicBool = AtomicBool::new(false);

/// `true`: build the decode graphs of before this module (more nodes, same
/// results); for benchmarks.
pub fn set_plain(plain: bool) {
    PLAIN.store(plain, Ordering::Relaxed);
}

/// Whether the lean graphs are in force (the default).
pub fn on() -> bool {
    !PLAIN.load(Ordering::Relaxed)
}
