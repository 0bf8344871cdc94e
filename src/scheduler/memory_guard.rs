//! Device memory shared with other processes (MLX's CUDA backend).
//!
//! The KV budget is fixed at load from the memory free then, and MLX's
//! buffer cache may by default grow to nearly all of a GPU. Neither sees a
//! process that starts, or grows, later on the same card: an allocation
//! then fails, and in MLX 0.32.2 a failed allocation in the middle of a
//! step leaves the CUDA context unusable ("an illegal memory access" on
//! every later step; bench/results/h100-2026-12-06-s26.md). So the engine
//! looks at the device's free memory (the driver's count, every process
//! included) before a step that grows the KV buffers, and now and then
//! while it runs, and keeps `reserve` bytes free:
//!
//! - short of it, MLX's cached buffers go back to the device first (they
//!   count as free for this process, but not for the others);
//! - still short, a waiting request is not admitted while others run (they
//!   will finish and free theirs); with nothing running it is refused with
//!   a 503 the client can retry, instead of taking the server down.
//!
//! What a request needs is its KV buffers (when they grow) plus the memory
//! a step works in beyond them: activations, attention scores, logits. The
//! latter is not estimated from the model but measured: the largest
//! [`working_bytes`] of the steps run so far (the warm-up's full prompt
//! chunk among them), so it follows the backend's real kernels.
//!
//! Where the free memory is unknown (CPU, Metal) the guard does nothing.
//! docs/scheduler.md, "Sharing a GPU".

use std::time::{Duration, Instant};

/// How often a running engine looks at the device's free memory between
/// steps that grow the KV buffers (one driver call each).
pub const LOOK_INTERVAL: Duration = Duration::from_millis(250);

/// What to do before allocating `need` more bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Return MLX's cached buffers to the device first.
    pub release_cache: bool,
    /// After that, `need` bytes fit with `reserve` to spare.
    pub fits: bool,
}

/// The plan for allocating `need` bytes when the device has `free` bytes
/// free and MLX's cache holds `cached` of this process's, keeping `reserve`
/// free: nothing to do while `free` covers both; else the cache goes back
/// (if it holds anything) and the allocation fits if it covered the rest.
pub fn plan(free: usize, cached: usize, need: usize, reserve: usize) -> Plan {
    let want = need.saturating_add(reserve);
    if free >= want {
        return Plan {
            release_cache: false,
            fits: true,
        };
    }
    Plan {
        release_cache: cached > 0,
        fits: free.saturating_add(cached) >= want,
    }
}

/// The memory a step worked in beyond what stayed allocated: MLX's peak
/// during the step less the larger of its live memory before and after
/// (KV buffers, weights and the prefix cache's entries stay; activations,
/// attention scores and logits come and go).
pub fn working_bytes(peak: usize, before: usize, after: usize) -> usize {
    peak.saturating_sub(before.max(after))
}

/// Measures one piece of work's working memory ([`working_bytes`]): MLX's
/// live memory before it, its peak count restarted for it, and the live
/// memory after (the engine's steps; `hearth dev prefill-bench`'s passes).
pub struct WorkingProbe {
    before: usize,
}

impl WorkingProbe {
    pub fn start() -> Self {
        let before = mlx_rs::memory::active_memory().unwrap_or(0);
        crate::device::restart_peak();
        WorkingProbe { before }
    }

    /// The working memory since [`Self::start`].
    pub fn finish(self) -> usize {
        let peak = mlx_rs::memory::peak_memory().unwrap_or(0);
        let after = mlx_rs::memory::active_memory().unwrap_or(0);
        working_bytes(peak, self.before, after)
    }
}

/// The engine's view of the device's free memory.
pub struct MemoryGuard {
    reserve: usize,
    probe: fn() -> Option<usize>,
    last_look: Option<Instant>,
    /// The free bytes the last look read.
    last_free: Option<usize>,
    last_warning: Option<Instant>,
    /// The most working memory one step has needed ([`working_bytes`]).
    step_working: usize,
}

/// Least time between two warnings in the log (under lasting pressure the
/// engine may release its cache at every look).
const WARN_INTERVAL: Duration = Duration::from_secs(10);

impl MemoryGuard {
    /// Keeps `reserve` bytes free (0: off), reading the free memory from
    /// `probe` (`None`: unknown, nothing is done).
    pub fn new(reserve: usize, probe: fn() -> Option<usize>) -> Self {
        MemoryGuard {
            reserve,
            probe,
            last_look: None,
            last_free: None,
            last_warning: None,
            step_working: 0,
        }
    }

    /// Whether the guard is on and the device's free memory known.
    pub fn active(&self) -> bool {
        self.reserve > 0 && (self.probe)().is_some()
    }

    /// Records a step's working memory; true if it is the most seen yet.
    pub fn record_step(&mut self, working: usize) -> bool {
        let more = working > self.step_working;
        self.step_working = self.step_working.max(working);
        more
    }

    /// The most working memory one step has needed so far: a request is
    /// admitted only if this fits beside its KV buffers.
    pub fn step_working(&self) -> usize {
        self.step_working
    }

    /// Whether a warning may go to the log now (at most one per
    /// [`WARN_INTERVAL`]); the caller logs at debug level otherwise.
    pub fn warn_now(&mut self) -> bool {
        let now = Instant::now();
        let due = self
            .last_warning
            .is_none_or(|t| now.saturating_duration_since(t) >= WARN_INTERVAL);
        if due {
            self.last_warning = Some(now);
        }
        due
    }

    /// The plan for `need` more bytes (`None`: the guard is off or the free
    /// memory unknown), and the free bytes it was made on.
    pub fn look(&mut self, need: usize, cached: usize) -> Option<(Plan, usize)> {
        if self.reserve == 0 {
            return None;
        }
        self.last_look = Some(Instant::now());
        self.last_free = (self.probe)();
        let free = self.last_free?;
        Some((plan(free, cached, need, self.reserve), free))
    }

    /// The free bytes the last [`look`](Self::look) read (for messages).
    pub fn last_free(&self) -> Option<usize> {
        self.last_free
    }

    /// Whether a look between steps is due ([`LOOK_INTERVAL`] since the last).
    pub fn due(&self, now: Instant) -> bool {
        self.reserve > 0
            && self
                .last_look
                .is_none_or(|t| now.saturating_duration_since(t) >= LOOK_INTERVAL)
    }

    pub fn reserve(&self) -> usize {
        self.reserve
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: usize = 1 << 30;

    #[test]
    fn free_memory_beyond_the_reserve_needs_nothing() {
        let p = plan(10 * GIB, 3 * GIB, 2 * GIB, GIB);
        assert_eq!(
            p,
            Plan {
                release_cache: false,
                fits: true
            }
        );
        // Exactly enough is enough.
        assert!(plan(3 * GIB, 0, 2 * GIB, GIB).fits);
    }

    #[test]
    fn the_cache_goes_back_first_and_counts_as_free() {
        // 1.5 GiB free, 2 GiB cached: need 2 + reserve 1 fits after the release.
        let p = plan(3 * GIB / 2, 2 * GIB, 2 * GIB, GIB);
        assert_eq!(
            p,
            Plan {
                release_cache: true,
                fits: true
            }
        );
        // Too little even with the cache: release it anyway (others may
        // need it), and the allocation waits.
        let p = plan(GIB / 2, GIB, 2 * GIB, GIB);
        assert_eq!(
            p,
            Plan {
                release_cache: true,
                fits: false
            }
        );
        // Nothing cached: nothing to release.
        assert_eq!(
            plan(0, 0, 0, GIB),
            Plan {
                release_cache: false,
                fits: false
            }
        );
    }

    #[test]
    fn working_memory_is_the_peak_above_what_stays() {
        // 10 GiB live before, 12 after (the KV grew), 15 at the peak.
        assert_eq!(working_bytes(15 * GIB, 10 * GIB, 12 * GIB), 3 * GIB);
        // A step that frees more than it allocates.
        assert_eq!(working_bytes(11 * GIB, 10 * GIB, 8 * GIB), GIB);
        // A peak below both (no reset on this backend): nothing.
        assert_eq!(working_bytes(GIB, 2 * GIB, 2 * GIB), 0);
        let mut guard = MemoryGuard::new(GIB, || None);
        assert_eq!(guard.step_working(), 0);
        assert!(guard.record_step(2 * GIB));
        assert!(!guard.record_step(GIB), "a smaller step keeps the most");
        assert!(!guard.record_step(2 * GIB));
        assert_eq!(guard.step_working(), 2 * GIB);
    }

    #[test]
    fn an_off_guard_or_an_unknown_device_plans_nothing() {
        let mut off = MemoryGuard::new(0, || Some(0));
        assert!(!off.active());
        assert!(!MemoryGuard::new(GIB, || None).active());
        assert!(MemoryGuard::new(GIB, || Some(0)).active());
        assert_eq!(off.look(GIB, 0), None);
        assert!(!off.due(Instant::now()));
        let mut cpu = MemoryGuard::new(GIB, || None);
        assert_eq!(cpu.look(GIB, 0), None);
        let mut gpu = MemoryGuard::new(GIB, || Some(GIB / 2));
        let now = Instant::now();
        assert!(gpu.due(now));
        let (p, free) = gpu.look(0, 0).expect("a plan");
        assert_eq!((p.fits, free), (false, GIB / 2));
        // Just looked: the next look between steps waits for the interval.
        assert!(!gpu.due(Instant::now()));
        assert!(gpu.due(Instant::now() + LOOK_INTERVAL));
    }
}
