//! A sparse MoE block's routed experts on MLX's CUDA backend, at decode
//! and prompt sizes: two kernels, the gate and up projections with the
//! SwiGLU, then the down projection, each reading every expert's weights
//! once for all the tokens that chose it.
//!
//! MLX's `gather_mm` with unsorted indices (what a decode step of a few
//! rows uses: sorting costs more ops than it saves there, see
//! `sort_threshold` in [`crate::moe`]) runs one matrix-vector product per
//! (token, expert) pair, so an expert that two tokens of the batch chose is
//! read twice. At 16 rows of a 256-expert, top-8 model the 128 pairs name
//! about 101 experts with uniform routing (more sharing with a real
//! router's skew), and the expert products are most of a step's GPU time
//! (docs/cuda.md). MLX also runs gate, up, SwiGLU and down as four graph
//! nodes per block, where these are two: a decode step is bound by MLX's
//! host time per node at few rows. A prompt pass sorts its pairs and runs
//! MLX's grouped GEMM, which reads the experts at about a fifth of the copy
//! bandwidth whatever the token count (~0.8 ms a call for a 136-token
//! pass on an H200): up to a few hundred tokens, few pairs share an expert
//! and the same kernels, which stream each expert once per
//! [`PAIR_CHUNK`] of its pairs, are the faster way (up to ~540 tokens of
//! the Qwen3.5 MoE on an H100, bench/results/h100-2026-12-06.md).
//!
//! Both kernels take a thread block per (used expert, tile of output
//! columns): the block finds its expert as the `blockIdx.y`-th smallest
//! expert named by the indices (a bitmap in shared memory; blocks past the
//! number of distinct experts exit at once), lists the pairs that chose it
//! (at most one a token: a token's experts are distinct), and each warp
//! computes `C` adjacent output columns for up to `PCH` pairs per pass
//! over the weight rows (16-byte loads streamed past L1, f32 accumulation,
//! a warp-shuffle reduction). Each pair's sum is computed the same way
//! whoever shares its expert, so results do not depend on the batch.
//! Rounding follows MLX: the gate and up products rounded to the element
//! type, then the SwiGLU as [`crate::cuda_swiglu`] rounds it.
//!
//! In force after [`enable`] for a range of token rows (Hearth enables it on
//! CUDA unless `HEARTH_CUDA_EXPERTS=off`, docs/cuda.md), for dense bf16/f16
//! experts only, per shape and element type only once both compiled forms
//! (decode and prompt sizes) matched the block's own MLX ops on this
//! device, on the block's own weights, at first use.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use mlx_rs::{ops, ops::indexing::IndexOp, Array, Dtype};

use crate::cuda_kernel::{
    half_precision, int_array, output_error, verdict, Checked, CudaKernel, LaunchDims, TemplateArg,
};
use crate::error::{ModelError, Result};

static ON: AtomicBool = AtomicBool::new(false);
static MIN_ROWS: AtomicUsize = AtomicUsize::new(1);
static MAX_ROWS_ON: AtomicUsize = AtomicUsize::new(MAX_ROWS);

/// Most token rows a call takes (more use MLX's ops): the length of a
/// block's shared list of its expert's pairs, which holds at most one pair
/// a token.
pub const MAX_ROWS: usize = 4096;

/// Most token rows of a decode-sized call: the form compiled for them
/// lists at most this many pairs of its expert (the prompt form
/// [`MAX_ROWS`]).
pub const MAX_DECODE_ROWS: usize = 16;

/// Most experts a block takes (the bitmap of used experts is E/32 words).
const MAX_EXPERTS: i32 = 4096;

/// Warps per thread block.
const WARPS: i32 = 8;

/// Pairs one pass over an expert's weight rows serves; an expert chosen by
/// more tokens takes more passes (mostly L2 hits). 8 was slower at every
/// prompt size measured (136 to 1 024 tokens: 158 registers a thread
/// against 96, one block a multiprocessor; bench/results/h100-2026-12-06.md).
const PAIR_CHUNK: i32 = 4;

/// Output columns per warp: the gate/up kernel loads 2 × 4 weight rows per
/// step, the down kernel 8.
const GLU_COLS: i32 = 4;
const DOWN_COLS: i32 = 8;

/// The kernel body. Inputs: `x` `[rows, H]` (the tokens, `XPAIR = 0`, row
/// `pair / K`) or `[pairs, H]` (one row per pair, `XPAIR = 1`), `inds`
/// `[pairs]` (uint32), `wg` and `wu` `[E, O, H]` (`wu` read only when
/// `GLU`), `dims = [pairs]`. Output `y` `[pairs, O]`: `x W^T` per pair, or
/// with `GLU` the SwiGLU of the two products.
const SOURCE: &str = r#"
    constexpr int WORDS = (E + 31) / 32;
    constexpr int VECS = H / 8;
    constexpr int NT = NW * 32;
    const int P = dims[0];
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    __shared__ unsigned used[WORDS];
    __shared__ int pairs[MAXP];
    __shared__ int npairs;
    __shared__ int expert;
    for (int i = tid; i < WORDS; i += NT) {
        used[i] = 0u;
    }
    if (tid == 0) {
        npairs = 0;
        expert = -1;
    }
    __syncthreads();
    for (int i = tid; i < P; i += NT) {
        const unsigned e = inds[i];
        if (e < (unsigned)E) {
            atomicOr(&used[e >> 5], 1u << (e & 31u));
        }
    }
    __syncthreads();
    // This block's expert: the blockIdx.y-th set bit of the bitmap.
    if (warp == 0) {
        const int slot = blockIdx.y;
        int base = 0;
        for (int w0 = 0; w0 < WORDS; w0 += 32) {
            const int wi = w0 + lane;
            const unsigned b = wi < WORDS ? used[wi] : 0u;
            const int c = __popc(b);
            int s = c;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const int t = __shfl_up_sync(0xffffffffu, s, o);
                if (lane >= o) {
                    s += t;
                }
            }
            const int before = base + s - c;
            if (slot >= before && slot < before + c) {
                unsigned v = b;
                for (int j = before; j < slot; ++j) {
                    v &= v - 1u;
                }
                expert = wi * 32 + __ffs(v) - 1;
            }
            base += __shfl_sync(0xffffffffu, s, 31);
        }
    }
    __syncthreads();
    const int e = expert;
    if (e < 0) {
        return;
    }
    for (int i = tid; i < P; i += NT) {
        if (inds[i] == (unsigned)e) {
            const int slot = atomicAdd(&npairs, 1);
            if (slot < MAXP) {
                pairs[slot] = i;
            }
        }
    }
    __syncthreads();
    const int np = min(npairs, MAXP);
    const int col0 = (blockIdx.x * NW + warp) * C;
    if (col0 >= O) {
        return;
    }
    const size_t row0 = (size_t)e * O + col0;
    const uint4* wgr = reinterpret_cast<const uint4*>(wg + row0 * H);
    const uint4* wur = reinterpret_cast<const uint4*>(wu + row0 * H);
    for (int p0 = 0; p0 < np; p0 += PCH) {
        const int pn = min(PCH, np - p0);
        const uint4* xr[PCH];
        int dst[PCH];
#pragma unroll
        for (int q = 0; q < PCH; ++q) {
            const int pair = pairs[p0 + min(q, pn - 1)];
            dst[q] = pair;
            xr[q] = reinterpret_cast<const uint4*>(x + (size_t)(XPAIR ? pair : pair / K) * H);
        }
        float ag[PCH][C];
        float au[PCH][C];
#pragma unroll
        for (int q = 0; q < PCH; ++q) {
#pragma unroll
            for (int c = 0; c < C; ++c) {
                ag[q][c] = 0.0f;
                au[q][c] = 0.0f;
            }
        }
        for (int i = lane; i < VECS; i += 32) {
            uint4 gq[C];
            uint4 uq[C];
#pragma unroll
            for (int c = 0; c < C; ++c) {
                gq[c] = hearth_ld_stream(wgr + (size_t)c * VECS + i);
                if (GLU) {
                    uq[c] = hearth_ld_stream(wur + (size_t)c * VECS + i);
                }
            }
#pragma unroll
            for (int q = 0; q < PCH; ++q) {
                if (q < pn) {
                    const uint4 xq = xr[q][i];
                    const T* xe = reinterpret_cast<const T*>(&xq);
                    float xf[8];
#pragma unroll
                    for (int j = 0; j < 8; ++j) {
                        xf[j] = static_cast<float>(xe[j]);
                    }
#pragma unroll
                    for (int c = 0; c < C; ++c) {
                        const T* ge = reinterpret_cast<const T*>(&gq[c]);
#pragma unroll
                        for (int j = 0; j < 8; ++j) {
                            ag[q][c] += static_cast<float>(ge[j]) * xf[j];
                        }
                        if (GLU) {
                            const T* ue = reinterpret_cast<const T*>(&uq[c]);
#pragma unroll
                            for (int j = 0; j < 8; ++j) {
                                au[q][c] += static_cast<float>(ue[j]) * xf[j];
                            }
                        }
                    }
                }
            }
        }
#pragma unroll
        for (int q = 0; q < PCH; ++q) {
            if (q < pn) {
#pragma unroll
                for (int c = 0; c < C; ++c) {
                    float g = ag[q][c];
                    float u = au[q][c];
#pragma unroll
                    for (int o = 16; o > 0; o >>= 1) {
                        g += __shfl_xor_sync(0xffffffffu, g, o);
                        if (GLU) {
                            u += __shfl_xor_sync(0xffffffffu, u, o);
                        }
                    }
                    if (lane == 0) {
                        T out;
                        if (GLU) {
                            const float gv = static_cast<float>(T(g));
                            const float s = static_cast<float>(T(1.0f / (1.0f + expf(-gv))));
                            const float a = static_cast<float>(T(gv * s));
                            out = T(a * static_cast<float>(T(u)));
                        } else {
                            out = T(g);
                        }
                        y[(size_t)dst[q] * O + col0 + c] = out;
                    }
                }
            }
        }
    }
"#;

/// Experts, hidden width, expert width, experts per token, element type:
/// what one check covers.
type CheckKey = (i32, i32, i32, i32, Dtype);

thread_local! {
    static KERNEL: CudaKernel = CudaKernel::new(
        "hearth_experts",
        &["x", "inds", "wg", "wu", "dims"],
        &["y"],
        SOURCE,
        crate::cuda_gemv::STREAM_HEADER,
    );
    static CHECKED: Checked<CheckKey> = const { Checked::new() };
}

/// Puts the kernels in force for calls of `min_rows..=max_rows` token
/// rows (each shape and type is checked at first use). Call only on a CUDA
/// device.
pub fn enable(min_rows: usize, max_rows: usize) {
    MIN_ROWS.store(min_rows, Ordering::Relaxed);
    MAX_ROWS_ON.store(max_rows, Ordering::Relaxed);
    ON.store(true, Ordering::Relaxed);
}

/// Turns the kernels off: MLX's gathered matmuls.
pub fn disable() {
    ON.store(false, Ordering::Relaxed);
}

/// Parses `HEARTH_CUDA_EXPERTS`: `off` (`None`), `on` (every row count the
/// kernels take) or `MIN-MAX` token rows.
pub fn parse_rows(setting: &str) -> std::result::Result<Option<(usize, usize)>, String> {
    let s = setting.trim();
    match s {
        "off" => return Ok(None),
        "on" => return Ok(Some((1, MAX_ROWS))),
        _ => {}
    }
    let bad = || format!("want on, off or MIN-MAX rows within 1-{MAX_ROWS}, not `{s}`");
    let (min, max) = s.split_once('-').ok_or_else(bad)?;
    let min: usize = min.trim().parse().map_err(|_| bad())?;
    let max: usize = max.trim().parse().map_err(|_| bad())?;
    if min == 0 || min > max || max > MAX_ROWS {
        return Err(bad());
    }
    Ok(Some((min, max)))
}

/// The routed experts' SwiGLU: `x: [.., H]` for the tokens, `indices:
/// [.., k]` (uint32) the experts each chose, `gate`/`up: [E, I, H]` and
/// `down: [E, H, I]` the stacked dense weights → `[.., k, H]`, as two
/// kernels when they are in force (enabled for this many rows, checked on
/// this device against `reference`, the block's MLX ops on the same
/// inputs); `None` otherwise, for the caller's MLX ops.
pub fn glu(
    x: &Array,
    indices: &Array,
    gate: &Array,
    up: &Array,
    down: &Array,
    reference: impl Fn(&Array, &Array) -> Result<Array>,
) -> Result<Option<Array>> {
    if !ON.load(Ordering::Relaxed) || indices.ndim() == 0 || x.ndim() == 0 {
        return Ok(None);
    }
    let dtype = x.dtype();
    let k = indices.dim(-1);
    let pairs = indices.size() as i32;
    let rows = if k > 0 { (pairs / k) as usize } else { 0 };
    let on_rows = MIN_ROWS.load(Ordering::Relaxed)..=MAX_ROWS_ON.load(Ordering::Relaxed);
    if !takes(x, indices, gate, up, down) || !on_rows.contains(&rows) {
        return Ok(None);
    }
    let key = (gate.dim(0), gate.dim(2), gate.dim(1), k, dtype);
    let ok = CHECKED
        .with(|c| c.get_or_check(key, "moe experts", || check(gate, up, down, k, reference)));
    if !ok {
        return Ok(None);
    }
    apply(x, indices, gate, up, down).map(Some)
}

/// Whether the kernels take these operands: one half-precision type, the
/// shapes of [`glu`], widths in whole 16-byte loads, at most [`MAX_ROWS`]
/// rows.
fn takes(x: &Array, indices: &Array, gate: &Array, up: &Array, down: &Array) -> bool {
    let dtype = x.dtype();
    if !half_precision(dtype)
        || [gate, up, down]
            .iter()
            .any(|w| w.dtype() != dtype || w.ndim() != 3)
        || indices.dtype() != Dtype::Uint32
    {
        return false;
    }
    let (e, i, h) = (gate.dim(0), gate.dim(1), gate.dim(2));
    let k = indices.dim(-1);
    let pairs = indices.size() as i32;
    up.shape() == gate.shape()
        && down.shape() == [e, h, i]
        && x.dim(-1) == h
        && k > 0
        && k <= e
        && e <= MAX_EXPERTS
        && h % DOWN_COLS == 0
        && i % 8 == 0
        && pairs > 0
        && pairs % k == 0
        && (pairs / k) as usize <= MAX_ROWS
        && x.size() == (pairs / k) as usize * h as usize
        && indices.shape()[..indices.ndim() - 1] == x.shape()[..x.ndim() - 1]
}

/// One of the two kernels, in its prompt form (a longer list of pairs)
/// above [`MAX_DECODE_ROWS`] rows.
fn launch(
    x: &Array,
    indices: &Array,
    wg: &Array,
    wu: &Array,
    glu: bool,
    out_shape: &[i32],
) -> Result<Array> {
    let (e, o, h) = (wg.dim(0), wg.dim(1), wg.dim(2));
    let k = indices.dim(-1);
    let pairs = indices.size() as i32;
    let listed = if (pairs / k) as usize <= MAX_DECODE_ROWS {
        MAX_DECODE_ROWS
    } else {
        MAX_ROWS
    };
    let cols = if glu { GLU_COLS } else { DOWN_COLS };
    let per_block = WARPS * cols;
    let tiles = (o + per_block - 1) / per_block;
    let template = [
        ("T", TemplateArg::Dtype(x.dtype())),
        ("E", TemplateArg::Int(e)),
        ("K", TemplateArg::Int(k)),
        ("H", TemplateArg::Int(h)),
        ("O", TemplateArg::Int(o)),
        ("C", TemplateArg::Int(cols)),
        ("NW", TemplateArg::Int(WARPS)),
        ("MAXP", TemplateArg::Int(listed as i32)),
        ("PCH", TemplateArg::Int(PAIR_CHUNK)),
        ("GLU", TemplateArg::Int(glu as i32)),
        ("XPAIR", TemplateArg::Int(!glu as i32)),
    ];
    let launch = LaunchDims {
        grid: (tiles * WARPS * 32, pairs.min(e), 1),
        block: (WARPS * 32, 1, 1),
    };
    let dims = int_array(&[pairs]);
    let mut out = KERNEL.with(|kernel| {
        kernel.apply(
            &[x, indices, wg, wu, &dims],
            &[(out_shape, x.dtype())],
            launch,
            &template,
        )
    })?;
    out.pop()
        .ok_or_else(|| ModelError::Mlx("moe experts kernel: missing output".into()))
}

fn apply(x: &Array, indices: &Array, gate: &Array, up: &Array, down: &Array) -> Result<Array> {
    let (i, h) = (gate.dim(1), gate.dim(2));
    let pairs = indices.size() as i32;
    let hidden = launch(x, indices, gate, up, true, &[pairs, i])?;
    let mut shape = indices.shape().to_vec();
    shape.push(h);
    launch(&hidden, indices, down, down, false, &shape)
}

/// Experts for `rows` tokens, `k` each, distinct per token, drawn from
/// `min(2k, e)` experts spread over all `e`: most experts are chosen by
/// several tokens (more than [`PAIR_CHUNK`] at 16 rows) and most slots of
/// the launch find no expert, the cases a real batch meets rarely.
fn shared_indices(rows: i32, k: i32, e: i32) -> Result<Array> {
    let pool = (2 * k).min(e);
    let stride = e / pool;
    let noise = mlx_rs::random::normal::<f32>(&[rows, 1, pool], None, None, None)?;
    let pick = ops::argsort_axis(&noise, -1)?.index((.., .., ..k));
    let spread = pick
        .multiply(Array::from_int(stride))?
        .add(Array::from_int(stride - 1))?;
    Ok(spread.as_dtype(Dtype::Uint32)?)
}

/// Token rows of the prompt-sized check: past [`MAX_DECODE_ROWS`], and
/// enough pairs that MLX's reference sorts them (its grouped GEMM).
const CHECK_PROMPT_ROWS: i32 = 80;

/// The kernels against the block's MLX ops on its own weights, for random
/// activations and [`shared_indices`]: 16 tokens (the decode form) and
/// [`CHECK_PROMPT_ROWS`] (the prompt form); the larger error of the two.
fn check(
    gate: &Array,
    up: &Array,
    down: &Array,
    k: i32,
    reference: impl Fn(&Array, &Array) -> Result<Array>,
) -> std::result::Result<f32, String> {
    let run = |rows: i32| -> Result<f32> {
        let (e, h) = (gate.dim(0), gate.dim(2));
        let x = mlx_rs::random::normal::<f32>(&[rows, 1, h], None, None, None)?
            .as_dtype(gate.dtype())?;
        let idx = shared_indices(rows, k, e)?;
        let ours = apply(&x, &idx, gate, up, down)?;
        output_error(&ours, &reference(&x, &idx)?)
    };
    let both = run(MAX_DECODE_ROWS as i32).and_then(|d| Ok(d.max(run(CHECK_PROMPT_ROWS)?)));
    verdict(both, "MLX's gather_mm and SwiGLU")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bf16(shape: &[i32], seed: u64) -> Array {
        crate::test_util::normal(shape, seed)
            .as_dtype(Dtype::Bfloat16)
            .unwrap()
    }

    /// Two tokens, top-2 of four experts (expert 3 chosen twice), K = 16,
    /// hidden 8: input, indices, gate, up and down weights.
    fn operands() -> (Array, Array, Array, Array, Array) {
        (
            bf16(&[2, 1, 16], 1),
            Array::from_slice(&[0u32, 3, 1, 3], &[2, 1, 2]),
            bf16(&[4, 8, 16], 2),
            bf16(&[4, 8, 16], 3),
            bf16(&[4, 16, 8], 4),
        )
    }

    /// Never enabled here (no CUDA): the caller keeps MLX's ops and the
    /// reference is not run.
    #[test]
    fn off_the_kernels_leave_mlxs_ops() {
        let (x, idx, g, u, d) = operands();
        let out = glu(&x, &idx, &g, &u, &d, |_, _| panic!("only in a check")).unwrap();
        assert!(out.is_none());
    }

    /// The operands the kernels take, and a few they refuse.
    #[test]
    fn shapes_and_types_the_kernels_take() {
        let (x, idx, g, u, d) = operands();
        assert!(takes(&x, &idx, &g, &u, &d));
        let signed = idx.as_dtype(Dtype::Int32).unwrap();
        assert!(!takes(&x, &signed, &g, &u, &d));
        let f32x = x.as_dtype(Dtype::Float32).unwrap();
        assert!(!takes(&f32x, &idx, &g, &u, &d));
        assert!(!takes(&x, &idx, &g, &u, &g), "down must be [E, H, I]");
        let wide = bf16(&[2, 1, 24], 5);
        assert!(!takes(&wide, &idx, &g, &u, &d), "x must be H wide");
        // Prompt sizes too, up to MAX_ROWS token rows.
        let rows = MAX_ROWS as i32;
        let prompt = ops::broadcast_to(idx.index((..1, .., ..)), &[rows, 1, 2]).unwrap();
        assert!(takes(&bf16(&[rows, 1, 16], 6), &prompt, &g, &u, &d));
        let many = ops::broadcast_to(idx.index((..1, .., ..)), &[rows + 1, 1, 2]).unwrap();
        let x = bf16(&[rows + 1, 1, 16], 7);
        assert!(!takes(&x, &many, &g, &u, &d), "more than MAX_ROWS rows");
    }

    #[test]
    fn row_settings_parse() {
        assert_eq!(parse_rows("off"), Ok(None));
        assert_eq!(parse_rows(" on "), Ok(Some((1, MAX_ROWS))));
        assert_eq!(parse_rows("2-16"), Ok(Some((2, 16))));
        assert_eq!(parse_rows("1-4096"), Ok(Some((1, 4096))));
        for bad in ["0-4", "5-4", "1-4097", "4", "x-y", ""] {
            assert!(parse_rows(bad).is_err(), "{bad}");
        }
    }

    /// The check's indices: k distinct experts per token, all below e,
    /// shared by several tokens, spread to the last expert's stride.
    #[test]
    fn the_checks_indices_share_experts_and_stay_in_range() {
        let (rows, k, e) = (16, 8, 256);
        let idx = shared_indices(rows, k, e).unwrap();
        assert_eq!(idx.shape(), &[rows, 1, k]);
        let v: Vec<u32> = idx.as_slice::<u32>().to_vec();
        assert!(v.iter().all(|&i| i < e as u32));
        for token in v.chunks(k as usize) {
            let mut t = token.to_vec();
            t.sort();
            t.dedup();
            assert_eq!(t.len(), k as usize, "{token:?}");
        }
        let mut distinct = v.clone();
        distinct.sort();
        distinct.dedup();
        assert!(distinct.len() <= 2 * k as usize);
        assert!(v.len() / distinct.len() > PAIR_CHUNK as usize);
        assert!(distinct.iter().any(|&i| i >= (e - e / 16) as u32));
    }
}
