//! Per-sequence key/value cache.
//!
//! Each attention layer owns a [`KvCache`] holding `[B, kv_heads, capacity,
//! head_dim]` key and value buffers. New tokens are written in place with a
//! slice update; when the buffer is full it grows geometrically (by a quarter
//! of its size, at least [`GROWTH_STEP`] positions), so a sequence of `n`
//! tokens costs O(n) copying in total and never reallocates per token.

use mlx_rs::{
    ops::{
        self,
        indexing::{IndexOp, TryIndexMutOp},
    },
    Array,
};

use crate::error::Result;

/// Smallest growth of the cache, in positions.
pub const GROWTH_STEP: usize = 256;

#[derive(Debug, Default)]
pub struct KvCache {
    keys: Option<Array>,
    values: Option<Array>,
    offset: usize,
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
        self.keys.as_ref().map_or(0, Array::nbytes) + self.values.as_ref().map_or(0, Array::nbytes)
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

    /// The buffers, for evaluation.
    pub fn arrays(&self) -> impl Iterator<Item = &Array> {
        self.keys.iter().chain(self.values.iter())
    }

    /// Drops everything after the first `len` positions (prefix reuse).
    pub fn truncate(&mut self, len: usize) {
        self.offset = self.offset.min(len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlx_rs::random;

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
            assert!(ck.array_eq(&expect, None).unwrap().item::<bool>());
            assert!(cache.capacity() >= total && cache.capacity() % GROWTH_STEP == 0);
        }
        assert_eq!(cache.offset(), total);
        // Geometric growth: capacity stays within 25% (+ one step) of use.
        assert!(cache.capacity() <= total + total / 4 + GROWTH_STEP);
    }
}
