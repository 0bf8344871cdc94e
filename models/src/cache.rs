//! Per-sequence key/value cache.
//!
//! Each attention layer owns a [`KvCache`] holding `[B, kv_heads, capacity,
//! head_dim]` key and value buffers. New tokens are written in place with a
//! slice update; when the buffer is full it grows geometrically (by a quarter
//! of its size, at least [`GROWTH_STEP`] positions), so a sequence of `n`
//! tokens costs O(n) copying in total and never reallocates per token.
//!
//! For continuous batching, [`BatchKv`] holds one such buffer per layer with
//! one *row* per running sequence (`[rows, kv_heads, capacity, head_dim]`).
//! A decode step writes every row's new token at that row's own position
//! with one scatter and attends over `[0, max position]` with a per-row mask
//! (none when every row is at the same position: one row, say);
//! a prefill chunk writes one row in place, and a batched prefill
//! ([`PrefillBatch`]) writes several rows' chunks with one scatter. Rows never move: a sequence
//! keeps its row for life, and rows without a decoding sequence ride along
//! in the batch as passengers whose outputs are ignored (see
//! docs/scheduler.md). [`CacheView`] tells a layer which of these it is
//! doing in the current forward pass.
//!
//! Linear-attention layers (Qwen3.5's Gated DeltaNet) keep no keys and
//! values but a fixed-size [`RecurrentState`] per sequence, held in the same
//! per-layer structs (`KvCache` for one sequence, one row per sequence in
//! `BatchKv`). A batched decode step updates only the rows the
//! [`DecodeStep`] marks active (passenger rows keep their state); a prefill
//! chunk at position 0 starts from zeros, so a reused row needs no reset.
//!
//! The prefix cache (docs/prefix-cache.md) copies a finished row's first
//! positions and state out ([`BatchKv::copy_row_kv`],
//! [`BatchKv::copy_row_state`]) and writes them into a new sequence's row
//! ([`BatchKv::load_row`]), whose prefill then starts after them.

use mlx_rs::{
    ops::{
        self,
        indexing::{scatter_single, IndexOp, TryIndexMutOp},
    },
    Array,
};

use crate::error::Result;

/// Smallest growth of the cache, in positions.
pub const GROWTH_STEP: usize = 256;

/// What a linear-attention layer carries between forward passes: the last
/// `kernel - 1` inputs of its causal convolution (`[B, kernel - 1, conv_dim]`)
/// and the delta-rule memory (`[B, value_heads, key_dim, value_dim]`, f32).
#[derive(Debug, Clone)]
pub struct RecurrentState {
    pub conv: Array,
    pub ssm: Array,
}

impl RecurrentState {
    pub fn nbytes(&self) -> usize {
        self.conv.nbytes() + self.ssm.nbytes()
    }
}

/// One layer's cache for one sequence: keys and values (attention layers)
/// or a recurrent state (linear-attention layers).
#[derive(Debug, Default)]
pub struct KvCache {
    keys: Option<Array>,
    values: Option<Array>,
    offset: usize,
    state: Option<RecurrentState>,
}

impl KvCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of positions written so far.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Positions the buffers can hold before the next growth.
    pub fn capacity(&self) -> usize {
        self.keys.as_ref().map_or(0, |k| k.dim(2) as usize)
    }

    /// Bytes held by the key and value buffers (allocated capacity).
    pub fn nbytes(&self) -> usize {
        self.keys.as_ref().map_or(0, Array::nbytes)
            + self.values.as_ref().map_or(0, Array::nbytes)
            + self.state.as_ref().map_or(0, RecurrentState::nbytes)
    }

    /// Appends `keys`/`values` (`[B, kv_heads, L, head_dim]`) and returns views
    /// of everything cached so far.
    pub fn update_and_fetch(&mut self, keys: &Array, values: &Array) -> Result<(Array, Array)> {
        let new = keys.dim(2) as usize;
        let start = self.offset;
        let end = start + new;
        if end > self.capacity() {
            self.grow(keys, values, end)?;
        }
        let (k_buf, v_buf) = match (self.keys.as_mut(), self.values.as_mut()) {
            (Some(k), Some(v)) => (k, v),
            _ => unreachable!("grow() allocates both buffers"),
        };
        let (s, e) = (start as i32, end as i32);
        k_buf.try_index_mut((.., .., s..e, ..), keys)?;
        v_buf.try_index_mut((.., .., s..e, ..), values)?;
        self.offset = end;
        Ok((
            k_buf.index((.., .., ..e, ..)),
            v_buf.index((.., .., ..e, ..)),
        ))
    }

    fn grow(&mut self, keys: &Array, values: &Array, needed: usize) -> Result<()> {
        let current = self.capacity();
        let target = needed.max(current + (current / 4).max(GROWTH_STEP));
        let target = target.div_ceil(GROWTH_STEP) * GROWTH_STEP;
        let offset = self.offset;
        let extend = |old: Option<&Array>, like: &Array| -> Result<Array> {
            let zeros = |len: usize| {
                let shape = [like.dim(0), like.dim(1), len as i32, like.dim(3)];
                ops::zeros_dtype(&shape, like.dtype())
            };
            match old {
                // Only the written prefix is worth copying.
                Some(old) if offset > 0 => {
                    let written = old.index((.., .., ..offset as i32, ..));
                    Ok(ops::concatenate(&[written, zeros(target - offset)?], 2)?)
                }
                _ => Ok(zeros(target)?),
            }
        };
        let k = extend(self.keys.as_ref(), keys)?;
        let v = extend(self.values.as_ref(), values)?;
        self.keys = Some(k);
        self.values = Some(v);
        Ok(())
    }

    /// Element type of the stored keys (`None` before the first write or
    /// for a linear-attention layer).
    pub fn key_dtype(&self) -> Option<mlx_rs::Dtype> {
        self.keys.as_ref().map(Array::dtype)
    }

    /// The buffers, for evaluation.
    pub fn arrays(&self) -> impl Iterator<Item = &Array> {
        let state = self.state.iter().flat_map(|s| [&s.conv, &s.ssm]);
        self.keys.iter().chain(self.values.iter()).chain(state)
    }

    /// Drops everything after the first `len` positions (prefix reuse). A
    /// recurrent state cannot be rewound: it is dropped unless `len` keeps
    /// every position.
    pub fn truncate(&mut self, len: usize) {
        if len < self.offset {
            self.state = None;
        }
        self.offset = self.offset.min(len);
    }
}

/// How one forward pass uses a layer's cache.
pub enum CacheView<'a> {
    /// One sequence with its own [`KvCache`]; positions continue from its offset.
    Single(&'a mut KvCache),
    /// A batched decode step over rows `0..step.rows()`, one token each.
    Decode {
        kv: &'a mut BatchKv,
        step: &'a DecodeStep,
    },
    /// A prompt chunk of one row, written at positions `start..start + L`.
    Prefill {
        kv: &'a mut BatchKv,
        row: usize,
        start: usize,
        shape: BatchShape,
    },
    /// Prompt chunks of several rows in one pass (see [`PrefillBatch`]).
    PrefillBatch {
        kv: &'a mut BatchKv,
        batch: &'a PrefillBatch,
    },
}

/// Where rotary positions start for the tokens of one forward pass.
pub enum RopeOffset<'a> {
    Scalar(usize),
    /// One start position per batch row (`[B]` int32).
    PerRow(&'a Array),
}

impl CacheView<'_> {
    pub fn rope_offset(&self) -> RopeOffset<'_> {
        match self {
            CacheView::Single(c) => RopeOffset::Scalar(c.offset()),
            CacheView::Decode { step, .. } => RopeOffset::PerRow(&step.offsets),
            CacheView::Prefill { start, .. } => RopeOffset::Scalar(*start),
            CacheView::PrefillBatch { batch, .. } => RopeOffset::PerRow(&batch.starts),
        }
    }

    /// Explicit attention mask for this pass, if the view needs one
    /// (`None`: causal for several tokens, nothing for one).
    pub fn mask(&self) -> Option<&Array> {
        match self {
            CacheView::Decode { step, .. } => step.mask(),
            _ => None,
        }
    }

    /// For a batched prefill: which input positions are real tokens
    /// (`[n, width, 1]` f32, 1 or 0: rows are right-padded) and each row's
    /// chunk length (`[n]` int32). Linear-attention layers use them to
    /// leave their state untouched by the padding.
    pub fn padding(&self) -> Option<(&Array, &Array)> {
        match self {
            CacheView::PrefillBatch { batch, .. } => Some((&batch.valid, &batch.lens)),
            _ => None,
        }
    }

    /// For a batched prefill, its chunks in input order (after
    /// [`CacheView::update_and_fetch`], which then returns the whole
    /// buffers: each chunk attends to its own row's keys).
    pub fn prefill_chunks(&self) -> Option<&[PrefillChunk]> {
        match self {
            CacheView::PrefillBatch { batch, .. } => Some(&batch.chunks),
            _ => None,
        }
    }

    /// For a batched prefill, the index of each row's last real token
    /// (`[n, 1, 1]` int32), where its next-token logits are read.
    pub fn last_tokens(&self) -> Option<&Array> {
        match self {
            CacheView::PrefillBatch { batch, .. } => Some(&batch.last),
            _ => None,
        }
    }

    /// For a decode step, after [`CacheView::update_and_fetch`]: the whole
    /// key and value buffers (`[rows, kv_heads, capacity, head_dim]`), each
    /// row's length and the longest, for attention that takes lengths
    /// instead of a mask.
    pub fn decode_lengths(&self) -> Option<(&Array, &Array, &Array, usize)> {
        match self {
            CacheView::Decode { kv, step } => match (&kv.keys, &kv.values) {
                (Some(k), Some(v)) => Some((k, v, step.lens(), step.kv_len)),
                _ => None,
            },
            _ => None,
        }
    }

    /// The recurrent state this pass starts from, one row per input row.
    /// `init` is the zero state of one row (its shapes and dtypes size the
    /// batch buffers): a fresh sequence, or a prompt chunk at position 0,
    /// starts from it.
    pub fn recurrent_state(&mut self, init: &RecurrentState) -> Result<RecurrentState> {
        match self {
            CacheView::Single(c) => Ok(c.state.clone().unwrap_or_else(|| init.clone())),
            CacheView::Decode { kv, step } => {
                kv.fit_state(step.shape.rows, init)?;
                kv.state_rows(0, step.rows())
            }
            CacheView::Prefill {
                kv,
                row,
                start,
                shape,
            } => {
                kv.fit_state(shape.rows, init)?;
                if *start == 0 {
                    Ok(init.clone())
                } else {
                    kv.state_rows(*row, 1)
                }
            }
            CacheView::PrefillBatch { kv, batch } => {
                kv.fit_state(batch.shape.rows, init)?;
                let old = kv.gather_state(&batch.row_index)?;
                // A row whose chunk starts at 0 starts from zeros (its row
                // may hold a finished sequence's state).
                let Some(fresh) = &batch.fresh else {
                    return Ok(old);
                };
                let from_zero = |old: Array, zero: &Array| -> Result<Array> {
                    let mut shape = vec![batch.rows() as i32];
                    shape.resize(old.ndim(), 1);
                    Ok(ops::select(fresh.reshape(&shape)?, zero, old)?)
                };
                Ok(RecurrentState {
                    conv: from_zero(old.conv, &init.conv)?,
                    ssm: from_zero(old.ssm, &init.ssm)?,
                })
            }
        }
    }

    /// Stores the state after this pass of `tokens` tokens. A decode step
    /// keeps the old state of rows its [`DecodeStep`] marks inactive.
    pub fn set_recurrent_state(&mut self, new: RecurrentState, tokens: usize) -> Result<()> {
        match self {
            CacheView::Single(c) => {
                c.state = Some(new);
                c.offset += tokens;
                Ok(())
            }
            CacheView::Decode { kv, step } => {
                let n = step.rows();
                let new = match &step.active {
                    None => new,
                    Some(active) => {
                        let old = kv.state_rows(0, n)?;
                        let keep = |new: Array, old: Array| -> Result<Array> {
                            let mut shape = vec![n as i32];
                            shape.resize(new.ndim(), 1);
                            Ok(ops::select(active.reshape(&shape)?, new, old)?)
                        };
                        RecurrentState {
                            conv: keep(new.conv, old.conv)?,
                            ssm: keep(new.ssm, old.ssm)?,
                        }
                    }
                };
                kv.write_state_rows(0, new)
            }
            CacheView::Prefill { kv, row, .. } => kv.write_state_rows(*row, new),
            CacheView::PrefillBatch { kv, batch } => kv.scatter_state(&batch.row_index, new),
        }
    }

    /// Appends `keys`/`values` (`[B, kv_heads, L, head_dim]`) and returns what
    /// the new tokens attend to (for a batched prefill, the whole buffers:
    /// see [`CacheView::prefill_chunks`]).
    pub fn update_and_fetch(&mut self, keys: &Array, values: &Array) -> Result<(Array, Array)> {
        match self {
            CacheView::Single(c) => c.update_and_fetch(keys, values),
            CacheView::Decode { kv, step } => kv.decode_update(step, keys, values),
            CacheView::Prefill {
                kv,
                row,
                start,
                shape,
            } => kv.prefill_update(*shape, *row, *start, keys, values),
            CacheView::PrefillBatch { kv, batch } => kv.prefill_batch_update(batch, keys, values),
        }
    }
}

impl KvCache {
    /// Views of a per-layer cache list for one forward pass.
    pub fn views(caches: &mut [KvCache]) -> Vec<CacheView<'_>> {
        caches.iter_mut().map(CacheView::Single).collect()
    }
}

impl BatchKv {
    /// Every layer's view for a batched decode step.
    pub fn decode_views<'a>(layers: &'a mut [BatchKv], step: &'a DecodeStep) -> Vec<CacheView<'a>> {
        layers
            .iter_mut()
            .map(|kv| CacheView::Decode { kv, step })
            .collect()
    }

    /// Every layer's view for a prompt chunk of `row` written from `start`.
    pub fn prefill_views(
        layers: &mut [BatchKv],
        shape: BatchShape,
        row: usize,
        start: usize,
    ) -> Vec<CacheView<'_>> {
        layers
            .iter_mut()
            .map(|kv| CacheView::Prefill {
                kv,
                row,
                start,
                shape,
            })
            .collect()
    }
}

impl BatchKv {
    /// Every layer's view for a batched prefill.
    pub fn prefill_batch_views<'a>(
        layers: &'a mut [BatchKv],
        batch: &'a PrefillBatch,
    ) -> Vec<CacheView<'a>> {
        layers
            .iter_mut()
            .map(|kv| CacheView::PrefillBatch { kv, batch })
            .collect()
    }
}

/// Allocated size of every layer's [`BatchKv`]: rows × positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchShape {
    pub rows: usize,
    pub capacity: usize,
}

/// `a` with `updates` written at `indices` along `axes` (MLX's `scatter`,
/// which mlx-rs exposes for one axis only): `updates` is `[index shape...,
/// a's shape with 1 on each indexed axis]`.
fn scatter(a: &Array, indices: &[&Array], updates: &Array, axes: &[i32]) -> Result<Array> {
    let stream = mlx_rs::Stream::thread_local_or_default();
    // SAFETY: the index vector is made and freed here; mlx-c copies the
    // handles it keeps and writes `out` only on success.
    unsafe {
        let ptrs: Vec<_> = indices.iter().map(|a| a.as_ptr()).collect();
        let idx = mlx_sys::mlx_vector_array_new_data(ptrs.as_ptr(), ptrs.len());
        let mut out = mlx_sys::mlx_array_new();
        let status = mlx_sys::mlx_scatter(
            &mut out,
            a.as_ptr(),
            idx,
            updates.as_ptr(),
            axes.as_ptr(),
            axes.len(),
            stream.as_ptr(),
        );
        mlx_sys::mlx_vector_array_free(idx);
        if status != 0 {
            mlx_sys::mlx_array_free(out);
            return Err(crate::error::ModelError::Mlx("scatter failed".into()));
        }
        Ok(Array::from_ptr(out))
    }
}

/// A step's per-row int32 values as a `[len]` array whose buffer holds at
/// least [`crate::cuda_kernel::MIN_INTS`] values (a view of the first `len`
/// when padded), so that a short step's offsets, lengths and KV write index,
/// read by every attention layer, are not in MLX's host-resident pool.
fn step_ints(values: &[i32]) -> Array {
    first(&padded_array(values), values.len())
}

/// `values` then zeros up to [`crate::cuda_kernel::padded_ints`]'s length,
/// as written by the host: the buffer [`step_ints`] views.
fn padded_array(values: &[i32]) -> Array {
    let padded = crate::cuda_kernel::padded_ints(values);
    Array::from_slice(&padded, &[padded.len() as i32])
}

/// The first `n` values of a padded step buffer (a view, no copy).
fn first(padded: &Array, n: usize) -> Array {
    if padded.dim(0) as usize == n {
        padded.clone()
    } else {
        padded.index(..n as i32)
    }
}

/// One decode step of a batch: which rows, each at which position.
pub struct DecodeStep {
    shape: BatchShape,
    positions: Vec<usize>,
    /// Start position per row, `[n]` int32 (RoPE offsets): the first `n`
    /// values of `offsets_buf` (at least 4 values: see [`step_ints`]).
    offsets: Array,
    offsets_buf: Array,
    /// Whether `offsets_buf` is the previous step's lengths, made on the
    /// device (see [`DecodeStep::next`]); then the lengths are too.
    carried: bool,
    /// `positions + 1` in a buffer of at least 4 values; built on first use.
    lens_buf: std::cell::OnceCell<Array>,
    /// Attention mask `[n, 1, 1, kv_len]`: row `i` sees `0..=positions[i]`;
    /// `None` when every row sees all of `0..kv_len` (one row, or rows of
    /// one length), so attention takes its unmasked kernels: MLX's CUDA
    /// SDPA has a fused one-token kernel only without an array mask (with
    /// one it falls back to separate matmul, softmax and mask ops).
    /// Built on first use: a step whose attention takes lengths needs none.
    mask: std::cell::OnceCell<Option<Array>>,
    /// Each row's length after this step (`positions + 1`, `[n]` int32):
    /// what the CUDA one-token attention kernel takes instead of a mask
    /// (models/src/cuda_attn.rs). Built on first use.
    lens: std::cell::OnceCell<Array>,
    kv_heads: usize,
    /// Flat write index of each (row, head) in a `[rows * heads * capacity,
    /// D]` view, for the plain graph's KV write (crate::lean). Built on
    /// first use.
    flat_index: std::cell::OnceCell<Array>,
    /// `0..n`, `[n]` int32: each row's index in the batch buffers.
    row_index: Array,
    kv_len: usize,
    /// Rows whose recurrent state this step advances (`[n]` bool); `None`: all.
    active: Option<Array>,
}

impl DecodeStep {
    /// `positions[i]` is where row `i` writes its token (its length so far).
    pub fn new(shape: BatchShape, kv_heads: usize, positions: Vec<usize>) -> Self {
        Self::next(shape, kv_heads, positions, None)
    }

    /// The step after `prev`: when every row moved on by one position since
    /// `prev` (a batch that only decodes) and [`crate::lean::carry_inputs`]
    /// is on, its RoPE offsets are `prev`'s lengths and its lengths those
    /// plus one, made on the device, and its row index is `prev`'s. On MLX's
    /// CUDA backend a buffer the host writes is managed memory that migrates
    /// to the GPU on its first use there, ~100 µs of a step's GPU time
    /// (docs/cuda.md); these buffers are never written by the host. Otherwise
    /// (rows joined, left or waited) the values come from the host, as with
    /// [`DecodeStep::new`].
    pub fn next(
        shape: BatchShape,
        kv_heads: usize,
        positions: Vec<usize>,
        prev: Option<&DecodeStep>,
    ) -> Self {
        let n = positions.len();
        let kv_len = positions.iter().max().map_or(1, |&p| p + 1);
        debug_assert!(kv_len <= shape.capacity && n <= shape.rows);
        let prev = prev.filter(|p| p.positions.len() == n && crate::lean::carry_inputs());
        let follows = prev.filter(|p| {
            p.positions
                .iter()
                .zip(&positions)
                .all(|(&before, &now)| now == before + 1)
        });
        let (offsets_buf, carried) = match follows {
            Some(p) => (p.lens_buf().clone(), true),
            None => {
                let offsets: Vec<i32> = positions.iter().map(|&p| p as i32).collect();
                (padded_array(&offsets), false)
            }
        };
        DecodeStep {
            shape,
            offsets: first(&offsets_buf, n),
            offsets_buf,
            carried,
            lens_buf: std::cell::OnceCell::new(),
            mask: std::cell::OnceCell::new(),
            lens: std::cell::OnceCell::new(),
            kv_heads,
            flat_index: std::cell::OnceCell::new(),
            row_index: match prev {
                Some(p) => p.row_index.clone(),
                None => step_ints(&(0..n as i32).collect::<Vec<_>>()),
            },
            positions,
            kv_len,
            active: None,
        }
    }

    /// Marks which rows really decode this step (`active[i]` for row `i`);
    /// the others are passengers whose recurrent state must not change.
    pub fn with_active_rows(mut self, active: &[bool]) -> Self {
        debug_assert_eq!(active.len(), self.positions.len());
        if active.iter().all(|&a| a) {
            self.active = None;
        } else {
            self.active = Some(Array::from_slice(active, &[active.len() as i32]));
        }
        self
    }

    pub fn rows(&self) -> usize {
        self.positions.len()
    }

    /// The attention mask (see the field), built on the first call.
    fn mask(&self) -> Option<&Array> {
        self.mask
            .get_or_init(|| {
                let (n, kv_len) = (self.positions.len(), self.kv_len);
                if self.positions.iter().all(|&p| p + 1 == kv_len) {
                    return None;
                }
                let mut mask = vec![false; n * kv_len];
                for (i, &p) in self.positions.iter().enumerate() {
                    mask[i * kv_len..i * kv_len + p + 1].fill(true);
                }
                Some(Array::from_slice(&mask, &[n as i32, 1, 1, kv_len as i32]))
            })
            .as_ref()
    }

    /// The flat KV write index (see the field), built on the first call.
    fn flat_index(&self) -> &Array {
        self.flat_index.get_or_init(|| {
            let (heads, capacity) = (self.kv_heads, self.shape.capacity);
            let mut flat = Vec::with_capacity(self.positions.len() * heads);
            for (i, &p) in self.positions.iter().enumerate() {
                for h in 0..heads {
                    flat.push(((i * heads + h) * capacity + p) as i32);
                }
            }
            step_ints(&flat)
        })
    }

    /// Each row's length (see the field), built on the first call.
    fn lens(&self) -> &Array {
        self.lens
            .get_or_init(|| first(self.lens_buf(), self.positions.len()))
    }

    /// `positions + 1`, padded like the offsets: one on-device add to a
    /// carried step's offsets, else written by the host.
    fn lens_buf(&self) -> &Array {
        self.lens_buf.get_or_init(|| {
            let carried = self
                .carried
                .then(|| self.offsets_buf.add(Array::from_int(1)).ok())
                .flatten();
            carried.unwrap_or_else(|| {
                let lens: Vec<i32> = self.positions.iter().map(|&p| p as i32 + 1).collect();
                padded_array(&lens)
            })
        })
    }

    pub fn shape(&self) -> BatchShape {
        self.shape
    }
}

/// A batched prefill's input width is a multiple of this.
pub const PREFILL_WIDTH_STEP: usize = 16;

/// One prompt chunk of a batched prefill: `len` tokens of batch row `row`,
/// written at positions `start..start + len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefillChunk {
    pub row: usize,
    pub start: usize,
    pub len: usize,
}

/// Prompt chunks of several rows in one forward pass. The input is
/// `[n, width]`: chunk `i` in row `i`, right-padded to the widest chunk.
/// Padding is computed but never stored: only real tokens are written to
/// the KV buffers; attention runs per chunk, causal over its own row's keys
/// ([`CacheView::prefill_chunks`]: the shapes a pass per chunk has, so a
/// backend that builds a kernel per shape, cuDNN on CUDA, builds no new
/// ones); linear-attention layers give padding no weight
/// ([`CacheView::padding`]); logits are read at each row's last real token
/// ([`CacheView::last_tokens`]). One pass reads the weights once for all
/// rows, where a pass per chunk reads them once per chunk.
pub struct PrefillBatch {
    shape: BatchShape,
    chunks: Vec<PrefillChunk>,
    width: usize,
    /// Batch row of each chunk, `[n]` int32.
    row_index: Array,
    /// Start position of each chunk, `[n]` int32 (RoPE offsets).
    starts: Array,
    /// Length of each chunk, `[n]` int32.
    lens: Array,
    /// `[n, width, 1]` f32: 1 for a real token, 0 for padding.
    valid: Array,
    /// `[n, 1, 1]` int32: each chunk's last token.
    last: Array,
    /// `[n]` bool: chunks at position 0; `None` when there is none.
    fresh: Option<Array>,
    /// Real tokens' places in the new keys flattened to
    /// `[n * kv_heads * width, D]`, and in the buffers flattened to
    /// `[rows * kv_heads * capacity, D]`.
    src_index: Array,
    dst_index: Array,
}

impl PrefillBatch {
    /// `chunks` in input order; every chunk has at least one token and
    /// fits `shape`.
    pub fn new(shape: BatchShape, kv_heads: usize, chunks: Vec<PrefillChunk>) -> Result<Self> {
        let n = chunks.len();
        // The width rounded up, so prompts of nearby lengths share shapes.
        let width = chunks.iter().map(|c| c.len).max().unwrap_or(1);
        let width = width.next_multiple_of(PREFILL_WIDTH_STEP);
        debug_assert!(chunks
            .iter()
            .all(|c| c.len > 0 && c.row < shape.rows && c.start + c.len <= shape.capacity));
        let ints = |f: &dyn Fn(&PrefillChunk) -> usize| -> Array {
            let v: Vec<i32> = chunks.iter().map(|c| f(c) as i32).collect();
            Array::from_slice(&v, &[n as i32])
        };
        let mut valid = vec![0f32; n * width];
        let (mut src, mut dst) = (Vec::new(), Vec::new());
        for (i, c) in chunks.iter().enumerate() {
            valid[i * width..i * width + c.len].fill(1.0);
            for h in 0..kv_heads {
                for j in 0..c.len {
                    src.push(((i * kv_heads + h) * width + j) as i32);
                    dst.push(((c.row * kv_heads + h) * shape.capacity + c.start + j) as i32);
                }
            }
        }
        let starts = ints(&|c| c.start);
        let fresh = chunks.iter().any(|c| c.start == 0).then(|| {
            let f: Vec<bool> = chunks.iter().map(|c| c.start == 0).collect();
            Array::from_slice(&f, &[n as i32])
        });
        Ok(PrefillBatch {
            shape,
            width,
            row_index: ints(&|c| c.row),
            lens: ints(&|c| c.len),
            last: ints(&|c| c.len - 1).reshape(&[n as i32, 1, 1])?,
            valid: Array::from_slice(&valid, &[n as i32, width as i32, 1]),
            fresh,
            src_index: Array::from_slice(&src, &[src.len() as i32]),
            dst_index: Array::from_slice(&dst, &[dst.len() as i32]),
            starts,
            chunks,
        })
    }

    pub fn rows(&self) -> usize {
        self.chunks.len()
    }

    /// Tokens per input row (the widest chunk, rounded up to
    /// [`PREFILL_WIDTH_STEP`]).
    pub fn width(&self) -> usize {
        self.width
    }

    pub fn chunks(&self) -> &[PrefillChunk] {
        &self.chunks
    }
}

/// One layer's KV buffers for a batch of sequences (see the module docs).
#[derive(Debug, Default)]
pub struct BatchKv {
    keys: Option<Array>,
    values: Option<Array>,
    /// Linear-attention layers: one state row per batch row.
    state: Option<RecurrentState>,
}

impl BatchKv {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn nbytes(&self) -> usize {
        self.keys.as_ref().map_or(0, Array::nbytes)
            + self.values.as_ref().map_or(0, Array::nbytes)
            + self.state.as_ref().map_or(0, RecurrentState::nbytes)
    }

    pub fn arrays(&self) -> impl Iterator<Item = &Array> {
        let state = self.state.iter().flat_map(|s| [&s.conv, &s.ssm]);
        self.keys.iter().chain(self.values.iter()).chain(state)
    }

    /// Frees the buffers (all sequences gone).
    pub fn clear(&mut self) {
        self.keys = None;
        self.values = None;
        self.state = None;
    }

    /// Grows (never shrinks) the state buffers to `rows` rows of zeros
    /// shaped like `init` (one row).
    fn fit_state(&mut self, rows: usize, init: &RecurrentState) -> Result<()> {
        let grow = |old: Option<Array>, like: &Array| -> Result<Array> {
            let have = old.as_ref().map_or(0, |o| o.dim(0) as usize);
            if have >= rows {
                if let Some(old) = old {
                    return Ok(old);
                }
            }
            let mut shape = like.shape().to_vec();
            shape[0] = (rows - have) as i32;
            let zeros = ops::zeros_dtype(&shape, like.dtype())?;
            match old {
                Some(old) => Ok(ops::concatenate(&[old, zeros], 0)?),
                None => Ok(zeros),
            }
        };
        let old = self.state.take();
        let (conv, ssm) = match old {
            Some(s) => (Some(s.conv), Some(s.ssm)),
            None => (None, None),
        };
        self.state = Some(RecurrentState {
            conv: grow(conv, &init.conv)?,
            ssm: grow(ssm, &init.ssm)?,
        });
        Ok(())
    }

    /// Rows `start..start + n` of the state (after [`Self::fit_state`]).
    fn state_rows(&self, start: usize, n: usize) -> Result<RecurrentState> {
        let (s, e) = (start as i32, (start + n) as i32);
        match &self.state {
            Some(st) => Ok(RecurrentState {
                conv: st.conv.index(s..e),
                ssm: st.ssm.index(s..e),
            }),
            None => Err(crate::error::ModelError::Mlx(
                "recurrent state read before it was allocated".into(),
            )),
        }
    }

    /// Writes `new` (`n` rows) at rows `start..start + n`.
    fn write_state_rows(&mut self, start: usize, new: RecurrentState) -> Result<()> {
        let Some(st) = self.state.as_mut() else {
            return Err(crate::error::ModelError::Mlx(
                "recurrent state written before it was read".into(),
            ));
        };
        let (s, e) = (start as i32, start as i32 + new.conv.dim(0));
        if s == 0 && e == st.conv.dim(0) {
            st.conv = new.conv;
            st.ssm = new.ssm;
            return Ok(());
        }
        st.conv.try_index_mut(s..e, &new.conv)?;
        st.ssm.try_index_mut(s..e, &new.ssm)?;
        Ok(())
    }

    /// The state of rows `index` (`[n]` int32), after [`Self::fit_state`].
    fn gather_state(&self, index: &Array) -> Result<RecurrentState> {
        match &self.state {
            Some(st) => Ok(RecurrentState {
                conv: st.conv.take_axis(index, 0)?,
                ssm: st.ssm.take_axis(index, 0)?,
            }),
            None => Err(crate::error::ModelError::Mlx(
                "recurrent state read before it was allocated".into(),
            )),
        }
    }

    /// Writes `new` (one row per entry of `index`, `[n]` int32) at rows `index`.
    fn scatter_state(&mut self, index: &Array, new: RecurrentState) -> Result<()> {
        let Some(st) = self.state.as_mut() else {
            return Err(crate::error::ModelError::Mlx(
                "recurrent state written before it was read".into(),
            ));
        };
        st.conv = scatter_single(&st.conv, index, &new.conv.expand_dims(1)?, 0)?;
        st.ssm = scatter_single(&st.ssm, index, &new.ssm.expand_dims(1)?, 0)?;
        Ok(())
    }

    /// A copy of row `row`'s keys and values at positions `0..len`
    /// (`[1, kv_heads, len, head_dim]` each), or `None` for a layer without
    /// keys (linear attention). The copy owns its memory: it does not keep
    /// the batch buffer alive, so later writes there stay in place.
    pub fn copy_row_kv(&self, row: usize, len: usize) -> Result<Option<(Array, Array)>> {
        let (Some(k), Some(v)) = (&self.keys, &self.values) else {
            return Ok(None);
        };
        let (r, l) = (row as i32, len as i32);
        let k = owned_copy(&k.index((r..r + 1, .., ..l, ..)))?;
        let v = owned_copy(&v.index((r..r + 1, .., ..l, ..)))?;
        Ok(Some((k, v)))
    }

    /// A copy of row `row`'s recurrent state, or `None` for a layer without
    /// one (attention). Valid only at the row's current position.
    pub fn copy_row_state(&self, row: usize) -> Result<Option<RecurrentState>> {
        let Some(st) = &self.state else {
            return Ok(None);
        };
        let r = row as i32;
        Ok(Some(RecurrentState {
            conv: owned_copy(&st.conv.index(r..r + 1))?,
            ssm: owned_copy(&st.ssm.index(r..r + 1))?,
        }))
    }

    /// Writes a cached prefix into row `row` of buffers of `shape`: the
    /// first `len` positions of `kv` (`[1, kv_heads, >= len, head_dim]`)
    /// and/or the recurrent state taken at position `len`. A prefill chunk
    /// at `start = len` then continues from there.
    pub fn load_row(
        &mut self,
        shape: BatchShape,
        row: usize,
        len: usize,
        kv: Option<(&Array, &Array)>,
        state: Option<&RecurrentState>,
    ) -> Result<()> {
        if let Some((keys, values)) = kv {
            self.fit(shape, keys)?;
            let (r, l) = (row as i32, len as i32);
            let (Some(k), Some(v)) = (self.keys.as_mut(), self.values.as_mut()) else {
                unreachable!("fit allocates both buffers");
            };
            k.try_index_mut((r..r + 1, .., ..l, ..), keys.index((.., .., ..l, ..)))?;
            v.try_index_mut((r..r + 1, .., ..l, ..), values.index((.., .., ..l, ..)))?;
        }
        if let Some(state) = state {
            self.fit_state(shape.rows, state)?;
            self.write_state_rows(row, state.clone())?;
        }
        Ok(())
    }

    /// Grows (never shrinks) both buffers to `shape`, keeping their contents.
    fn fit(&mut self, shape: BatchShape, like: &Array) -> Result<()> {
        let (heads, dim, dtype) = (like.dim(1), like.dim(3), like.dtype());
        let grow = |old: Option<Array>| -> Result<Array> {
            let want = [shape.rows as i32, heads, shape.capacity as i32, dim];
            let Some(old) = old else {
                return Ok(ops::zeros_dtype(&want, dtype)?);
            };
            let (rows, cap) = (old.dim(0), old.dim(2));
            if rows as usize == shape.rows && cap as usize == shape.capacity {
                return Ok(old);
            }
            let mut grown = old;
            if (cap as usize) < shape.capacity {
                let pad =
                    ops::zeros_dtype(&[rows, heads, shape.capacity as i32 - cap, dim], dtype)?;
                grown = ops::concatenate(&[grown, pad], 2)?;
            }
            if (rows as usize) < shape.rows {
                let pad = ops::zeros_dtype(
                    &[shape.rows as i32 - rows, heads, shape.capacity as i32, dim],
                    dtype,
                )?;
                grown = ops::concatenate(&[grown, pad], 0)?;
            }
            Ok(grown)
        };
        self.keys = Some(grow(self.keys.take())?);
        self.values = Some(grow(self.values.take())?);
        Ok(())
    }

    /// Writes `updates(new)` (`[m, 1, D]`, for the keys and for the values)
    /// at the flat positions `index` of both buffers, viewed as
    /// `[rows * heads * capacity, D]`, after growing them to `shape`; returns
    /// the updated buffers.
    /// Fits the buffers to `shape` and replaces each with `write(buffer,
    /// new)` for the keys and the values; returns the new buffers.
    fn write_tokens(
        &mut self,
        shape: BatchShape,
        keys: &Array,
        values: &Array,
        write: impl Fn(Array, &Array) -> Result<Array>,
    ) -> Result<(Array, Array)> {
        self.fit(shape, keys)?;
        let missing = || crate::error::ModelError::Mlx("KV buffer missing after fit".into());
        let k = write(self.keys.take().ok_or_else(missing)?, keys)?;
        let v = write(self.values.take().ok_or_else(missing)?, values)?;
        self.keys = Some(k.clone());
        self.values = Some(v.clone());
        Ok((k, v))
    }

    fn scatter_tokens(
        &mut self,
        shape: BatchShape,
        keys: &Array,
        values: &Array,
        index: &Array,
        updates: impl Fn(&Array) -> Result<Array>,
    ) -> Result<(Array, Array)> {
        let (heads, dim) = (keys.dim(1), keys.dim(3));
        let (rows, capacity) = (shape.rows as i32, shape.capacity as i32);
        self.write_tokens(shape, keys, values, |buf, new| {
            let flat = buf.reshape(&[rows * heads * capacity, dim])?;
            let flat = scatter_single(&flat, index, &updates(new)?, 0)?;
            Ok(flat.reshape(&[rows, heads, capacity, dim])?)
        })
    }

    fn decode_update(
        &mut self,
        step: &DecodeStep,
        keys: &Array,
        values: &Array,
    ) -> Result<(Array, Array)> {
        let n = step.rows() as i32;
        let (heads, dim) = (keys.dim(1), keys.dim(3));
        let len = step.kv_len as i32;
        if crate::lean::on() {
            // One scatter per buffer on its own shape, at (row, position):
            // two nodes a buffer instead of four (crate::lean).
            let at = [&step.row_index, &step.offsets];
            let (k, v) = self.write_tokens(step.shape, keys, values, |buf, new| {
                scatter(&buf, &at, &new.reshape(&[n, 1, heads, 1, dim])?, &[0, 2])
            })?;
            return Ok((k.index((..n, .., ..len, ..)), v.index((..n, .., ..len, ..))));
        }
        let (k, v) = self.scatter_tokens(step.shape, keys, values, step.flat_index(), |new| {
            Ok(new.reshape(&[n * heads, 1, dim])?)
        })?;
        Ok((k.index((..n, .., ..len, ..)), v.index((..n, .., ..len, ..))))
    }

    /// Writes a batched prefill's real tokens (not its padding); returns the
    /// whole buffers (each chunk attends to its own row's keys).
    fn prefill_batch_update(
        &mut self,
        batch: &PrefillBatch,
        keys: &Array,
        values: &Array,
    ) -> Result<(Array, Array)> {
        let (n, heads, width, dim) = (keys.dim(0), keys.dim(1), keys.dim(2), keys.dim(3));
        self.scatter_tokens(batch.shape, keys, values, &batch.dst_index, |new| {
            Ok(new
                .reshape(&[n * heads * width, dim])?
                .take_axis(&batch.src_index, 0)?
                .expand_dims(1)?)
        })
    }

    fn prefill_update(
        &mut self,
        shape: BatchShape,
        row: usize,
        start: usize,
        keys: &Array,
        values: &Array,
    ) -> Result<(Array, Array)> {
        self.fit(shape, keys)?;
        let (r, s, e) = (
            row as i32,
            start as i32,
            (start + keys.dim(2) as usize) as i32,
        );
        let (Some(k), Some(v)) = (self.keys.as_mut(), self.values.as_mut()) else {
            unreachable!("fit allocates both buffers");
        };
        k.try_index_mut((r..r + 1, .., s..e, ..), keys)?;
        v.try_index_mut((r..r + 1, .., s..e, ..), values)?;
        Ok((
            k.index((r..r + 1, .., ..e, ..)),
            v.index((r..r + 1, .., ..e, ..)),
        ))
    }
}

/// An array with its own buffer holding `a`'s values (exactly: `a * 1` in
/// `a`'s dtype). A slice of a batch buffer would share, and so pin, the
/// whole buffer.
fn owned_copy(a: &Array) -> Result<Array> {
    let one = Array::from_f32(1.0).as_dtype(a.dtype())?;
    Ok(a.multiply(one)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlx_rs::random;

    /// Short per-row lists keep their shape and values (their buffer is
    /// padded); four or more are taken as they are.
    #[test]
    fn step_ints_keep_shape_and_values() {
        for values in [vec![3], vec![3, 9], vec![1, 2, 3], vec![4, 5, 6, 7, 8]] {
            let a = step_ints(&values);
            assert_eq!(a.shape(), &[values.len() as i32]);
            let back: Vec<i32> = a.add(Array::from_int(0)).unwrap().as_slice().to_vec();
            assert_eq!(back, values);
        }
    }

    /// A step that follows one of the same rows, each a position on, takes
    /// its offsets and lengths from the device (the values the host would
    /// have written); any other step writes them from the host.
    #[test]
    fn a_following_step_carries_its_offsets_and_lengths_on_the_device() {
        let shape = BatchShape {
            rows: 4,
            capacity: 256,
        };
        let ints = |a: &Array| {
            a.add(Array::from_int(0))
                .unwrap()
                .as_slice::<i32>()
                .to_vec()
        };
        for start in [vec![6], vec![13, 20, 0, 7], vec![3, 3, 9]] {
            let first = DecodeStep::new(shape, 2, start.clone());
            assert!(!first.carried);
            let plus = |k: usize| start.iter().map(|&p| (p + k) as i32).collect::<Vec<_>>();
            let second = DecodeStep::next(
                shape,
                2,
                start.iter().map(|p| p + 1).collect(),
                Some(&first),
            );
            assert!(second.carried, "{start:?}");
            assert_eq!(ints(&second.offsets), plus(1));
            assert_eq!(ints(second.lens()), plus(2));
            assert_eq!(second.offsets.shape(), &[start.len() as i32]);
            // And the one after, carried from a carried step.
            let third = DecodeStep::next(
                shape,
                2,
                start.iter().map(|p| p + 2).collect(),
                Some(&second),
            );
            assert!(third.carried);
            assert_eq!(ints(&third.offsets), plus(2));
            assert_eq!(ints(third.lens()), plus(3));
            assert_eq!(
                ints(&third.row_index),
                (0..start.len() as i32).collect::<Vec<_>>()
            );
        }
        // A row that did not move (it waited), or another row count: host values.
        let first = DecodeStep::new(shape, 2, vec![5, 8]);
        let waited = DecodeStep::next(shape, 2, vec![6, 8], Some(&first));
        assert!(!waited.carried);
        assert_eq!(ints(&waited.offsets), [6, 8]);
        assert_eq!(ints(waited.lens()), [7, 9]);
        let joined = DecodeStep::next(shape, 2, vec![6, 9, 0], Some(&first));
        assert!(!joined.carried);
        assert_eq!(ints(&joined.offsets), [6, 9, 0]);
        assert_eq!(ints(&joined.row_index), [0, 1, 2]);
    }

    #[test]
    fn decode_masks_only_rows_of_different_lengths() {
        let shape = BatchShape {
            rows: 4,
            capacity: 256,
        };
        // One row, or rows at one position: every row sees all of 0..kv_len.
        for uniform in [vec![7], vec![5, 5, 5]] {
            let step = DecodeStep::new(shape, 2, uniform.clone());
            assert!(step.mask().is_none());
            let lens: Vec<i32> = uniform.iter().map(|&p| p as i32 + 1).collect();
            assert_eq!(step.lens().as_slice::<i32>(), &lens[..]);
        }
        // Different positions: row i sees 0..=positions[i] and no more.
        let step = DecodeStep::new(shape, 2, vec![2, 0, 3]);
        let mask = step.mask().expect("a mask");
        assert_eq!(mask.shape(), &[3, 1, 1, 4]);
        let seen: Vec<bool> = mask.as_slice::<bool>().to_vec();
        #[rustfmt::skip]
        assert_eq!(seen, [
            true, true, true, false,
            true, false, false, false,
            true, true, true, true,
        ]);
        // The same rule as lengths, for the CUDA kernel that takes them.
        assert_eq!(step.lens().as_slice::<i32>(), &[3, 1, 4]);
    }

    #[test]
    fn appends_and_grows_without_losing_data() {
        let mut cache = KvCache::new();
        let mut all = Vec::new();
        let mut total = 0;
        for (i, n) in [3usize, 1, 300, 1, 700].into_iter().enumerate() {
            let k = random::normal::<f32>(&[1, 2, n as i32, 4][..], None, None, None).unwrap();
            let v = k.multiply(Array::from_f32(i as f32 + 2.0)).unwrap();
            let (ck, cv) = cache.update_and_fetch(&k, &v).unwrap();
            total += n;
            all.push(k);
            assert_eq!(ck.shape(), &[1, 2, total as i32, 4]);
            assert_eq!(cv.shape(), &[1, 2, total as i32, 4]);
            let expect = ops::concatenate(&all, 2).unwrap();
            assert!(ck.eq_values(&expect).unwrap());
            assert!(cache.capacity() >= total && cache.capacity().is_multiple_of(GROWTH_STEP));
        }
        assert_eq!(cache.offset(), total);
        // Geometric growth: capacity stays within 25% (+ one step) of use.
        assert!(cache.capacity() <= total + total / 4 + GROWTH_STEP);
    }
}
