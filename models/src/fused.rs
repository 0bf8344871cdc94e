//! Element-wise pieces of the forward passes that MLX fuses into one kernel
//! each, compiled once per thread.
//!
//! `mlx_rs::nn::silu` compiles its closure on every call under a fresh id and
//! erases it again when the call returns, so MLX traces and fuses the graph
//! anew each time: a few dozen times per decode step of a 40-layer model.
//! On a GPU that host work, not the kernels, bounds a one-row decode step
//! (docs/cuda.md, "Where a decode step's time goes"). The functions here keep
//! their compiled state for the life of the thread, so after the first call
//! MLX finds the fused graph in its cache by id (`shapeless`: any shape of
//! the same rank and dtype reuses it).

use std::cell::RefCell;

use mlx_rs::{error::Exception, ops, transforms::compile::compile, Array, Dtype};

use crate::error::Result;

type Graph = fn(&[Array]) -> std::result::Result<Vec<Array>, Exception>;
type Compiled = Box<dyn FnMut(&[Array]) -> std::result::Result<Vec<Array>, Exception>>;

fn compiled(graph: Graph) -> RefCell<Compiled> {
    RefCell::new(Box::new(compile(graph, true)))
}

fn f32(a: &Array) -> std::result::Result<Array, Exception> {
    a.as_dtype(Dtype::Float32)
}

thread_local! {
    static SILU: RefCell<Compiled> = compiled(|a| Ok(vec![silu_ops(&a[0])?]));
    static SWIGLU: RefCell<Compiled> =
        compiled(|a| Ok(vec![silu_ops(&a[0])?.multiply(&a[1])?]));
    static GATED_F32: RefCell<Compiled> = compiled(|a| {
        let gate = silu_ops(&a[0].as_dtype(Dtype::Float32)?)?;
        Ok(vec![gate
            .multiply(a[1].as_dtype(Dtype::Float32)?)?
            .as_dtype(a[1].dtype())?])
    });
    // [b, a, dt_bias, neg_a] → [sigmoid(b), softplus(a + dt_bias) · neg_a], f32.
    static DELTA_GATES: RefCell<Compiled> = compiled(|a| {
        let beta = f32(&ops::sigmoid(&a[0])?)?;
        let x = f32(&a[1].add(&a[2])?)?;
        let softplus = ops::logaddexp(&x, Array::from_f32(0.0))?;
        Ok(vec![beta, softplus.multiply(&a[3])?])
    });
    // [q, k, v, log_g, beta, state, q_scale, k_scale] → [y, state']; see
    // `delta_step`.
    static DELTA_STEP: RefCell<Compiled> = compiled(|a| {
        let q = f32(&a[0])?.multiply(&a[6])?.swap_axes(-1, -2)?; // [B, H, Dk, 1]
        let k = f32(&a[1])?.multiply(&a[7])?.swap_axes(-1, -2)?;
        let v = f32(&a[2])?; // [B, H, 1, Dv]
        let g = ops::exp(&a[3])?.expand_dims(-1)?; // [B, H, 1, 1]
        let beta = a[4].expand_dims(-1)?;
        let state = a[5].multiply(&g)?; // [B, H, Dk, Dv]
        let remembered = state.multiply(&k)?.sum_axis(-2, true)?; // [B, H, 1, Dv]
        let delta = v.subtract(&remembered)?.multiply(&beta)?;
        let state = state.add(k.multiply(&delta)?)?;
        let y = state.multiply(&q)?.sum_axis(-2, true)?;
        Ok(vec![y, state])
    });
}

fn silu_ops(x: &Array) -> std::result::Result<Array, Exception> {
    x.multiply(ops::sigmoid(x)?)
}

fn call(f: &'static std::thread::LocalKey<RefCell<Compiled>>, args: &[Array]) -> Result<Array> {
    let mut out = f.with_borrow_mut(|f| f(args))?;
    Ok(out.swap_remove(0))
}

/// `x · sigmoid(x)`.
pub fn silu(x: &Array) -> Result<Array> {
    call(&SILU, std::slice::from_ref(x))
}

/// `silu(gate) · up`, the SwiGLU of an MLP's hidden layer.
pub fn swiglu(gate: &Array, up: &Array) -> Result<Array> {
    call(&SWIGLU, &[gate.clone(), up.clone()])
}

/// `silu(gate) · x` computed in f32 and returned in `x`'s dtype (the gated
/// output of a Gated DeltaNet layer).
pub fn gated_f32(gate: &Array, x: &Array) -> Result<Array> {
    call(&GATED_F32, &[gate.clone(), x.clone()])
}

/// The Gated DeltaNet gates: `beta = sigmoid(b)` and the log of the decay,
/// `softplus(a + dt_bias) · neg_a`, both f32.
pub fn delta_gates(b: &Array, a: &Array, dt_bias: &Array, neg_a: &Array) -> Result<(Array, Array)> {
    let args = [b.clone(), a.clone(), dt_bias.clone(), neg_a.clone()];
    let mut out = DELTA_GATES.with_borrow_mut(|f| f(&args))?;
    let log_g = out.swap_remove(1);
    Ok((out.swap_remove(0), log_g))
}

/// One decoding token of the gated delta rule as one fused graph, the
/// element-wise form of the rule in `deltanet` (no matrix products, so MLX
/// fuses it into a few kernels). `q, k: [B, H, 1, Dk]` (any float dtype,
/// scaled here by `q_scale` / `k_scale` in f32), `v: [B, H, 1, Dv]`,
/// `log_g, beta: [B, H, 1]` and `state: [B, H, Dk, Dv]` f32. Returns
/// `y: [B, H, 1, Dv]` and the new state, f32.
#[allow(clippy::too_many_arguments)]
pub fn delta_step(
    q: &Array,
    k: &Array,
    v: &Array,
    log_g: &Array,
    beta: &Array,
    state: &Array,
    q_scale: &Array,
    k_scale: &Array,
) -> Result<(Array, Array)> {
    let args = [
        q.clone(),
        k.clone(),
        v.clone(),
        log_g.clone(),
        beta.clone(),
        state.clone(),
        q_scale.clone(),
        k_scale.clone(),
    ];
    let mut out = DELTA_STEP.with_borrow_mut(|f| f(&args))?;
    let state = out.swap_remove(1);
    Ok((out.swap_remove(0), state))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlx_rs::random;

    fn close(a: &Array, b: &Array) -> bool {
        a.all_close(b, 1e-5, 1e-6, None).unwrap()
    }

    #[test]
    fn fused_functions_equal_their_unfused_graphs() {
        let key = random::key(7).unwrap();
        let x = random::normal::<f32>(&[3, 5, 8], None, None, &key).unwrap();
        let y = random::normal::<f32>(&[3, 5, 8], None, None, &random::key(8).unwrap()).unwrap();
        let expect_silu = x.multiply(ops::sigmoid(&x).unwrap()).unwrap();
        // Twice each: the second call runs the cached graph.
        for _ in 0..2 {
            assert!(close(&silu(&x).unwrap(), &expect_silu));
            assert!(close(
                &swiglu(&x, &y).unwrap(),
                &expect_silu.multiply(&y).unwrap()
            ));
        }
        // Another shape and rank reuses / retraces without mixing them up.
        let z = random::normal::<f32>(&[4, 2], None, None, &key).unwrap();
        let expect = z.multiply(ops::sigmoid(&z).unwrap()).unwrap();
        assert!(close(&silu(&z).unwrap(), &expect));

        let xb = x.as_dtype(Dtype::Bfloat16).unwrap();
        let out = gated_f32(&y, &xb).unwrap();
        assert_eq!(out.dtype(), Dtype::Bfloat16);
        let expect = y
            .multiply(ops::sigmoid(&y).unwrap())
            .unwrap()
            .multiply(xb.as_dtype(Dtype::Float32).unwrap())
            .unwrap()
            .as_dtype(Dtype::Bfloat16)
            .unwrap();
        assert!(close(
            &out.as_dtype(Dtype::Float32).unwrap(),
            &expect.as_dtype(Dtype::Float32).unwrap()
        ));
    }
}
