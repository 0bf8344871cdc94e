//! A sparse MoE block's router and its weighted sum of experts, one kernel
//! each, for MLX's CUDA backend.
//!
//! With MLX's ops the router is a softmax, an `argpartition`, the slice of
//! its top k, a gather of their scores, their sum and a division (five or
//! six kernels), and the combination of the experts' outputs a multiply, a
//! sum, a sigmoid of the shared expert's gate, a multiply and an add (five).
//! At decode sizes each is a few µs of GPU time and, with a decode step
//! bound by MLX's host work per op (docs/cuda.md), a launch's worth of host
//! time; Qwen3.5's MoE has a block in every layer.
//!
//! - [`route`]: one block per token. The softmax in f32 rounded to the
//!   element type (MLX's precise softmax), then `k` rounds of a block-wide
//!   arg-max (ties to the lower expert), then the kept scores divided by
//!   their sum when the model renormalises. Experts come out best first
//!   (MLX's `argpartition` leaves them in no order; the sum over them does
//!   not care).
//! - [`combine`]: one thread per output element (a block row per token), `Σ_k y·score` rounded as
//!   MLX's multiply and sum round, plus `sigmoid(gate)·shared` when the
//!   block has a shared expert.
//!
//! In force after [`enable`] (Hearth enables them on CUDA unless
//! `HEARTH_CUDA_MOE=off`, docs/cuda.md), per shape and element type only
//! once each matched the block's own MLX ops on this device at first use.

use std::sync::atomic::{AtomicBool, Ordering};

use mlx_rs::{ops, Array, Dtype};

use crate::cuda_kernel::{
    half_precision, output_error, relative_error, verdict, Checked, CudaKernel, LaunchDims,
    TemplateArg,
};
use crate::error::{ModelError, Result};

static ON: AtomicBool = AtomicBool::new(false);

/// Most experts the router kernel takes (8 per thread at 256 threads).
pub const MAX_EXPERTS: i32 = 2048;

/// Threads per block of the router kernel.
const ROUTE_THREADS: i32 = 256;

/// Most token rows of the combining kernel: its grid's y is the row.
const MAX_ROWS: usize = 65_535;

/// Threads per block of the combining kernel.
const COMBINE_THREADS: i32 = 256;

const ROUTE_HEADER: &str = r#"
// (value, index) pairs: larger value first, then the lower index.
__device__ inline bool hearth_better(float v, int i, float w, int j) {
    return v > w || (v == w && i < j);
}
"#;

/// `logits`: `[N, E]`. Outputs `inds` `[N, K]` (uint32) and `scores`
/// `[N, K]` (T).
const ROUTE_SOURCE: &str = r#"
    constexpr int PER = (E + NT - 1) / NT;
    constexpr int NW = NT / 32;
    const int n = blockIdx.x;
    const int t = threadIdx.x;
    const int lane = t & 31;
    const int warp = t >> 5;
    const T* lr = logits + (size_t)n * E;
    __shared__ float red_v[NW];
    __shared__ int red_i[NW];
    __shared__ float kept_v[K];
    __shared__ int kept_i[K];
    float v[PER];
    float m = -INFINITY;
#pragma unroll
    for (int p = 0; p < PER; ++p) {
        const int i = t + p * NT;
        v[p] = i < E ? static_cast<float>(lr[i]) : -INFINITY;
        m = fmaxf(m, v[p]);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    }
    if (lane == 0) {
        red_v[warp] = m;
    }
    __syncthreads();
    m = red_v[0];
#pragma unroll
    for (int w = 1; w < NW; ++w) {
        m = fmaxf(m, red_v[w]);
    }
    float s = 0.0f;
#pragma unroll
    for (int p = 0; p < PER; ++p) {
        const int i = t + p * NT;
        v[p] = i < E ? expf(v[p] - m) : 0.0f;
        s += v[p];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        s += __shfl_xor_sync(0xffffffffu, s, o);
    }
    __syncthreads();
    if (lane == 0) {
        red_v[warp] = s;
    }
    __syncthreads();
    s = 0.0f;
#pragma unroll
    for (int w = 0; w < NW; ++w) {
        s += red_v[w];
    }
#pragma unroll
    for (int p = 0; p < PER; ++p) {
        const int i = t + p * NT;
        // Probabilities are >= 0: -1 is never kept.
        v[p] = i < E ? static_cast<float>(T(v[p] / s)) : -1.0f;
    }
    for (int r = 0; r < K; ++r) {
        float bv = -2.0f;
        int bi = E;
#pragma unroll
        for (int p = 0; p < PER; ++p) {
            const int i = t + p * NT;
            if (hearth_better(v[p], i, bv, bi)) {
                bv = v[p];
                bi = i;
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (hearth_better(ov, oi, bv, bi)) {
                bv = ov;
                bi = oi;
            }
        }
        __syncthreads();
        if (lane == 0) {
            red_v[warp] = bv;
            red_i[warp] = bi;
        }
        __syncthreads();
        bv = red_v[0];
        bi = red_i[0];
#pragma unroll
        for (int w = 1; w < NW; ++w) {
            if (hearth_better(red_v[w], red_i[w], bv, bi)) {
                bv = red_v[w];
                bi = red_i[w];
            }
        }
        if (t == 0) {
            kept_v[r] = bv;
            kept_i[r] = bi;
        }
#pragma unroll
        for (int p = 0; p < PER; ++p) {
            if (t + p * NT == bi) {
                v[p] = -1.0f;
            }
        }
    }
    __syncthreads();
    if (t < K) {
        float score = kept_v[t];
        if (NORM) {
            float total = 0.0f;
#pragma unroll
            for (int j = 0; j < K; ++j) {
                total += kept_v[j];
            }
            score = static_cast<float>(T(score / static_cast<float>(T(total))));
        }
        inds[(size_t)n * K + t] = static_cast<uint32_t>(kept_i[t]);
        scores[(size_t)n * K + t] = T(score);
    }
"#;

/// `y`: `[N, K, H]` the experts' outputs, `scores`: `[N, K]`, `shared`:
/// `[N, H]` and `sgate`: `[N]` (read when `SHARED`). The grid's y is the
/// row.
const COMBINE_SOURCE: &str = r#"
    const int h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h >= H) {
        return;
    }
    const int n = blockIdx.y;
    const size_t idx = (size_t)n * H + h;
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
        acc += static_cast<float>(T(static_cast<float>(y[((size_t)n * K + k) * H + h])
                                    * static_cast<float>(scores[(size_t)n * K + k])));
    }
    T r = T(acc);
    if (SHARED) {
        const float g = static_cast<float>(sgate[n]);
        const T gate = T(1.0f / (1.0f + expf(-g)));
        const T sh = T(static_cast<float>(gate) * static_cast<float>(shared[idx]));
        r = T(static_cast<float>(r) + static_cast<float>(sh));
    }
    out[idx] = r;
"#;

/// What one check covers: experts and k (router) or k and hidden size
/// (combine), renormalised / with a shared expert, element type.
type CheckKey = (i32, i32, bool, Dtype);

thread_local! {
    static ROUTE: CudaKernel = CudaKernel::new(
        "hearth_moe_route",
        &["logits"],
        &["inds", "scores"],
        ROUTE_SOURCE,
        ROUTE_HEADER,
    );
    static COMBINE: CudaKernel = CudaKernel::new(
        "hearth_moe_combine",
        &["y", "scores", "shared", "sgate"],
        &["out"],
        COMBINE_SOURCE,
        "",
    );
    static ROUTE_CHECKED: Checked<CheckKey> = const { Checked::new() };
    static COMBINE_CHECKED: Checked<CheckKey> = const { Checked::new() };
}

/// Puts the kernels in force (each shape and type is checked at first
/// use). Call only on a CUDA device.
pub fn enable() {
    ON.store(true, Ordering::Relaxed);
}

/// Turns the kernels off: MLX's ops.
pub fn disable() {
    ON.store(false, Ordering::Relaxed);
}

/// The kept experts `[.., k]` (uint32) and their scores `[.., k]`.
pub type Route = (Array, Array);

/// `logits: [.., E]` → the top `k` experts `[.., k]` (uint32) and their
/// scores `[.., k]` as one kernel when it is in force (enabled, checked on
/// this device against `reference`, the block's MLX ops); `None`
/// otherwise, for the caller's MLX ops.
pub fn route(
    logits: &Array,
    k: i32,
    normalise: bool,
    reference: impl FnOnce(&Array) -> Result<Route>,
) -> Result<Option<Route>> {
    let e = logits.dim(-1);
    let dtype = logits.dtype();
    if !ON.load(Ordering::Relaxed)
        || !half_precision(dtype)
        || !(1..=MAX_EXPERTS).contains(&e)
        || !(1..=e.min(32)).contains(&k)
    {
        return Ok(None);
    }
    let key = (e, k, normalise, dtype);
    let ok = ROUTE_CHECKED.with(|c| {
        c.get_or_check(key, "moe router", || {
            check_route(e, k, normalise, dtype, reference)
        })
    });
    if !ok {
        return Ok(None);
    }
    apply_route(logits, k, normalise).map(Some)
}

fn apply_route(logits: &Array, k: i32, normalise: bool) -> Result<Route> {
    let e = logits.dim(-1);
    let rows = (logits.size() / e as usize) as i32;
    let mut shape = logits.shape().to_vec();
    *shape.last_mut().expect("logits have an expert axis") = k;
    let template = [
        ("T", TemplateArg::Dtype(logits.dtype())),
        ("E", TemplateArg::Int(e)),
        ("K", TemplateArg::Int(k)),
        ("NT", TemplateArg::Int(ROUTE_THREADS)),
        ("NORM", TemplateArg::Int(normalise as i32)),
    ];
    let launch = LaunchDims {
        grid: (rows * ROUTE_THREADS, 1, 1),
        block: (ROUTE_THREADS, 1, 1),
    };
    let mut out = ROUTE.with(|kernel| {
        kernel.apply(
            &[logits],
            &[(&shape, Dtype::Uint32), (&shape, logits.dtype())],
            launch,
            &template,
        )
    })?;
    match (out.pop(), out.pop()) {
        (Some(scores), Some(inds)) => Ok((inds, scores)),
        _ => Err(ModelError::Mlx("moe router kernel: missing outputs".into())),
    }
}

/// Both routes' experts and scores in expert order, for comparison.
fn by_expert(route: &Route) -> Result<(Array, Array)> {
    let order = ops::argsort_axis(&route.0, -1)?;
    Ok((
        route.0.take_along_axis(&order, -1)?,
        route.1.take_along_axis(&order, -1)?,
    ))
}

/// The router kernel against the block's MLX ops for three rows of logits
/// without near-ties (a permutation of evenly spaced values 0.05 apart up
/// to 0, so the top ones are 5% apart after the softmax, far above the
/// element type's rounding): the same
/// experts, and the scores' largest relative error.
fn check_route(
    e: i32,
    k: i32,
    normalise: bool,
    dtype: Dtype,
    reference: impl FnOnce(&Array) -> Result<Route>,
) -> std::result::Result<f32, String> {
    let run = || -> Result<f32> {
        let noise = mlx_rs::random::normal::<f32>(&[3, e], None, None, None)?;
        let rank = ops::argsort_axis(&noise, -1)?.as_dtype(Dtype::Float32)?;
        let logits = rank
            .subtract(Array::from_f32((e - 1) as f32))?
            .multiply(Array::from_f32(0.05))?
            .as_dtype(dtype)?;
        let (ours_i, ours_s) = by_expert(&apply_route(&logits, k, normalise)?)?;
        let (want_i, want_s) = by_expert(&reference(&logits)?)?;
        let same = ours_i
            .as_dtype(Dtype::Int32)?
            .eq(want_i.as_dtype(Dtype::Int32)?)?
            .all(None)?
            .try_item_exact::<bool>()
            .map_err(|e| ModelError::Mlx(e.to_string()))?;
        if !same || ours_s.dtype() != want_s.dtype() {
            return Err(ModelError::Mlx("other experts kept than MLX's".into()));
        }
        relative_error(&ours_s, &want_s)
    };
    verdict(run(), "MLX's softmax and argpartition")
}

/// `y: [.., k, H]` weighted by `scores: [.., k]` and summed over `k`, plus
/// `sigmoid(gate) · out` of `shared = (gate [.., 1], out [.., H])`, as one
/// kernel when it is in force (enabled, checked on this device against
/// `reference`, the block's MLX ops); `None` otherwise.
pub fn combine(
    y: &Array,
    scores: &Array,
    shared: Option<&(Array, Array)>,
    reference: impl FnOnce(&Array, &Array, Option<&(Array, Array)>) -> Result<Array>,
) -> Result<Option<Array>> {
    let dtype = y.dtype();
    if !ON.load(Ordering::Relaxed) || !half_precision(dtype) || y.ndim() < 2 {
        return Ok(None);
    }
    let (k, h) = (y.dim(-2), y.dim(-1));
    let lead = &y.shape()[..y.ndim() - 2];
    let mut out_shape = lead.to_vec();
    out_shape.push(h);
    let mut score_shape = lead.to_vec();
    score_shape.push(k);
    let mut gate_shape = lead.to_vec();
    gate_shape.push(1);
    if scores.shape() != score_shape
        || scores.dtype() != dtype
        || shared.is_some_and(|(g, o)| {
            g.shape() != gate_shape
                || o.shape() != out_shape
                || g.dtype() != dtype
                || o.dtype() != dtype
        })
        || y.size() == 0
        || y.size() / (k as usize * h as usize) > MAX_ROWS
    {
        return Ok(None);
    }
    let key = (k, h, shared.is_some(), dtype);
    let ok = COMBINE_CHECKED.with(|c| {
        c.get_or_check(key, "moe combine", || {
            check_combine(k, h, shared.is_some(), dtype, reference)
        })
    });
    if !ok {
        return Ok(None);
    }
    apply_combine(y, scores, shared).map(Some)
}

fn apply_combine(y: &Array, scores: &Array, shared: Option<&(Array, Array)>) -> Result<Array> {
    let (k, h) = (y.dim(-2), y.dim(-1));
    let mut out_shape = y.shape()[..y.ndim() - 2].to_vec();
    out_shape.push(h);
    let rows = (y.size() / (k as usize * h as usize)) as i32;
    // Without a shared expert its inputs are never read: pass `y`.
    let (gate, out) = match shared {
        Some((g, o)) => (g, o),
        None => (y, y),
    };
    let template = [
        ("T", TemplateArg::Dtype(y.dtype())),
        ("K", TemplateArg::Int(k)),
        ("H", TemplateArg::Int(h)),
        ("SHARED", TemplateArg::Int(shared.is_some() as i32)),
    ];
    let blocks = (h + COMBINE_THREADS - 1) / COMBINE_THREADS;
    let launch = LaunchDims {
        grid: (blocks * COMBINE_THREADS, rows, 1),
        block: (COMBINE_THREADS, 1, 1),
    };
    let mut res = COMBINE.with(|kernel| {
        kernel.apply(
            &[y, scores, out, gate],
            &[(&out_shape, y.dtype())],
            launch,
            &template,
        )
    })?;
    res.pop()
        .ok_or_else(|| ModelError::Mlx("moe combine kernel: missing output".into()))
}

fn check_combine(
    k: i32,
    h: i32,
    with_shared: bool,
    dtype: Dtype,
    reference: impl FnOnce(&Array, &Array, Option<&(Array, Array)>) -> Result<Array>,
) -> std::result::Result<f32, String> {
    let run = || -> Result<f32> {
        let rand = |shape: &[i32]| -> Result<Array> {
            Ok(mlx_rs::random::normal::<f32>(shape, None, None, None)?.as_dtype(dtype)?)
        };
        let y = rand(&[3, 1, k, h])?;
        let scores = rand(&[3, 1, k])?;
        let shared = if with_shared {
            Some((rand(&[3, 1, 1])?, rand(&[3, 1, h])?))
        } else {
            None
        };
        let ours = apply_combine(&y, &scores, shared.as_ref())?;
        output_error(&ours, &reference(&y, &scores, shared.as_ref())?)
    };
    verdict(run(), "MLX's multiply, sum and shared-expert gate")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Never enabled here (no CUDA): the callers keep MLX's ops and the
    /// references are not run.
    #[test]
    fn off_the_kernels_leave_mlxs_ops() {
        let logits = crate::test_util::normal(&[2, 1, 16], 1)
            .as_dtype(Dtype::Bfloat16)
            .unwrap();
        let routed = route(&logits, 4, true, |_| panic!("only in a check")).unwrap();
        assert!(routed.is_none());
        let y = crate::test_util::normal(&[2, 1, 4, 8], 2)
            .as_dtype(Dtype::Bfloat16)
            .unwrap();
        let scores = crate::test_util::normal(&[2, 1, 4], 3)
            .as_dtype(Dtype::Bfloat16)
            .unwrap();
        let out = combine(&y, &scores, None, |_, _, _| panic!("only in a check")).unwrap();
        assert!(out.is_none());
    }

    /// The router check's logits have no ties: after the softmax and
    /// rounding to bf16, every pair of experts' scores differs.
    #[test]
    fn the_router_checks_logits_have_distinct_bf16_probabilities() {
        let noise = crate::test_util::normal(&[1, 256], 4);
        let rank = ops::argsort_axis(&noise, -1)
            .unwrap()
            .as_dtype(Dtype::Float32)
            .unwrap();
        let logits = rank
            .subtract(Array::from_f32(255.0))
            .unwrap()
            .multiply(Array::from_f32(0.05))
            .unwrap()
            .as_dtype(Dtype::Bfloat16)
            .unwrap();
        let p = ops::softmax_axis(&logits, -1, true).unwrap();
        let sorted = ops::sort_axis(p.as_dtype(Dtype::Float32).unwrap(), -1).unwrap();
        let v: Vec<f32> = sorted.as_slice::<f32>().to_vec();
        // The top 32 (the most any model keeps) are strictly increasing.
        let top = &v[v.len() - 33..];
        assert!(top.windows(2).all(|w| w[0] < w[1]), "{top:?}");
    }
}
