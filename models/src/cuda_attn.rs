//! One-token attention over rows of different lengths, for MLX's CUDA
//! backend: every batched decode step's attention where it is in force.
//!
//! A batched decode step has one query token per row, and the rows (running
//! sequences) are at different positions. MLX 0.32's CUDA SDPA has fused
//! one-token kernels only without an array mask (`supports_sdpa_vector`,
//! `use_cudnn_for_decoding`); with the mask such a batch needs, it falls back
//! to separate matmul, mask, softmax and matmul kernels in every attention
//! layer (docs/cuda.md). This kernel takes each row's length instead of a
//! mask and reads the rows' keys and values straight from the batch buffers
//! (`[rows, kv_heads, capacity, head_dim]`, see [`crate::cache::BatchKv`]).
//! On the H200 it also beat MLX's unmasked kernels (cuDNN's) for rows of one
//! length, so it takes those steps too (bench/results/h200-2026-12-01-s6.md).
//!
//! One thread block per (row, query head, chunk of keys): `head_dim / 8`
//! threads share a key (16-byte loads, f32 accumulation), scores go to shared
//! memory, softmax over the chunk, then the weighted sum of values. With one
//! chunk per row the block writes the output; with several (long rows, or few
//! rows: more blocks keep the GPU busy) each writes its partial sum with its
//! maximum and denominator, and a second kernel combines them (the split-KV
//! scheme of flash decoding). Grouped-query heads read their shared key/value
//! head, which the L2 serves after the first.
//!
//! In force after [`enable`] (`HEARTH_CUDA_ATTN`, docs/cuda.md), for each
//! head size and element type only once it has passed a check against
//! MLX's masked SDPA on this device: at the first decode step that needs it
//! (compiling just the modules the model uses, a few seconds, instead of
//! every variant at start-up).

use std::sync::atomic::{AtomicUsize, Ordering};

use mlx_rs::{fast, Array, Dtype};

use crate::cuda_kernel::{
    int_array, relative_error, verdict, Checked, CudaKernel, LaunchDims, TemplateArg,
};
use crate::error::{ModelError, Result};

/// Threads per block of both kernels unless [`set_threads`] chose others.
pub const DEFAULT_THREADS: usize = 128;

/// Thread counts a block may have (a multiple of every head size's
/// `head_dim / 8` threads per key; the shared buffers fit all of them).
pub const THREAD_CHOICES: [usize; 3] = [128, 256, 512];

/// Threads per block in force (see [`set_threads`]).
static THREADS: AtomicUsize = AtomicUsize::new(DEFAULT_THREADS);

/// Sets the threads per block (one of [`THREAD_CHOICES`]; others are
/// refused). More threads take more keys per pass: a block walks a row's
/// keys in `len / (threads / (head_dim / 8))` passes (unrolled by 4), which is
/// what one call's time is made of at short rows (23.5 µs a layer for two
/// rows of ~130 keys at 128 threads, bench/results/h200-2026-12-01-s8.md).
/// Checked like the default, at first use.
pub fn set_threads(threads: usize) -> std::result::Result<(), String> {
    if !THREAD_CHOICES.contains(&threads) {
        return Err(format!(
            "threads per block must be one of {THREAD_CHOICES:?}, not {threads}"
        ));
    }
    THREADS.store(threads, Ordering::Relaxed);
    Ok(())
}

/// Most keys one block takes (its shared score buffer: `MAX_CHUNK` floats).
pub const MAX_CHUNK: usize = 1024;

/// Chunks are multiples of this many keys.
const CHUNK_STEP: usize = 64;

/// Head sizes the kernel is compiled for (`head_dim / 8` threads per key,
/// which must divide a warp).
pub const HEAD_DIMS: [i32; 3] = [64, 128, 256];

/// 0: off; otherwise 1 + the number of blocks a step aims for (see [`split`]).
static STATE: AtomicUsize = AtomicUsize::new(0);

/// The blocks a step aims for unless told otherwise: 0, as few chunks of
/// keys as [`MAX_CHUNK`] allows. On the H200 a second kernel to combine
/// chunks cost more than the parallelism it bought below a few thousand
/// keys (bench/results/h200-2026-12-01-s6.md); long rows split anyway.
pub const DEFAULT_TARGET_BLOCKS: usize = 0;

const HEADER: &str = r#"
template <typename T, int D, int NTH, bool PARTIAL>
__device__ __forceinline__ void hearth_attn_run(
    const T* q, const T* k, const T* v, const int32_t* lens, const int32_t* dims,
    T* out, float* o_part, float* ml_part) {
    constexpr int LPK = D / 8;
    constexpr int KPP = NTH / LPK;
    constexpr int MAXC = 1024;
    const int HQ = dims[0];
    const int HKV = dims[1];
    const int CAP = dims[2];
    const int CHUNK = dims[3];
    const float scale = __int_as_float(dims[4]);
    const int bh = blockIdx.x;
    const int row = bh / HQ;
    const int head = bh - row * HQ;
    const int kvh = head / (HQ / HKV);
    const int start = blockIdx.y * CHUNK;
    const int n = min(CHUNK, lens[row] - start);
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int sub = tid % LPK;
    const int kk = tid / LPK;
    __shared__ float sc[MAXC];
    __shared__ float red[KPP * D];
    __shared__ float wred[NTH / 32];
    const size_t base = ((size_t)row * HKV + kvh) * CAP * D + (size_t)start * D + sub * 8;
    const T* kp = k + base;
    const T* vp = v + base;
    float qf[8];
    {
        const uint4 qq = *reinterpret_cast<const uint4*>(q + (size_t)bh * D + sub * 8);
        const T* qe = reinterpret_cast<const T*>(&qq);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            qf[e] = static_cast<float>(qe[e]) * scale;
        }
    }
    // Scores: LPK threads per key, KPP keys per pass (the loop is uniform
    // over the block, so every shuffle has its whole warp).
#pragma unroll 4
    for (int j0 = 0; j0 < n; j0 += KPP) {
        const int j = j0 + kk;
        float s = 0.0f;
        if (j < n) {
            const uint4 kq = *reinterpret_cast<const uint4*>(kp + (size_t)j * D);
            const T* ke = reinterpret_cast<const T*>(&kq);
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                s += qf[e] * static_cast<float>(ke[e]);
            }
        }
#pragma unroll
        for (int o = LPK / 2; o > 0; o >>= 1) {
            s += __shfl_xor_sync(0xffffffffu, s, o);
        }
        if (sub == 0 && j < n) {
            sc[j] = s;
        }
    }
    __syncthreads();
    // Softmax over the chunk: the maximum, then the weights and their sum.
    float m = -INFINITY;
    for (int j = tid; j < n; j += NTH) {
        m = fmaxf(m, sc[j]);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    }
    if (lane == 0) {
        wred[warp] = m;
    }
    __syncthreads();
    m = wred[0];
#pragma unroll
    for (int w = 1; w < NTH / 32; ++w) {
        m = fmaxf(m, wred[w]);
    }
    __syncthreads();
    float l = 0.0f;
    for (int j = tid; j < n; j += NTH) {
        const float p = expf(sc[j] - m);
        sc[j] = p;
        l += p;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        l += __shfl_xor_sync(0xffffffffu, l, o);
    }
    if (lane == 0) {
        wred[warp] = l;
    }
    __syncthreads();
    l = 0.0f;
#pragma unroll
    for (int w = 0; w < NTH / 32; ++w) {
        l += wred[w];
    }
    // Values: the same LPK threads per key, each 8 of the head's elements.
    float acc[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        acc[e] = 0.0f;
    }
#pragma unroll 4
    for (int j = kk; j < n; j += KPP) {
        const float p = sc[j];
        const uint4 vq = *reinterpret_cast<const uint4*>(vp + (size_t)j * D);
        const T* ve = reinterpret_cast<const T*>(&vq);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            acc[e] += p * static_cast<float>(ve[e]);
        }
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        red[kk * D + sub * 8 + e] = acc[e];
    }
    __syncthreads();
    for (int d = tid; d < D; d += NTH) {
        float o = 0.0f;
#pragma unroll
        for (int r = 0; r < KPP; ++r) {
            o += red[r * D + d];
        }
        if constexpr (PARTIAL) {
            o_part[((size_t)bh * gridDim.y + blockIdx.y) * D + d] = o;
        } else {
            out[(size_t)bh * D + d] = T(o / l);
        }
    }
    if constexpr (PARTIAL) {
        if (tid == 0) {
            ml_part[((size_t)bh * gridDim.y + blockIdx.y) * 2] = m;
            ml_part[((size_t)bh * gridDim.y + blockIdx.y) * 2 + 1] = l;
        }
    }
}
"#;

/// One chunk per row: the output itself.
const SOURCE: &str = r#"
    hearth_attn_run<T, D, NTH, false>(q, k, v, lens, dims, out, nullptr, nullptr);
"#;

/// Several chunks per row: partial sums, maxima and denominators.
const PARTIAL_SOURCE: &str = r#"
    hearth_attn_run<T, D, NTH, true>(q, k, v, lens, dims, nullptr, o_part, ml_part);
"#;

/// Combines a row's chunks: `sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s`.
const COMBINE_SOURCE: &str = r#"
    const int S = dims[5];
    const int bh = blockIdx.x;
    const float* ml = ml_part + (size_t)bh * S * 2;
    float mx = -INFINITY;
    for (int s = 0; s < S; ++s) {
        if (ml[2 * s + 1] > 0.0f) {
            mx = fmaxf(mx, ml[2 * s]);
        }
    }
    float den = 0.0f;
    for (int s = 0; s < S; ++s) {
        if (ml[2 * s + 1] > 0.0f) {
            den += expf(ml[2 * s] - mx) * ml[2 * s + 1];
        }
    }
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float o = 0.0f;
        for (int s = 0; s < S; ++s) {
            if (ml[2 * s + 1] > 0.0f) {
                o += expf(ml[2 * s] - mx) * o_part[((size_t)bh * S + s) * D + d];
            }
        }
        out[(size_t)bh * D + d] = T(o / den);
    }
"#;

const INPUTS: [&str; 5] = ["q", "k", "v", "lens", "dims"];

thread_local! {
    static DIRECT: CudaKernel = CudaKernel::new("hearth_attn", &INPUTS, &["out"], SOURCE, HEADER);
    static PARTIAL: CudaKernel =
        CudaKernel::new("hearth_attn_part", &INPUTS, &["o_part", "ml_part"], PARTIAL_SOURCE, HEADER);
    static COMBINE: CudaKernel =
        CudaKernel::new("hearth_attn_combine", &["o_part", "ml_part", "dims"], &["out"], COMBINE_SOURCE, "");
}

thread_local! {
    /// Head size and element type → whether the kernel passed its check.
    static CHECKED: Checked<(i32, Dtype)> = const { Checked::new() };
}

/// Whether [`decode`] is in force for heads of `head_dim` in `dtype`: the
/// kernel is enabled, takes them, and passed [`check`] for them (run here
/// on first use; a failure is logged once and leaves MLX's SDPA).
pub fn usable(head_dim: i32, dtype: Dtype) -> bool {
    if STATE.load(Ordering::Relaxed) == 0
        || !HEAD_DIMS.contains(&head_dim)
        || !crate::cuda_kernel::half_precision(dtype)
    {
        return false;
    }
    CHECKED.with(|c| {
        c.get_or_check((head_dim, dtype), "one-token attention", || {
            check(head_dim, dtype)
        })
    })
}

/// The blocks a step aims for, while the kernel is in force.
pub fn target_blocks() -> Option<usize> {
    STATE.load(Ordering::Relaxed).checked_sub(1)
}

/// Keys per block and blocks per (row, head) for `heads` (rows × query
/// heads) of up to `kv_len` keys, aiming at `target` blocks in all (0: as
/// few chunks as [`MAX_CHUNK`] allows). Chunks are multiples of 64 keys.
pub fn split(heads: usize, kv_len: usize, target: usize) -> (usize, usize) {
    let kv_len = kv_len.max(1);
    let want = if target == 0 {
        1
    } else {
        target.div_ceil(heads.max(1)).max(1)
    };
    let chunk = kv_len
        .div_ceil(want)
        .div_ceil(CHUNK_STEP)
        .saturating_mul(CHUNK_STEP)
        .clamp(CHUNK_STEP, MAX_CHUNK);
    (chunk, kv_len.div_ceil(chunk))
}

/// Attention of one query token per row: `q: [n, heads, 1, D]` against the
/// first `lens[i]` positions of row `i` of `keys`/`values` (`[rows >= n,
/// kv_heads, capacity, D]`, row-major), where `kv_len = max(lens)`, aiming
/// at `target` blocks (`None`: the target in force, see [`enable`]).
/// Returns `[n, heads, 1, D]`.
pub fn decode(
    q: &Array,
    keys: &Array,
    values: &Array,
    lens: &Array,
    kv_len: usize,
    scale: f32,
    target: Option<usize>,
) -> Result<Array> {
    let target = target
        .or_else(target_blocks)
        .ok_or_else(|| ModelError::Mlx("cuda attention is off".into()))?;
    let (n, hq, d) = (q.dim(0), q.dim(1), q.dim(3));
    let (hkv, cap) = (keys.dim(1), keys.dim(2));
    if q.dim(2) != 1 || !HEAD_DIMS.contains(&d) || hkv == 0 || hq % hkv != 0 {
        return Err(ModelError::Mlx(format!(
            "cuda attention: unsupported shapes q {:?} k {:?}",
            q.shape(),
            keys.shape()
        )));
    }
    let (chunk, splits) = split((n * hq) as usize, kv_len, target);
    let dims = int_array(&[
        hq,
        hkv,
        cap,
        chunk as i32,
        scale.to_bits() as i32,
        splits as i32,
    ]);
    let dtype = q.dtype();
    // NTH: the block's threads, the launch's and the source's one number.
    let threads = THREADS.load(Ordering::Relaxed) as i32;
    let template = [
        ("T", TemplateArg::Dtype(dtype)),
        ("D", TemplateArg::Int(d)),
        ("NTH", TemplateArg::Int(threads)),
    ];
    let blocks = n * hq;
    let launch = LaunchDims {
        grid: (blocks * threads, splits as i32, 1),
        block: (threads, 1, 1),
    };
    let inputs = [q, keys, values, lens, &dims];
    let out_shape = [n, hq, 1, d];
    if splits == 1 {
        let mut out =
            DIRECT.with(|k| k.apply(&inputs, &[(&out_shape, dtype)], launch, &template))?;
        return Ok(out.remove(0));
    }
    let s = splits as i32;
    let part = PARTIAL.with(|k| {
        k.apply(
            &inputs,
            &[
                (&[blocks, s, d], Dtype::Float32),
                (&[blocks, s, 2], Dtype::Float32),
            ],
            launch,
            &template,
        )
    })?;
    let combine = LaunchDims {
        grid: (blocks * threads, 1, 1),
        block: (threads, 1, 1),
    };
    let mut out = COMBINE.with(|k| {
        k.apply(
            &[&part[0], &part[1], &dims],
            &[(&out_shape, dtype)],
            combine,
            &template,
        )
    })?;
    Ok(out.remove(0))
}

/// Puts the kernel in force, aiming at `target_blocks` blocks per step (0:
/// fewest chunks); each head size and type is checked on first use (see
/// [`usable`]). Call only on a CUDA device.
pub fn enable(target_blocks: usize) {
    STATE.store(target_blocks.saturating_add(1), Ordering::Relaxed);
}

/// Turns the kernel off: MLX's SDPA for every decode step.
pub fn disable() {
    STATE.store(0, Ordering::Relaxed);
}

/// Checks the kernel for heads of `head_dim` in `dtype` against MLX's
/// masked SDPA on this device, with one chunk per row and with many (which
/// also compiles the three modules those need); returns the largest
/// relative error, or why it failed.
pub fn check(head_dim: i32, dtype: Dtype) -> std::result::Result<f32, String> {
    verdict(self_check(head_dim, dtype), "MLX's masked SDPA")
}

fn self_check(d: i32, dtype: Dtype) -> Result<f32> {
    use mlx_rs::ops::indexing::IndexOp;
    let (rows, hq, hkv, cap) = (4, 8, 2, 600);
    let lens = [1, 300, 537];
    let n = lens.len() as i32;
    let kv_len = *lens.iter().max().unwrap_or(&1) as usize;
    let lens_arr = Array::from_slice(&lens, &[n]);
    let mut mask = vec![false; lens.len() * kv_len];
    for (i, &l) in lens.iter().enumerate() {
        mask[i * kv_len..i * kv_len + l as usize].fill(true);
    }
    let mask = Array::from_slice(&mask, &[n, 1, 1, kv_len as i32]);
    let rand = |shape: &[i32]| -> Result<Array> {
        Ok(mlx_rs::random::normal::<f32>(shape, None, None, None)?.as_dtype(dtype)?)
    };
    let q = rand(&[n, hq, 1, d])?;
    let k = rand(&[rows, hkv, cap, d])?;
    let v = rand(&[rows, hkv, cap, d])?;
    let scale = (d as f32).powf(-0.5);
    let len = kv_len as i32;
    let (ks, vs) = (k.index((..n, .., ..len, ..)), v.index((..n, .., ..len, ..)));
    let reference = fast::scaled_dot_product_attention(&q, &ks, &vs, scale, &mask, None)?;
    let mut worst = 0.0f32;
    // One chunk per row (target 0) and many (64-key chunks).
    for target in [0, 100_000] {
        let ours = decode(&q, &k, &v, &lens_arr, kv_len, scale, Some(target))?;
        worst = worst.max(relative_error(&ours, &reference)?);
    }
    Ok(worst)
}

/// Per-call time in µs of one decode step's attention for `n` rows of
/// lengths spread evenly over `kv_len / 2 ..= kv_len` (`heads` query heads,
/// `kv_heads` key/value heads of `head_dim`, bf16, in buffers of `n + 1`
/// rows): MLX's SDPA with the mask, MLX's SDPA without one (every row at
/// `kv_len`: what a batch of one length gets), this kernel with every row
/// at `kv_len` (fewest chunks), and this kernel aiming at each of `targets`
/// blocks. `reps` calls queued back to back, one sync.
pub fn time(
    n: i32,
    heads: i32,
    kv_heads: i32,
    head_dim: i32,
    kv_len: i32,
    reps: usize,
    targets: &[usize],
) -> Result<Vec<f64>> {
    use mlx_rs::ops::indexing::IndexOp;
    let cap = (kv_len as usize).div_ceil(256) as i32 * 256;
    let rand = |shape: &[i32]| -> Result<Array> {
        Ok(mlx_rs::random::normal::<f32>(shape, None, None, None)?.as_dtype(Dtype::Bfloat16)?)
    };
    let q = rand(&[n, heads, 1, head_dim])?;
    let k = rand(&[n + 1, kv_heads, cap, head_dim])?;
    let v = rand(&[n + 1, kv_heads, cap, head_dim])?;
    let lens: Vec<i32> = (0..n)
        .map(|i| kv_len - (kv_len / 2) * i / (n - 1).max(1))
        .collect();
    let mut mask = vec![false; (n * kv_len) as usize];
    for (i, &l) in lens.iter().enumerate() {
        let row = i * kv_len as usize;
        mask[row..row + l as usize].fill(true);
    }
    let mask = Array::from_slice(&mask, &[n, 1, 1, kv_len]);
    let lens = Array::from_slice(&lens, &[n]);
    let full = Array::from_slice(&vec![kv_len; n as usize], &[n]);
    let (ks, vs) = (
        k.index((..n, .., ..kv_len, ..)),
        v.index((..n, .., ..kv_len, ..)),
    );
    for a in [&q, &k, &v, &mask, &lens, &full] {
        a.eval()?;
    }
    let scale = (head_dim as f32).powf(-0.5);
    let timed = |f: &dyn Fn() -> Result<Array>| -> Result<f64> {
        // Chained so that MLX cannot drop any call: each adds to the sum.
        let mut acc = f()?;
        acc.eval()?;
        let start = std::time::Instant::now();
        for _ in 0..reps {
            acc = acc.add(f()?)?;
        }
        acc.eval()?;
        Ok(start.elapsed().as_secs_f64() * 1e6 / reps as f64)
    };
    let mut out = vec![
        timed(&|| {
            Ok(fast::scaled_dot_product_attention(
                &q, &ks, &vs, scale, &mask, None,
            )?)
        })?,
        timed(&|| {
            Ok(fast::scaled_dot_product_attention(
                &q, &ks, &vs, scale, None, None,
            )?)
        })?,
        timed(&|| decode(&q, &k, &v, &full, kv_len as usize, scale, Some(0)))?,
    ];
    for &target in targets {
        out.push(timed(&|| {
            decode(&q, &k, &v, &lens, kv_len as usize, scale, Some(target))
        })?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_aims_at_the_target_in_64_key_chunks() {
        // Fewest chunks: one up to MAX_CHUNK keys, then MAX_CHUNK each.
        assert_eq!(split(64, 384, 0), (384, 1));
        assert_eq!(split(64, 384, DEFAULT_TARGET_BLOCKS), (384, 1));
        assert_eq!(split(64, 1, 0), (64, 1));
        assert_eq!(split(64, 5000, 0), (1024, 5));
        // 2 rows x 32 heads aiming at 264 blocks: 5 chunks wanted, 77 keys
        // each, rounded up to 128: 3 chunks.
        assert_eq!(split(64, 384, 264), (128, 3));
        // Enough heads already: one chunk.
        assert_eq!(split(512, 384, 264), (384, 1));
        // Never below 64 keys or above MAX_CHUNK.
        assert_eq!(split(1, 100, 100_000), (64, 2));
        assert_eq!(split(1, 100_000, 2), (1024, 98));
        // Every key is in exactly one chunk.
        for (heads, len, target) in [(3, 1000, 264), (7, 65, 264), (64, 4097, 0)] {
            let (chunk, splits) = split(heads, len, target);
            assert!(chunk % 64 == 0 && chunk <= MAX_CHUNK);
            assert!(chunk * splits >= len && chunk * (splits - 1) < len);
        }
    }

    #[test]
    fn off_until_enabled() {
        // No CUDA device in the tests: nothing enables it, so the engine's
        // decode steps keep MLX's SDPA (and the CPU parity tests cover that
        // path).
        assert!(!usable(128, Dtype::Bfloat16));
        assert_eq!(target_blocks(), None);
    }

    #[test]
    fn threads_per_block_take_only_the_compiled_choices() {
        for bad in [0, 100, 1024] {
            assert!(set_threads(bad).is_err(), "{bad}");
        }
        assert_eq!(THREADS.load(Ordering::Relaxed), DEFAULT_THREADS);
        assert!(set_threads(256).is_ok());
        assert_eq!(THREADS.load(Ordering::Relaxed), 256);
        set_threads(DEFAULT_THREADS).unwrap();
    }
}
