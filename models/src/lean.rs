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

static FOLD_ROWS: AtomicBool = AtomicBool::new(false);

/// `true`: a dense layer's product over a batch of sequences (a decode step
/// of 2 or more rows) multiplies by a view of the weight broadcast over the
/// batch, one graph node instead of four (models/src/layers.rs,
/// `TransposedViews`). Only for backends that fold such a batch into one
/// product (MLX's CUDA and Metal); MLX's CPU backend runs one product per
/// batch entry, so it stays off there (the default).
pub fn set_fold_rows(fold: bool) {
    FOLD_ROWS.store(fold, Ordering::Relaxed);
}

/// Whether batched products take the folded view (and the lean graphs are on).
pub fn fold_rows() -> bool {
    FOLD_ROWS.load(Ordering::Relaxed) && on()
}

static CARRY_INPUTS: AtomicBool = AtomicBool::new(true);

/// `true` (the default): a decode step that follows one of the same rows,
/// each one position on, takes its RoPE offsets, lengths and row index from
/// the previous step's device arrays instead of writing them from the host
/// (`DecodeStep::next` in models/src/cache.rs), and the engine feeds it the
/// previous step's sampled tokens with no host-made array around them. On
/// MLX's CUDA backend a host-written buffer migrates to the GPU when a
/// kernel first reads it (docs/cuda.md); `false` is for A/B runs.
pub fn set_carry_inputs(carry: bool) {
    CARRY_INPUTS.store(carry, Ordering::Relaxed);
}

/// Whether decode steps carry their inputs over on the device.
pub fn carry_inputs() -> bool {
    CARRY_INPUTS.load(Ordering::Relaxed)
}
