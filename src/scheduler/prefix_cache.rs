//! Prefix cache: finished sequences leave their KV (and, for Qwen3.5's
//! linear-attention layers, recurrent-state snapshots) behind so a later
//! prompt that starts with the same token ids skips that part of its
//! prefill. See docs/prefix-cache.md.
//!
//! An [`Entry`] is one token sequence with owned copies of every attention
//! layer's keys and values for all its positions, and recurrent-state
//! snapshots at some positions (a state is valid only at the exact position
//! it was taken). A lookup finds the entry sharing the longest prefix with
//! the prompt, capped at `prompt - 1` tokens (the last prompt token is
//! always run: its logits give the first output token); with recurrent
//! layers the reuse is the longest snapshot at or below that. Entries live
//! under a byte budget with least-recently-used eviction, and the scheduler
//! evicts more when a running sequence needs the memory.

use hearth_models::{BatchKv, BatchShape, RecurrentState};
use mlx_rs::{transforms, Array};

/// Recurrent-state snapshots are taken at the prompt chunk boundary that
/// crosses each multiple of this many prefill chunks, and at the prompt's
/// end (a snapshot of a real Qwen3.5 is tens of MB, so not at every chunk).
pub const SNAPSHOT_EVERY_CHUNKS: usize = 4;

/// Shortest reuse worth a hit: chat prompts all share a few template tokens
/// (`<|im_start|>system\n`), which would otherwise count as hits.
pub const MIN_REUSE_TOKENS: usize = 16;

/// Recurrent states of every layer at one position (`None` for attention
/// layers).
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub position: usize,
    pub states: Vec<Option<RecurrentState>>,
}

impl Snapshot {
    fn nbytes(&self) -> usize {
        self.states
            .iter()
            .flatten()
            .map(RecurrentState::nbytes)
            .sum()
    }
}

/// One cached token sequence.
#[derive(Debug)]
pub struct Entry {
    pub tokens: Vec<u32>,
    /// Per layer: keys and values `[1, kv_heads, tokens.len(), head_dim]`
    /// (`None` for linear-attention layers).
    pub kv: Vec<Option<(Array, Array)>>,
    /// Ascending positions; empty for models without recurrent layers.
    pub snapshots: Vec<Snapshot>,
    /// Whether the model has recurrent layers (reuse needs a snapshot).
    pub recurrent: bool,
    last_used: u64,
}

impl Entry {
    pub fn new(
        tokens: Vec<u32>,
        kv: Vec<Option<(Array, Array)>>,
        mut snapshots: Vec<Snapshot>,
        recurrent: bool,
    ) -> Self {
        snapshots.retain(|s| s.position > 0 && s.position <= tokens.len());
        snapshots.sort_by_key(|s| s.position);
        snapshots.dedup_by_key(|s| s.position);
        Entry {
            tokens,
            kv,
            snapshots,
            recurrent,
            last_used: 0,
        }
    }

    pub fn nbytes(&self) -> usize {
        let kv: usize = self
            .kv
            .iter()
            .flatten()
            .map(|(k, v)| k.nbytes() + v.nbytes())
            .sum();
        kv + self.snapshots.iter().map(Snapshot::nbytes).sum::<usize>()
    }

    /// Tokens of `prompt` this entry can supply (at most `prompt.len() - 1`).
    fn usable(&self, prompt: &[u32]) -> usize {
        let limit = prompt.len().saturating_sub(1);
        let common = common_prefix(&self.tokens, prompt).min(limit);
        if !self.recurrent {
            return common;
        }
        self.snapshots
            .iter()
            .rev()
            .map(|s| s.position)
            .find(|&p| p <= common)
            .unwrap_or(0)
    }

    /// The snapshot at exactly `position`.
    fn snapshot_at(&self, position: usize) -> Option<&Snapshot> {
        self.snapshots.iter().find(|s| s.position == position)
    }
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// What a prompt gets from the cache: `tokens` positions, with per-layer
/// KV (full entry arrays: load the first `tokens` positions) and the
/// recurrent states at exactly `tokens`.
#[derive(Debug)]
pub struct Hit {
    pub tokens: usize,
    pub kv: Vec<Option<(Array, Array)>>,
    pub states: Option<Vec<Option<RecurrentState>>>,
}

/// Counters of what the cache did (read by the metrics).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub hits: u64,
    pub misses: u64,
    pub reused_tokens: u64,
    pub evictions: u64,
}

/// The entries and their budget.
#[derive(Debug)]
pub struct PrefixCache {
    budget: usize,
    min_tokens: usize,
    entries: Vec<Entry>,
    bytes: usize,
    clock: u64,
    pub stats: Stats,
}

impl PrefixCache {
    /// A cache holding at most `budget` bytes (0 disables it) that reuses
    /// prefixes of at least `min_tokens` tokens.
    pub fn new(budget: usize, min_tokens: usize) -> Self {
        PrefixCache {
            budget,
            min_tokens: min_tokens.max(1),
            entries: Vec::new(),
            bytes: 0,
            clock: 0,
            stats: Stats::default(),
        }
    }

    pub fn enabled(&self) -> bool {
        self.budget > 0
    }

    pub fn budget(&self) -> usize {
        self.budget
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Number of token sequences held.
    pub fn entry_count(&self) -> usize {
        self.entries.len()
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// The longest reusable prefix of `prompt`, if any (counted as a hit or
    /// a miss; the entry becomes the most recently used).
    pub fn lookup(&mut self, prompt: &[u32]) -> Option<Hit> {
        if !self.enabled() {
            return None;
        }
        let best = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.usable(prompt), i))
            .filter(|&(n, _)| n >= self.min_tokens)
            .max_by_key(|&(n, i)| (n, self.entries[i].last_used));
        let Some((tokens, i)) = best else {
            self.stats.misses += 1;
            return None;
        };
        let now = self.tick();
        let entry = &mut self.entries[i];
        entry.last_used = now;
        let states = if entry.recurrent {
            Some(entry.snapshot_at(tokens)?.states.clone())
        } else {
            None
        };
        self.stats.hits += 1;
        self.stats.reused_tokens += tokens as u64;
        Some(Hit {
            tokens,
            kv: entry.kv.clone(),
            states,
        })
    }

    /// Adds `entry` as the most recently used one. An entry whose tokens are
    /// a prefix of the new one's is replaced (its snapshots move over: they
    /// are valid positions of the new sequence too); if the new tokens are a
    /// prefix of an existing entry, only the new snapshots are kept, in that
    /// entry. Then least recently used entries go until the budget holds.
    pub fn insert(&mut self, mut entry: Entry) {
        if !self.enabled() || entry.tokens.is_empty() || entry.nbytes() > self.budget {
            return;
        }
        let now = self.tick();
        if let Some(i) = self.entries.iter().position(|e| {
            e.tokens.len() >= entry.tokens.len() && e.tokens.starts_with(&entry.tokens)
        }) {
            let old = self.entries[i].nbytes();
            let target = &mut self.entries[i];
            for s in entry.snapshots.drain(..) {
                if target.snapshot_at(s.position).is_none() {
                    target.snapshots.push(s);
                }
            }
            target.snapshots.sort_by_key(|s| s.position);
            target.last_used = now;
            self.bytes = self.bytes - old + self.entries[i].nbytes();
        } else {
            let mut k = 0;
            while k < self.entries.len() {
                if entry.tokens.starts_with(&self.entries[k].tokens) {
                    let old = self.entries.swap_remove(k);
                    self.bytes -= old.nbytes();
                    for s in old.snapshots {
                        if entry.snapshot_at(s.position).is_none() {
                            entry.snapshots.push(s);
                        }
                    }
                } else {
                    k += 1;
                }
            }
            entry.snapshots.sort_by_key(|s| s.position);
            entry.last_used = now;
            self.bytes += entry.nbytes();
            self.entries.push(entry);
        }
        self.shrink_to(self.budget);
    }

    /// Evicts least recently used entries until at most `bytes` are held.
    pub fn shrink_to(&mut self, bytes: usize) {
        while self.bytes > bytes {
            let Some(i) = self
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(i, _)| i)
            else {
                break;
            };
            let old = self.entries.swap_remove(i);
            self.bytes -= old.nbytes();
            self.stats.evictions += 1;
        }
    }
}

/// Whether a prompt chunk `start..end` of a prompt of `prompt_len` tokens
/// ends where a recurrent-state snapshot is kept.
pub fn snapshot_due(start: usize, end: usize, prompt_len: usize, prefill_chunk: usize) -> bool {
    let every = (prefill_chunk * SNAPSHOT_EVERY_CHUNKS).max(1);
    end == prompt_len || end / every > start / every
}

/// Copies row `row`'s recurrent states (at its current position
/// `position`); `None` for a model without recurrent layers.
pub fn snapshot(kv: &[BatchKv], row: usize, position: usize) -> anyhow::Result<Option<Snapshot>> {
    let states = kv
        .iter()
        .map(|l| l.copy_row_state(row))
        .collect::<Result<Vec<_>, _>>()?;
    if states.iter().all(Option::is_none) {
        return Ok(None);
    }
    let arrays: Vec<&Array> = states
        .iter()
        .flatten()
        .flat_map(|s| [&s.conv, &s.ssm])
        .collect();
    transforms::eval(arrays)?;
    Ok(Some(Snapshot { position, states }))
}

/// An entry of row `row`, whose buffers hold exactly `tokens` (KV at
/// positions `0..tokens.len()`, recurrent states just after the last one),
/// plus `snapshots` taken earlier in that row.
pub fn capture(
    kv: &[BatchKv],
    row: usize,
    tokens: Vec<u32>,
    mut snapshots: Vec<Snapshot>,
) -> anyhow::Result<Entry> {
    let len = tokens.len();
    let layers = kv
        .iter()
        .map(|l| l.copy_row_kv(row, len))
        .collect::<Result<Vec<_>, _>>()?;
    let arrays: Vec<&Array> = layers.iter().flatten().flat_map(|(k, v)| [k, v]).collect();
    transforms::eval(arrays)?;
    let last = snapshot(kv, row, len)?;
    let recurrent = last.is_some();
    snapshots.extend(last);
    Ok(Entry::new(tokens, layers, snapshots, recurrent))
}

/// Writes `hit` into row `row` of the batch buffers (of `shape`).
pub fn load(kv: &mut [BatchKv], shape: BatchShape, row: usize, hit: &Hit) -> anyhow::Result<()> {
    for (i, layer) in kv.iter_mut().enumerate() {
        let pair = hit.kv.get(i).and_then(Option::as_ref).map(|(k, v)| (k, v));
        let state = hit
            .states
            .as_ref()
            .and_then(|s| s.get(i))
            .and_then(Option::as_ref);
        layer.load_row(shape, row, hit.tokens, pair, state)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlx_rs::ops;

    /// An entry for a dense model: one layer, 4 bytes (f32) per position
    /// for K and for V.
    fn dense(tokens: &[u32]) -> Entry {
        let n = tokens.len() as i32;
        let k = ops::zeros::<f32>(&[1, 1, n, 1]).unwrap();
        Entry::new(tokens.to_vec(), vec![Some((k.clone(), k))], vec![], false)
    }

    fn state_snapshot(position: usize) -> Snapshot {
        let a = ops::zeros::<f32>(&[1, 2]).unwrap();
        Snapshot {
            position,
            states: vec![
                None,
                Some(RecurrentState {
                    conv: a.clone(),
                    ssm: a,
                }),
            ],
        }
    }

    fn hybrid(tokens: &[u32], snaps: &[usize]) -> Entry {
        let n = tokens.len() as i32;
        let k = ops::zeros::<f32>(&[1, 1, n, 1]).unwrap();
        let snapshots = snaps.iter().map(|&p| state_snapshot(p)).collect();
        Entry::new(
            tokens.to_vec(),
            vec![Some((k.clone(), k)), None],
            snapshots,
            true,
        )
    }

    #[test]
    fn longest_exact_prefix_and_always_one_token_left() {
        let mut c = PrefixCache::new(1 << 20, 1);
        c.insert(dense(&[1, 2, 3, 4, 5]));
        c.insert(dense(&[1, 2, 9]));
        assert_eq!(c.lookup(&[1, 2, 3, 4, 5, 6, 7]).unwrap().tokens, 5);
        // Identical prompt: the last token is run again.
        assert_eq!(c.lookup(&[1, 2, 3, 4, 5]).unwrap().tokens, 4);
        assert_eq!(c.lookup(&[1, 2, 9, 9]).unwrap().tokens, 3);
        assert_eq!(c.lookup(&[1, 7]).unwrap().tokens, 1);
        assert!(c.lookup(&[7, 1, 2]).is_none());
        assert!(c.lookup(&[1]).is_none(), "one token: nothing to reuse");
        assert_eq!(
            c.stats,
            Stats {
                hits: 4,
                misses: 2,
                reused_tokens: 13,
                evictions: 0
            }
        );
    }

    #[test]
    fn recurrent_reuse_stops_at_a_snapshot() {
        let mut c = PrefixCache::new(1 << 20, 1);
        c.insert(hybrid(&[1, 2, 3, 4, 5, 6, 7, 8], &[4, 8]));
        assert_eq!(c.lookup(&[1, 2, 3, 4, 5, 6, 7, 8, 9]).unwrap().tokens, 8);
        // Diverges at 6: the longest snapshot at or below is 4.
        let hit = c.lookup(&[1, 2, 3, 4, 5, 6, 0]).unwrap();
        assert_eq!(hit.tokens, 4);
        assert!(hit.states.unwrap()[1].is_some());
        // Identical prompt: 7 allowed, snapshot 4 used.
        assert_eq!(c.lookup(&[1, 2, 3, 4, 5, 6, 7, 8]).unwrap().tokens, 4);
        assert!(
            c.lookup(&[1, 2, 3, 0]).is_none(),
            "no snapshot at or below 3"
        );
    }

    #[test]
    fn extending_entries_replace_their_prefixes_and_keep_snapshots() {
        let mut c = PrefixCache::new(1 << 20, 1);
        c.insert(hybrid(&[1, 2, 3, 4], &[2, 4]));
        c.insert(hybrid(&[1, 2, 3, 4, 5, 6], &[6]));
        assert_eq!(c.entry_count(), 1);
        assert_eq!(c.lookup(&[1, 2, 3, 4, 0]).unwrap().tokens, 4);
        assert_eq!(c.lookup(&[1, 2, 3, 4, 5, 6, 0]).unwrap().tokens, 6);
        // A shorter repeat adds only its snapshots to the longer entry.
        c.insert(hybrid(&[1, 2, 3], &[3]));
        assert_eq!(c.entry_count(), 1);
        assert_eq!(c.lookup(&[1, 2, 3, 0]).unwrap().tokens, 3);
        let expect: usize = c.entries.iter().map(Entry::nbytes).sum();
        assert_eq!(c.bytes(), expect);
    }

    #[test]
    fn short_matches_are_misses() {
        let mut c = PrefixCache::new(1 << 20, 3);
        c.insert(dense(&[1, 2, 3, 4]));
        assert!(c.lookup(&[1, 2, 0]).is_none());
        assert_eq!(c.lookup(&[1, 2, 3, 0]).unwrap().tokens, 3);
        assert_eq!((c.stats.hits, c.stats.misses), (1, 1));
    }

    #[test]
    fn least_recently_used_entries_go_first() {
        // Each 4-token dense entry holds 32 bytes.
        let mut c = PrefixCache::new(64, 1);
        c.insert(dense(&[1, 1, 1, 1]));
        c.insert(dense(&[2, 2, 2, 2]));
        assert!(c.lookup(&[1, 1, 1, 1, 0]).is_some()); // 1 is now newer than 2
        c.insert(dense(&[3, 3, 3, 3]));
        assert_eq!(c.entry_count(), 2);
        assert_eq!(c.bytes(), 64);
        assert!(c.lookup(&[2, 2, 2, 2, 0]).is_none(), "2 was evicted");
        assert!(c.lookup(&[1, 1, 1, 1, 0]).is_some());
        assert_eq!(c.stats.evictions, 1);
        // Too large for the budget on its own: not kept, nothing evicted.
        c.insert(dense(&[4; 9]));
        assert!(c.lookup(&[4; 10]).is_none());
        assert_eq!(c.entry_count(), 2);
        c.shrink_to(0);
        assert_eq!((c.entry_count(), c.bytes()), (0, 0));
        let mut off = PrefixCache::new(0, 1);
        off.insert(dense(&[1, 2]));
        assert!(off.lookup(&[1, 2, 3]).is_none());
        assert_eq!(off.stats, Stats::default(), "disabled: nothing counted");
    }
}
