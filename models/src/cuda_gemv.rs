//! Small-batch matrix-vector kernels for MLX's CUDA backend.
//!
//! Decoding multiplies a few activation rows (one per running sequence) by
//! every weight matrix, so a step reads all weights once whatever the batch:
//! it is bound by memory bandwidth, and batching should be nearly free. On
//! the H200, MLX 0.32's CUDA matmul uses a matrix-vector kernel for one row
//! and cuBLAS for two or more; at two rows that takes up to twice as long
//! per matrix (bench/results/h200-*.md), so a batch of two decoded barely
//! faster than one. Three kernels of ours read each weight row once for all
//! rows:
//!
//! - [`Kernel::Warp`]: one warp per output column, 16-byte loads, f32
//!   accumulation, a warp-shuffle reduction (up to 8 rows).
//! - [`Kernel::Warp4`]: the same for four adjacent columns per warp, so the
//!   activations are loaded once per four columns (up to 8 rows; Hearth's
//!   default route uses it at 2–4 rows).
//! - [`Kernel::Mma`]: tensor cores (`mma.sync.m16n8k16`, f32 accumulators),
//!   16 output columns per block of 8 warps that split K (up to 16 rows).
//! - [`Kernel::Mmas`]: the same tile with its loads pipelined through a ring
//!   of registers, in a few variants (written for the large matrices at
//!   5–16 rows; in no default route until measured, docs/cuda.md).
//!
//! Which one runs is a [`Route`] table: a kernel per row range, optionally
//! only for weights up to a size (cuBLAS is as fast or faster on large
//! matrices from three rows on). All are JIT-compiled by MLX (NVRTC)
//! through mlx-c's custom CUDA kernel API and used only after [`enable`]
//! checked them against MLX's own matmul on this device
//! (`HEARTH_CUDA_GEMV`, docs/cuda.md). Everywhere else (CPU, Metal) the plain
//! matmul runs.

use std::sync::RwLock;

use mlx_rs::{Array, Dtype};

use crate::cuda_kernel::{int_array, relative_error, verdict, CudaKernel, LaunchDims, TemplateArg};
use crate::error::Result;

/// Most activation rows the kernels take (more use MLX's GEMM).
pub const MAX_ROWS: usize = 16;

/// Most rows the warp-per-column kernel takes (its activation loads grow
/// with the rows; the tensor-core kernel has no such limit below 16).
const WARP_KERNEL_MAX_ROWS: usize = 8;

/// The routes in force (empty: MLX's matmul everywhere).
static ROUTES: RwLock<Vec<Route>> = RwLock::new(Vec::new());

/// Products of `rows` activation rows go through `kernel` when `rows` is in
/// `min_rows..=max_rows` and the weight holds at most `max_weight_mb` MiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub kernel: Kernel,
    pub min_rows: usize,
    pub max_rows: usize,
    pub max_weight_mb: Option<usize>,
}

impl Route {
    /// Parses `KERNEL:MIN-MAX[:MAX_MB]` entries separated by commas (or `+`,
    /// which survives lists that are themselves split on commas), e.g.
    /// `warp:1-2,mma:3-16:32`; a bare `MIN-MAX` means the warp kernel.
    /// `off` is the empty table.
    pub fn parse_list(s: &str) -> std::result::Result<Vec<Route>, String> {
        let s = s.trim();
        if s == "off" || s.is_empty() {
            return Ok(Vec::new());
        }
        s.split([',', '+'])
            .map(|e| Route::parse(e.trim()))
            .collect()
    }

    fn parse(entry: &str) -> std::result::Result<Route, String> {
        let bad =
            || format!("bad route `{entry}` (want KERNEL:MIN-MAX[:MAX_MB], e.g. mma:3-16:32)");
        let parts: Vec<&str> = entry.split(':').collect();
        let (kernel, rows, mb) = match parts.as_slice() {
            [rows] => (Kernel::Warp, *rows, None),
            [k, rows] => (Kernel::parse(k).ok_or_else(bad)?, *rows, None),
            [k, rows, mb] => (
                Kernel::parse(k).ok_or_else(bad)?,
                *rows,
                Some(mb.parse::<usize>().map_err(|_| bad())?),
            ),
            _ => return Err(bad()),
        };
        let (min, max) = rows.split_once('-').ok_or_else(bad)?;
        let min_rows: usize = min.trim().parse().map_err(|_| bad())?;
        let max_rows: usize = max.trim().parse().map_err(|_| bad())?;
        if min_rows == 0 || min_rows > max_rows || max_rows > kernel.max_rows() {
            return Err(format!(
                "route `{entry}`: rows must be within 1..={} for the {} kernel",
                kernel.max_rows(),
                kernel.name()
            ));
        }
        Ok(Route {
            kernel,
            min_rows,
            max_rows,
            max_weight_mb: mb,
        })
    }

    /// Every row count `kernel` takes, any weight size.
    pub fn all(kernel: Kernel) -> Route {
        Route {
            kernel,
            min_rows: 1,
            max_rows: kernel.max_rows(),
            max_weight_mb: None,
        }
    }

    fn matches(&self, rows: usize, n: i32, k: i32, dtype: Dtype) -> bool {
        let bytes = n as usize * k as usize * 2;
        (self.min_rows..=self.max_rows).contains(&rows)
            && self.kernel.takes(rows, k)
            && crate::cuda_kernel::half_precision(dtype)
            && self.max_weight_mb.is_none_or(|mb| bytes <= mb << 20)
    }
}

/// The first route of `routes` that takes this product.
pub fn pick(routes: &[Route], rows: usize, n: i32, k: i32, dtype: Dtype) -> Option<Kernel> {
    routes
        .iter()
        .find(|r| r.matches(rows, n, k, dtype))
        .map(|r| r.kernel)
}

/// Warps per thread block (both kernels).
const WARPS: i32 = 8;

/// Output columns (weight rows) per block of the tensor-core kernel: the M
/// of one `mma.m16n8k16`.
const MMA_COLS: i32 = 16;

/// Output columns per warp of [`Kernel::Warp4`] (`C` in its source).
const WARP4_COLS: i32 = 4;

/// Which kernel computes the product.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// One warp per output column, CUDA-core FMAs (up to 8 rows).
    Warp,
    /// Tensor cores (`mma.sync.m16n8k16`): a block of 8 warps per 16 output
    /// columns, the reduction dimension split among the warps.
    Mma,
    /// As [`Kernel::Warp`], but each warp computes four adjacent output
    /// columns from one load of the activations (up to 8 rows).
    Warp4,
    /// [`Kernel::Warp4`] with K split among 2, 4 or 8 warps of a block
    /// (`Split4(s)`; 0: as many as a matrix with few output columns needs
    /// to fill the GPU, see [`auto_split`]), partial sums added in shared
    /// memory (up to 8 rows).
    Split4(u8),
    /// [`Kernel::Mma`]'s tile with the loads pipelined through a ring of
    /// registers (`MMAS_SOURCE`); the index picks warps per block, ring
    /// depth and L2 prefetch from [`MMAS_VARIANTS`] (up to 16 rows).
    Mmas(u8),
}

/// The pipelined tensor-core kernel's variants: (name, warps per block,
/// steps in flight per warp, L2 256-byte prefetch).
const MMAS_VARIANTS: [(&str, i32, i32, i32); 5] = [
    ("mmas", 4, 4, 0),
    ("mmas8", 8, 4, 0),
    ("mmasd2", 4, 2, 0),
    ("mmasd8", 4, 8, 0),
    ("mmasp", 4, 4, 1),
];

/// Warps a [`Kernel::Split4`] launch of automatic split aims at: 4 096
/// is ~31 per SM of an H200 (132 SMs), where one warp per four columns of
/// an 8B model's down projection gives 1 024.
const SPLIT_TARGET_WARPS: i32 = 4096;

/// The K split of [`Kernel::Split4`]`(0)` for `n` output columns: the
/// fewest warps per group of four columns, of 1, 2, 4 or 8, that give the
/// launch [`SPLIT_TARGET_WARPS`] warps.
pub fn auto_split(n: i32) -> i32 {
    let groups = (n + WARP4_COLS - 1) / WARP4_COLS;
    let mut s = 1;
    while s < WARPS && groups * s < SPLIT_TARGET_WARPS {
        s *= 2;
    }
    s
}

impl Kernel {
    pub const ALL: [Kernel; 4] = [Kernel::Warp, Kernel::Warp4, Kernel::Split4(0), Kernel::Mma];

    /// The fixed splits [`Kernel::parse`] takes besides [`Kernel::ALL`].
    const FIXED_SPLITS: [Kernel; 3] = [Kernel::Split4(2), Kernel::Split4(4), Kernel::Split4(8)];

    /// Every variant of the pipelined tensor-core kernel.
    pub const MMAS: [Kernel; 5] = [
        Kernel::Mmas(0),
        Kernel::Mmas(1),
        Kernel::Mmas(2),
        Kernel::Mmas(3),
        Kernel::Mmas(4),
    ];

    /// Warps per thread block.
    fn warps(self) -> i32 {
        match self {
            Kernel::Mmas(v) => MMAS_VARIANTS[usize::from(v)].1,
            _ => WARPS,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kernel::Warp => "warp",
            Kernel::Mma => "mma",
            Kernel::Warp4 => "warp4",
            Kernel::Split4(2) => "split4x2",
            Kernel::Split4(4) => "split4x4",
            Kernel::Split4(8) => "split4x8",
            Kernel::Split4(_) => "split4",
            Kernel::Mmas(v) => MMAS_VARIANTS[usize::from(v)].0,
        }
    }

    /// `warp`, `warp4`, `split4` (automatic split), `split4x2`, `split4x4`,
    /// `split4x8` or `mma` (its [`name`](Kernel::name)).
    pub fn parse(s: &str) -> Option<Kernel> {
        Kernel::ALL
            .into_iter()
            .chain(Kernel::FIXED_SPLITS)
            .chain(Kernel::MMAS)
            .find(|k| k.name() == s)
    }

    pub fn max_rows(self) -> usize {
        match self {
            Kernel::Warp | Kernel::Warp4 | Kernel::Split4(_) => WARP_KERNEL_MAX_ROWS,
            Kernel::Mma | Kernel::Mmas(_) => MAX_ROWS,
        }
    }

    /// Warps that share a group of output columns, splitting K (1 but for
    /// [`Kernel::Split4`]).
    fn split(self, n: i32) -> i32 {
        match self {
            Kernel::Split4(0) => auto_split(n),
            Kernel::Split4(s) => i32::from(s),
            _ => 1,
        }
    }

    /// Whether the kernel takes `rows` activation rows of width `k` (16-byte
    /// loads; the tensor-core kernel reads 32 elements of K per step).
    fn takes(self, rows: usize, k: i32) -> bool {
        let step = match self {
            Kernel::Warp | Kernel::Warp4 | Kernel::Split4(_) => 8,
            Kernel::Mma | Kernel::Mmas(_) => 32,
        };
        (1..=self.max_rows()).contains(&rows) && k > 0 && k % step == 0
    }

    /// Output columns one thread block computes for `n` in all.
    fn cols_per_block(self, n: i32) -> i32 {
        match self {
            Kernel::Warp => WARPS,
            Kernel::Warp4 | Kernel::Split4(_) => WARPS / self.split(n) * WARP4_COLS,
            Kernel::Mma | Kernel::Mmas(_) => MMA_COLS,
        }
    }
}

/// Device helper of the tensor-core kernel: `d += a b` for one
/// `m16n8k16` tile, bf16 or f16 operands, f32 accumulators.
const MMA_HEADER: &str = r#"
template <typename T> struct HearthMma;
#define HEARTH_MMA(TYPE, PTX_TYPE)                                                        \
    template <> struct HearthMma<TYPE> {                                                  \
        static __device__ __forceinline__ void run(float* d, unsigned a0, unsigned a1,    \
                                                   unsigned a2, unsigned a3, unsigned b0, \
                                                   unsigned b1) {                         \
            asm("mma.sync.aligned.m16n8k16.row.col.f32." PTX_TYPE "." PTX_TYPE ".f32 "    \
                "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                \
                : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                          \
                : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));                  \
        }                                                                                 \
    };
HEARTH_MMA(__nv_bfloat16, "bf16")
HEARTH_MMA(__half, "f16")
#undef HEARTH_MMA

// One block's operands: 16 weight rows from `col0` (lane `g + 4c`: rows g
// and g + 8, 16-byte chunk c of each 32-element step; rows past N read the
// last one) and NT tiles of 8 activation rows (row t * 8 + g, chunk c).
template <typename T, int ROWS, int NT> struct HearthMmaTile {
    const uint4* w0;
    const uint4* w1;
    const uint4* xp[NT];
    bool xok[NT];
    __device__ __forceinline__ HearthMmaTile(const T* x, const T* w, int N, int K, int col0,
                                             int lane) {
        const int g = lane >> 2;
        const int c = lane & 3;
        w0 = reinterpret_cast<const uint4*>(w + (size_t)min(col0 + g, N - 1) * K) + c;
        w1 = reinterpret_cast<const uint4*>(w + (size_t)min(col0 + g + 8, N - 1) * K) + c;
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            const int xr = t * 8 + g;
            xok[t] = xr < ROWS;
            xp[t] = reinterpret_cast<const uint4*>(x + (size_t)(xok[t] ? xr : 0) * K) + c;
        }
    }
};

// Adds the NW warps' accumulators of a block in shared memory and writes
// its 16 columns of every row (accumulator i of tile t in lane l holds row
// t * 8 + 2 (l & 3) + (i & 1), column col0 + (l >> 2) + (i & 2 ? 8 : 0)).
template <typename T, int ROWS, int NT, int NW>
static __device__ __forceinline__ void hearth_mma_store(const float (&acc)[NT][4], T* y, int N,
                                                        int col0) {
    __shared__ float part[NW][NT * 4][32];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
#pragma unroll
    for (int t = 0; t < NT; ++t) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            part[warp][t * 4 + i][lane] = acc[t][i];
        }
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < (NT * 4 + NW - 1) / NW; ++r) {
        const int e = threadIdx.x + r * NW * 32;
        if (e >= NT * 4 * 32) {
            break;
        }
        const int slot = e >> 5;
        const int ln = e & 31;
        float v = 0.0f;
#pragma unroll
        for (int q = 0; q < NW; ++q) {
            v += part[q][slot][ln];
        }
        const int t = slot >> 2;
        const int i = slot & 3;
        const int m = t * 8 + 2 * (ln & 3) + (i & 1);
        const int col = col0 + (ln >> 2) + ((i & 2) ? 8 : 0);
        if (m < ROWS && col < N) {
            y[(size_t)m * N + col] = T(v);
        }
    }
}
"#;

/// Device helper of [`WARP4_SOURCE`], [`MMAS_SOURCE`] and the MoE experts'
/// kernels: 16 bytes of a weight row, read once, through the non-coherent
/// path and not kept in L1, which then holds the activations that every warp
/// of the block reads. `PF = 1` also asks L2 for the 256 bytes around them
/// (a block's other warps read the neighbouring pieces next).
pub(crate) const STREAM_HEADER: &str = r#"
template <int PF = 0> static __device__ __forceinline__ uint4 hearth_ld_stream(const uint4* p) {
    uint4 v;
    if (PF) {
        asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n"
            : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    } else {
        asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
            : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    }
    return v;
}
"#;

/// `y = x W^T` on tensor cores for `ROWS <= 16` activation rows. The weight
/// is the MMA's A operand (16 output columns by 16 of K), the activations
/// its B operand (16 of K by 8 rows; two tiles above 8 rows). The K order
/// inside one MMA is free as long as A and B agree, so each thread loads 8
/// consecutive elements (16 bytes) of a weight row and of an activation row
/// and feeds them to two MMAs: elements 0-3 to the first (k slots 2c, 2c+1,
/// 2c+8, 2c+9 of thread c of its quad), elements 4-7 to the second. A warp
/// reads 64 contiguous bytes of each of its 16 weight rows per step; the 8
/// warps of a block take interleaved 32-element steps of K and add their
/// partial sums in shared memory at the end.
const MMA_SOURCE: &str = r#"
    constexpr int NT = (ROWS + 7) / 8;
    // NW (warps per block) comes from the launch as a template argument.
    constexpr int U = 4;
    const int N = dims[0];
    const int K = dims[1];
    const int warp = threadIdx.x >> 5;
    const int col0 = blockIdx.x * 16;
    const HearthMmaTile<T, ROWS, NT> tile(x, w, N, K, col0, threadIdx.x & 31);
    const uint4* w0 = tile.w0;
    const uint4* w1 = tile.w1;
    // One accumulator set per unrolled step: independent MMA chains, so
    // the loads of a step need not wait for the previous step's MMAs.
    float acc[U][NT][4];
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
        for (int t = 0; t < NT; ++t) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                acc[u][t][i] = 0.0f;
            }
        }
    }
    const uint4 zero = {0u, 0u, 0u, 0u};
    const int steps = K / 32;
    // Main loop: U steps of 32 elements per warp and iteration, every load
    // issued before the first MMA uses one (no bounds checks inside).
    int s0 = warp;
    for (; s0 + (U - 1) * NW < steps; s0 += NW * U) {
        uint4 a0[U], a1[U], b[U][NT];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int s = s0 + u * NW;
            a0[u] = w0[s * 4];
            a1[u] = w1[s * 4];
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                b[u][t] = tile.xp[t][s * 4];
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                const uint4 bt = tile.xok[t] ? b[u][t] : zero;
                HearthMma<T>::run(acc[u][t], a0[u].x, a1[u].x, a0[u].y, a1[u].y, bt.x, bt.y);
                HearthMma<T>::run(acc[u][t], a0[u].z, a1[u].z, a0[u].w, a1[u].w, bt.z, bt.w);
            }
        }
    }
    // The rest: fewer than U steps left for this warp.
    for (; s0 < steps; s0 += NW) {
        const uint4 a0 = w0[s0 * 4];
        const uint4 a1 = w1[s0 * 4];
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            const uint4 bt = tile.xok[t] ? tile.xp[t][s0 * 4] : zero;
            HearthMma<T>::run(acc[0][t], a0.x, a1.x, a0.y, a1.y, bt.x, bt.y);
            HearthMma<T>::run(acc[0][t], a0.z, a1.z, a0.w, a1.w, bt.z, bt.w);
        }
    }
    float sum[NT][4];
#pragma unroll
    for (int t = 0; t < NT; ++t) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            sum[t][i] = 0.0f;
#pragma unroll
            for (int u = 0; u < U; ++u) {
                sum[t][i] += acc[u][t][i];
            }
        }
    }
    hearth_mma_store<T, ROWS, NT, NW>(sum, y, N, col0);
"#;

/// [`MMA_SOURCE`]'s tile (16 output columns a block, the block's `NW` warps
/// taking interleaved 32-element steps of K, the same fragments) with the
/// loads pipelined: each warp keeps `D` steps of weights and activations in
/// flight in a ring of registers, refilling a slot with the step `D` ahead
/// as soon as its MMAs have read it, so the memory never waits for a batch
/// of MMAs and a warp's loads never drain until its last steps. Weights
/// are streamed past L1 (which keeps the activations every warp reads).
const MMAS_SOURCE: &str = r#"
    constexpr int NT = (ROWS + 7) / 8;
    const int N = dims[0];
    const int K = dims[1];
    const int warp = threadIdx.x >> 5;
    const int col0 = blockIdx.x * 16;
    const HearthMmaTile<T, ROWS, NT> tile(x, w, N, K, col0, threadIdx.x & 31);
    const uint4* w0 = tile.w0;
    const uint4* w1 = tile.w1;
    float acc[NT][4];
#pragma unroll
    for (int t = 0; t < NT; ++t) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            acc[t][i] = 0.0f;
        }
    }
    const uint4 zero = {0u, 0u, 0u, 0u};
    const int steps = K / 32;
    uint4 ra0[D], ra1[D], rb[D][NT];
#pragma unroll
    for (int u = 0; u < D; ++u) {
        const int s = warp + u * NW;
        const bool ok = s < steps;
        ra0[u] = ok ? hearth_ld_stream<PF>(w0 + s * 4) : zero;
        ra1[u] = ok ? hearth_ld_stream<PF>(w1 + s * 4) : zero;
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            rb[u][t] = (ok && tile.xok[t]) ? tile.xp[t][s * 4] : zero;
        }
    }
    for (int s0 = warp; s0 < steps; s0 += D * NW) {
#pragma unroll
        for (int u = 0; u < D; ++u) {
            const int s = s0 + u * NW;
            if (s < steps) {
#pragma unroll
                for (int t = 0; t < NT; ++t) {
                    HearthMma<T>::run(acc[t], ra0[u].x, ra1[u].x, ra0[u].y, ra1[u].y, rb[u][t].x, rb[u][t].y);
                    HearthMma<T>::run(acc[t], ra0[u].z, ra1[u].z, ra0[u].w, ra1[u].w, rb[u][t].z, rb[u][t].w);
                }
                const int sn = s + D * NW;
                if (sn < steps) {
                    ra0[u] = hearth_ld_stream<PF>(w0 + sn * 4);
                    ra1[u] = hearth_ld_stream<PF>(w1 + sn * 4);
#pragma unroll
                    for (int t = 0; t < NT; ++t) {
                        rb[u][t] = tile.xok[t] ? tile.xp[t][sn * 4] : zero;
                    }
                }
            }
        }
    }
    hearth_mma_store<T, ROWS, NT, NW>(acc, y, N, col0);
"#;

const SOURCE: &str = r#"
    const int N = dims[0];
    const int VECS = dims[1] / 8;
    const int lane = threadIdx.x & 31;
    const int col = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (col >= N) {
        return;
    }
    const uint4* wrow = reinterpret_cast<const uint4*>(w) + (size_t)col * VECS;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    float acc[ROWS];
#pragma unroll
    for (int m = 0; m < ROWS; ++m) {
        acc[m] = 0.0f;
    }
#pragma unroll 4
    for (int i = lane; i < VECS; i += 32) {
        const uint4 wq = wrow[i];
        const T* we = reinterpret_cast<const T*>(&wq);
        float wf[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            wf[j] = static_cast<float>(we[j]);
        }
#pragma unroll
        for (int m = 0; m < ROWS; ++m) {
            const uint4 xq = xv[m * VECS + i];
            const T* xe = reinterpret_cast<const T*>(&xq);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                acc[m] += wf[j] * static_cast<float>(xe[j]);
            }
        }
    }
#pragma unroll
    for (int m = 0; m < ROWS; ++m) {
        float v = acc[m];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            v += __shfl_xor_sync(0xffffffffu, v, o);
        }
        if (lane == 0) {
            y[(size_t)m * N + col] = T(v);
        }
    }
"#;

/// `y = x W^T` on CUDA cores for `ROWS <= 8`: `C` adjacent output columns
/// per group of `S = dims[2]` warps (`S` divides the block's `NW` warps).
/// Lane `l` of slice `s` of a group takes the 16-byte chunks `32 s + l`,
/// `32 (s + S) + l`, ... of K: it loads each chunk of the activation rows
/// once and multiplies it with the same chunk of all `C` weight rows
/// (streamed past L1), so the activations are read once per `C` columns
/// instead of once per column. f32 accumulators, a warp-shuffle reduction
/// per (row, column); lane `m C + c` holds output (m, c). With `S = 1` it
/// writes it; otherwise the group's `S` partial sums meet in shared memory.
/// Splitting K gives a matrix with few output columns (the 4096 of an 8B
/// model's down and o projections: 128 blocks of one group per warp on
/// 132 SMs) enough warps in flight to keep the memory busy.
const WARP4_SOURCE: &str = r#"
    const int N = dims[0];
    const int VECS = dims[1] / 8;
    const int S = dims[2];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int groups = NW / S;
    const int slice = warp % S;
    const int col0 = (blockIdx.x * groups + warp / S) * C;
    // A group past the last column still reaches the barrier below.
    const int end = col0 < N ? VECS : 0;
    const uint4* wr[C];
#pragma unroll
    for (int c = 0; c < C; ++c) {
        wr[c] = reinterpret_cast<const uint4*>(w) + (size_t)min(col0 + c, N - 1) * VECS;
    }
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    float acc[ROWS][C];
#pragma unroll
    for (int m = 0; m < ROWS; ++m) {
#pragma unroll
        for (int c = 0; c < C; ++c) {
            acc[m][c] = 0.0f;
        }
    }
#pragma unroll 2
    for (int i = slice * 32 + lane; i < end; i += 32 * S) {
        uint4 wq[C];
#pragma unroll
        for (int c = 0; c < C; ++c) {
            wq[c] = hearth_ld_stream(wr[c] + i);
        }
#pragma unroll
        for (int m = 0; m < ROWS; ++m) {
            const uint4 xq = __ldg(xv + (size_t)m * VECS + i);
            const T* xe = reinterpret_cast<const T*>(&xq);
            float xf[8];
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                xf[j] = static_cast<float>(xe[j]);
            }
#pragma unroll
            for (int c = 0; c < C; ++c) {
                const T* we = reinterpret_cast<const T*>(&wq[c]);
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    acc[m][c] += static_cast<float>(we[j]) * xf[j];
                }
            }
        }
    }
    __shared__ float part[NW][ROWS * C];
#pragma unroll
    for (int m = 0; m < ROWS; ++m) {
#pragma unroll
        for (int c = 0; c < C; ++c) {
            float v = acc[m][c];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                v += __shfl_xor_sync(0xffffffffu, v, o);
            }
            if (lane == ((m * C + c) & 31)) {
                if (S == 1) {
                    if (col0 + c < N) {
                        y[(size_t)m * N + col0 + c] = T(v);
                    }
                } else {
                    part[warp][m * C + c] = v;
                }
            }
        }
    }
    if (S == 1) {
        return;
    }
    __syncthreads();
    const int tid = threadIdx.x;
    if (tid < groups * ROWS * C) {
        const int g = tid / (ROWS * C);
        const int e = tid % (ROWS * C);
        const int m = e / C;
        const int col = (blockIdx.x * groups + g) * C + e % C;
        float v = 0.0f;
        for (int q = 0; q < S; ++q) {
            v += part[g * S + q][e];
        }
        if (col < N) {
            y[(size_t)m * N + col] = T(v);
        }
    }
"#;

/// The kernel that computes `x W^T` for `rows` activation rows and a
/// `weight: [n, k]` of `dtype`, if a route in force takes it.
pub fn route(rows: usize, n: i32, k: i32, dtype: Dtype) -> Option<Kernel> {
    pick(
        &ROUTES.read().unwrap_or_else(|e| e.into_inner()),
        rows,
        n,
        k,
        dtype,
    )
}

/// `x W^T` by `kernel` for `x: [..., K]` with at most the kernel's rows in
/// all and a row-major `weight: [N, K]` of the same dtype (bf16 or f16).
pub fn matmul_t(kernel: Kernel, x: &Array, weight: &Array) -> Result<Array> {
    let k = weight.dim(1);
    let n = weight.dim(0);
    let mut out_shape = x.shape().to_vec();
    let rows: i32 = out_shape[..out_shape.len() - 1].iter().product();
    if let Some(last) = out_shape.last_mut() {
        *last = n;
    }
    if crate::lean::on() {
        // The kernel reads `rows * K` contiguous elements and writes
        // `rows * N`: the caller's shapes as they are, no reshape nodes.
        return launch(kernel, x, weight, rows, n, k, &out_shape);
    }
    let x2 = x.reshape(&[rows, k])?;
    let y = launch(kernel, &x2, weight, rows, n, k, &[rows, n])?;
    Ok(y.reshape(&out_shape)?)
}

thread_local! {
    // One handle per thread (the engine thread), created on first use. MLX
    // caches the compiled module by name and template arguments.
    static WARP_KERNEL: CudaKernel =
        CudaKernel::new("hearth_gemv", &["x", "w", "dims"], &["y"], SOURCE, "");
    static MMA_KERNEL: CudaKernel =
        CudaKernel::new("hearth_gemv_mma", &["x", "w", "dims"], &["y"], MMA_SOURCE, MMA_HEADER);
    static WARP4_KERNEL: CudaKernel =
        CudaKernel::new("hearth_gemv_warp4", &["x", "w", "dims"], &["y"], WARP4_SOURCE, STREAM_HEADER);
    static MMAS_KERNEL: CudaKernel = CudaKernel::new(
        "hearth_gemv_mmas",
        &["x", "w", "dims"],
        &["y"],
        MMAS_SOURCE,
        &format!("{MMA_HEADER}{STREAM_HEADER}"),
    );
}

/// Launches the kernel. Only the element type and the row count are
/// template arguments (N and K are read from `dims`), so MLX compiles one
/// module per row count, all of them in [`enable`]'s self-check, instead of
/// one per matrix shape and row count in the middle of serving (each an
/// NVRTC compile of about a second: the stalls of bench/results/h200-2026-11-29-s3).
/// The kernel reads `dims` = [N, K], `rows * K` elements of `x` and `N * K`
/// of `w` and writes each of the `rows * N` outputs exactly once.
fn launch(
    kind: Kernel,
    x: &Array,
    w: &Array,
    rows: i32,
    n: i32,
    k: i32,
    out_shape: &[i32],
) -> Result<Array> {
    let dims = int_array(&[n, k, kind.split(n)]);
    let cols = kind.cols_per_block(n);
    let blocks = (n + cols - 1) / cols;
    let warps = kind.warps();
    let launch = LaunchDims {
        grid: (blocks * warps * 32, 1, 1),
        block: (warps * 32, 1, 1),
    };
    let mut template = vec![
        ("T", TemplateArg::Dtype(w.dtype())),
        ("ROWS", TemplateArg::Int(rows)),
        ("NW", TemplateArg::Int(warps)),
    ];
    if matches!(kind, Kernel::Warp4 | Kernel::Split4(_)) {
        template.push(("C", TemplateArg::Int(WARP4_COLS)));
    }
    if let Kernel::Mmas(v) = kind {
        let (_, _, depth, prefetch) = MMAS_VARIANTS[usize::from(v)];
        template.push(("D", TemplateArg::Int(depth)));
        template.push(("PF", TemplateArg::Int(prefetch)));
    }
    let run = |kernel: &CudaKernel| {
        kernel.apply(&[x, w, &dims], &[(out_shape, w.dtype())], launch, &template)
    };
    let mut out = match kind {
        Kernel::Warp => WARP_KERNEL.with(run),
        // One module for both: the split is read from `dims`.
        Kernel::Warp4 | Kernel::Split4(_) => WARP4_KERNEL.with(run),
        Kernel::Mma => MMA_KERNEL.with(run),
        Kernel::Mmas(_) => MMAS_KERNEL.with(run),
    }?;
    Ok(out.remove(0))
}

/// Puts `routes` in force after checking each route's kernel against
/// MLX's matmul on this device for all its row counts (which also compiles
/// every module the routes need, so none compiles mid-serving); returns the
/// largest relative error seen, or why the routes stay off. Call only on a
/// CUDA device.
pub fn enable(routes: Vec<Route>) -> std::result::Result<f32, String> {
    let mut worst = 0.0f32;
    for r in &routes {
        let against = format!("MLX's matmul ({} kernel)", r.kernel.name());
        let err = verdict(self_check(r.kernel, r.min_rows, r.max_rows), &against)?;
        worst = worst.max(err);
    }
    *ROUTES.write().unwrap_or_else(|e| e.into_inner()) = routes;
    Ok(worst)
}

/// Puts `routes` back in force without checking them again: only for
/// tables [`enable`] accepted before in this process (benchmarks switching
/// between tables).
pub fn reinstate(routes: Vec<Route>) {
    *ROUTES.write().unwrap_or_else(|e| e.into_inner()) = routes;
}

/// Turns the kernels off: MLX's matmul everywhere.
pub fn disable() {
    ROUTES.write().unwrap_or_else(|e| e.into_inner()).clear();
}

/// Largest relative error against MLX's matmul over every row count, on
/// shapes whose N is not a multiple of a block's (or a warp's) columns and
/// whose K is not a multiple of a block's step, in bf16 and f16. The
/// automatic split is checked at every split it can pick (these shapes
/// alone would give it 8).
fn self_check(kernel: Kernel, min: usize, max: usize) -> Result<f32> {
    if kernel == Kernel::Split4(0) {
        let mut worst = 0.0f32;
        for k in [Kernel::Warp4].into_iter().chain(Kernel::FIXED_SPLITS) {
            worst = worst.max(self_check(k, min, max)?);
        }
        return Ok(worst);
    }
    let mut worst = 0.0f32;
    for (n, k, dtype) in [
        (1003, 544, Dtype::Bfloat16),
        (96, 4096, Dtype::Bfloat16),
        (40, 2080, Dtype::Float16),
    ] {
        let w = mlx_rs::random::normal::<f32>(&[n, k], None, None, None)?.as_dtype(dtype)?;
        for rows in min..=max {
            // A decode step's shape, `[rows, 1, K]`: what the layers pass.
            let x = mlx_rs::random::normal::<f32>(&[rows as i32, 1, k], None, None, None)?
                .as_dtype(dtype)?;
            let ours = matmul_t(kernel, &x, &w)?;
            let reference = x.matmul(w.t())?;
            worst = worst.max(relative_error(&ours, &reference)?);
        }
    }
    Ok(worst)
}

/// Per-call time in µs of `x W^T` for `rows` rows of `[n, k]` bf16 weights,
/// by MLX's matmul and by `kernel` (`None` where it does not take the
/// shape): `reps` products over 4 weight copies in turn (so the L2 cannot
/// hold them), queued back to back, one sync at the end.
pub fn time(
    rows: usize,
    n: i32,
    k: i32,
    reps: usize,
    kernels: &[Kernel],
) -> Result<Vec<Option<f64>>> {
    let ws: Vec<Array> = (0..4)
        .map(|_| {
            mlx_rs::random::normal::<f32>(&[n, k], None, None, None)
                .and_then(|w| w.as_dtype(Dtype::Bfloat16))
        })
        .collect::<std::result::Result<_, _>>()?;
    let x = mlx_rs::random::normal::<f32>(&[rows as i32, k], None, None, None)?
        .as_dtype(Dtype::Bfloat16)?;
    for w in &ws {
        w.eval()?;
    }
    x.eval()?;
    let run = |f: &dyn Fn(&Array) -> Result<Array>| -> Result<f64> {
        // Chain the calls so MLX cannot drop any: each adds to the sum.
        let mut acc = f(&ws[0])?;
        acc.eval()?;
        let start = std::time::Instant::now();
        for i in 0..reps {
            acc = acc.add(f(&ws[i % ws.len()])?)?;
        }
        acc.eval()?;
        Ok(start.elapsed().as_secs_f64() * 1e6 / reps as f64)
    };
    let mut out = vec![Some(run(&|w| Ok(x.matmul(w.t())?))?)];
    for &kernel in kernels {
        out.push(if kernel.takes(rows, k) {
            Some(run(&|w| {
                launch(kernel, &x, w, rows as i32, n, k, &[rows as i32, n])
            })?)
        } else {
            None
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_parse_and_pick_the_first_match() {
        let routes = Route::parse_list("warp:1-2, mma:3-16:32").unwrap();
        assert_eq!(routes, Route::parse_list("warp:1-2+mma:3-16:32").unwrap());
        assert_eq!(routes.len(), 2);
        let bf16 = Dtype::Bfloat16;
        // 1-2 rows: the warp kernel, whatever the size.
        assert_eq!(pick(&routes, 1, 151936, 4096, bf16), Some(Kernel::Warp));
        assert_eq!(pick(&routes, 2, 4096, 4096, bf16), Some(Kernel::Warp));
        // 3-16 rows: tensor cores up to 32 MiB of weight, MLX above.
        assert_eq!(pick(&routes, 3, 4096, 4096, bf16), Some(Kernel::Mma));
        assert_eq!(pick(&routes, 16, 4096, 4096, bf16), Some(Kernel::Mma));
        assert_eq!(pick(&routes, 8, 24576, 4096, bf16), None);
        assert_eq!(pick(&routes, 17, 1024, 1024, bf16), None);
        // f32 weights and a K the kernels cannot step through stay on MLX.
        assert_eq!(pick(&routes, 2, 1024, 1024, Dtype::Float32), None);
        assert_eq!(pick(&routes, 4, 1024, 1000, bf16), None);
        assert_eq!(
            pick(&routes, 1, 1024, 1000, Dtype::Float16),
            Some(Kernel::Warp)
        );
    }

    #[test]
    fn split_kernels_parse_and_split_k_where_columns_are_few() {
        assert_eq!(Kernel::parse("split4"), Some(Kernel::Split4(0)));
        assert_eq!(Kernel::parse("split4x4"), Some(Kernel::Split4(4)));
        assert_eq!(Kernel::parse("split4x3"), None);
        for k in Kernel::ALL.into_iter().chain(Kernel::FIXED_SPLITS) {
            assert_eq!(Kernel::parse(k.name()), Some(k));
        }
        // Qwen3-8B: gate/up (24 576 columns) and the lm_head have warps
        // enough; q/k/v (6 144), o and down (4 096) split K four ways; the
        // MoE's small projections eight.
        assert_eq!(auto_split(24576), 1);
        assert_eq!(auto_split(151936), 1);
        assert_eq!(auto_split(6144), 4);
        assert_eq!(auto_split(4096), 4);
        assert_eq!(auto_split(12288), 2);
        assert_eq!(auto_split(2048), 8);
        assert_eq!(auto_split(64), 8);
        // Columns per block: 8 warps / split, 4 columns each.
        assert_eq!(Kernel::Split4(0).cols_per_block(4096), 8);
        assert_eq!(Kernel::Split4(8).cols_per_block(151936), 4);
        assert_eq!(Kernel::Split4(0).cols_per_block(24576), 32);
        assert_eq!(Kernel::Split4(0).max_rows(), 8);
        let r = Route::parse_list("split4:2-4,mma:5-16:32").unwrap();
        assert_eq!(
            pick(&r, 3, 4096, 12288, Dtype::Bfloat16),
            Some(Kernel::Split4(0))
        );
        assert!(Route::parse_list("split4:1-9").is_err());
    }

    #[test]
    fn pipelined_tensor_core_variants_parse_and_launch_their_own_warps() {
        for k in Kernel::MMAS {
            assert_eq!(Kernel::parse(k.name()), Some(k));
            assert_eq!(k.max_rows(), MAX_ROWS);
            assert_eq!(k.cols_per_block(4096), MMA_COLS);
        }
        assert_eq!(Kernel::parse("mmas"), Some(Kernel::Mmas(0)));
        assert_eq!(Kernel::parse("mmasp"), Some(Kernel::Mmas(4)));
        assert_eq!(Kernel::parse("mmasd3"), None);
        assert_eq!(Kernel::Mmas(0).warps(), 4);
        assert_eq!(Kernel::Mmas(1).warps(), 8);
        assert_eq!(Kernel::Mma.warps(), WARPS);
        // 32 elements of K a step, as the first tensor-core kernel.
        assert!(Kernel::Mmas(0).takes(16, 4096));
        assert!(!Kernel::Mmas(0).takes(16, 4080));
        assert!(!Kernel::Mmas(0).takes(17, 4096));
        let r = Route::parse_list("split4:2-4+mmas:5-16").unwrap();
        assert_eq!(
            pick(&r, 8, 151936, 4096, Dtype::Bfloat16),
            Some(Kernel::Mmas(0))
        );
        assert!(Route::parse_list("mmasd8:1-17").is_err());
    }

    #[test]
    fn bare_ranges_mean_the_warp_kernel_and_bad_routes_are_refused() {
        assert_eq!(
            Route::parse_list("2-4").unwrap(),
            vec![Route {
                kernel: Kernel::Warp,
                min_rows: 2,
                max_rows: 4,
                max_weight_mb: None
            }]
        );
        assert!(Route::parse_list("off").unwrap().is_empty());
        // warp4 by name, behind a size-limited route; outside its rows the
        // next route whose size limit fits takes the product.
        let w4 = Route::parse_list("warp4:2-4:2048,mma:2-16:100").unwrap();
        let bf16 = Dtype::Bfloat16;
        assert_eq!(pick(&w4, 2, 24576, 4096, bf16), Some(Kernel::Warp4));
        assert_eq!(pick(&w4, 6, 4096, 4096, bf16), Some(Kernel::Mma));
        assert_eq!(pick(&w4, 6, 24576, 4096, bf16), None);
        assert_eq!(pick(&w4, 1, 24576, 4096, bf16), None);
        assert_eq!(Kernel::Warp4.cols_per_block(4096), 32);
        for bad in [
            "warp:0-2",
            "warp:3-2",
            "warp:1-9",
            "mma:1-17",
            "warp4:1-9",
            "mma64:1-4",
            "mma48:1-4",
            "tc:1-2",
            "mma:1-4:x",
            "1",
        ] {
            assert!(Route::parse_list(bad).is_err(), "{bad} parsed");
        }
    }
}
