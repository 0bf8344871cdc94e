//! Helpers of the crate's unit tests.

use mlx_rs::Array;

/// A standard-normal f32 array of `shape` from `seed`.
pub(crate) fn normal(shape: &[i32], seed: u64) -> Array {
    let key = mlx_rs::random::key(seed).unwrap();
    mlx_rs::random::normal::<f32>(shape, None, None, &key).unwrap()
}

/// Largest `|a - b|`, as f32.
pub(crate) fn max_gap(a: &Array, b: &Array) -> f32 {
    a.subtract(b)
        .unwrap()
        .abs()
        .unwrap()
        .max(None)
        .unwrap()
        .item_cast::<f32>()
}
