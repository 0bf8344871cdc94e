//! `GET /api/memory`: process RSS, MLX active/peak/cache memory, the KV
//! cache's use against its budget, system memory and a pressure level, plus
//! the last ten minutes of one-second samples for the Memory page's chart.
//!
//! A sampler task ([`spawn_sampler`]) takes one [`MemorySample`] a second
//! into a ring buffer; it also derives the generated tok/s the Status page
//! shows. "Pressure" is read from available memory (Linux has no macOS-style
//! pressure level): `normal` above 25 % available, `warning` above 10 %,
//! `critical` below.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex, Weak},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use axum::{extract::State, Json};
use serde::Serialize;

use crate::server::manager::ModelManager;

/// Seconds between samples.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);
/// Samples kept (ten minutes).
pub const HISTORY_LEN: usize = 600;

/// One point of the memory history.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MemorySample {
    /// Unix time in milliseconds.
    pub t_ms: u64,
    pub rss_bytes: Option<u64>,
    pub mlx_active_bytes: Option<usize>,
    pub mlx_peak_bytes: Option<usize>,
    pub mlx_cache_bytes: Option<usize>,
    pub kv_used_bytes: usize,
    pub kv_allocated_bytes: usize,
    pub kv_budget_bytes: usize,
    /// The most memory one engine step has worked in beyond what stays
    /// allocated (docs/scheduler.md, "Sharing a GPU").
    pub step_working_bytes: usize,
    pub system_total_bytes: u64,
    pub system_used_bytes: u64,
    pub system_available_bytes: u64,
    /// `normal`, `warning` or `critical` (see the module docs).
    pub pressure: &'static str,
    /// Generated tokens per second since the previous sample.
    pub tokens_per_second: f64,
    pub running: usize,
    pub queued: usize,
    #[serde(skip)]
    generated_tokens_total: u64,
}

/// The ring buffer of samples.
#[derive(Default)]
pub struct MemoryHistory {
    samples: Mutex<VecDeque<MemorySample>>,
}

impl MemoryHistory {
    fn push(&self, sample: MemorySample) {
        if let Ok(mut samples) = self.samples.lock() {
            if samples.len() == HISTORY_LEN {
                samples.pop_front();
            }
            samples.push_back(sample);
        }
    }

    fn last(&self) -> Option<MemorySample> {
        self.samples.lock().ok()?.back().cloned()
    }

    fn all(&self) -> Vec<MemorySample> {
        self.samples
            .lock()
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub fn latest_tokens_per_second(&self) -> f64 {
        self.last().map_or(0.0, |s| s.tokens_per_second)
    }
}

/// Reads every number of a [`MemorySample`].
struct Sampler {
    system: sysinfo::System,
    pid: Option<sysinfo::Pid>,
}

impl Sampler {
    fn new() -> Self {
        Self {
            system: sysinfo::System::new(),
            pid: sysinfo::get_current_pid().ok(),
        }
    }

    fn sample(&mut self, manager: &ModelManager, previous: Option<&MemorySample>) -> MemorySample {
        self.system.refresh_memory();
        let rss_bytes = self.pid.and_then(|pid| {
            self.system.refresh_processes_specifics(
                sysinfo::ProcessesToUpdate::Some(&[pid]),
                true,
                sysinfo::ProcessRefreshKind::nothing().with_memory(),
            );
            self.system.process(pid).map(|p| p.memory())
        });
        // No model loaded: the scheduler numbers are zeros.
        let scheduler = manager.current().map(|s| s.scheduler.status());
        let field =
            |f: fn(&crate::scheduler::SchedulerStatus) -> usize| scheduler.as_ref().map_or(0, f);
        let generated_tokens_total = scheduler.as_ref().map_or(0, |s| s.generated_tokens_total);
        let t_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let tokens_per_second = match previous {
            Some(p) if t_ms > p.t_ms => {
                let tokens = generated_tokens_total.saturating_sub(p.generated_tokens_total);
                tokens as f64 * 1000.0 / (t_ms - p.t_ms) as f64
            }
            _ => 0.0,
        };
        let total = self.system.total_memory();
        let available = self.system.available_memory();
        MemorySample {
            t_ms,
            rss_bytes,
            mlx_active_bytes: mlx_rs::memory::active_memory().ok(),
            mlx_peak_bytes: crate::device::peak_memory(),
            mlx_cache_bytes: mlx_rs::memory::cache_memory().ok(),
            kv_used_bytes: field(|s| s.kv_bytes_used),
            kv_allocated_bytes: field(|s| s.kv_bytes_allocated),
            kv_budget_bytes: field(|s| s.kv_bytes_budget),
            step_working_bytes: field(|s| s.step_working_bytes),
            system_total_bytes: total,
            system_used_bytes: self.system.used_memory(),
            system_available_bytes: available,
            pressure: pressure(available, total),
            tokens_per_second,
            running: field(|s| s.running),
            queued: field(|s| s.queued),
            generated_tokens_total,
        }
    }
}

/// The pressure level for `available` of `total` bytes.
pub fn pressure(available: u64, total: u64) -> &'static str {
    if total == 0 {
        return "normal";
    }
    let share = available as f64 / total as f64;
    if share < 0.10 {
        "critical"
    } else if share < 0.25 {
        "warning"
    } else {
        "normal"
    }
}

/// Samples once a second until the manager is dropped.
pub fn spawn_sampler(manager: Weak<ModelManager>) {
    tokio::spawn(async move {
        let mut sampler = Sampler::new();
        let mut ticker = tokio::time::interval(SAMPLE_INTERVAL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            ticker.tick().await;
            let Some(manager) = manager.upgrade() else {
                break;
            };
            let previous = manager.ui.memory.last();
            let sample = sampler.sample(&manager, previous.as_ref());
            manager.ui.memory.push(sample);
        }
    });
}

/// The answer of `/api/memory`.
#[derive(Debug, Serialize)]
pub struct MemoryBody {
    pub interval_s: f64,
    pub current: MemorySample,
    /// Oldest first; up to ten minutes.
    pub history: Vec<MemorySample>,
}

pub async fn memory(State(manager): State<Arc<ModelManager>>) -> Json<MemoryBody> {
    let history = manager.ui.memory.all();
    let current = match history.last() {
        Some(last) => last.clone(),
        // Before the sampler's first tick (or without it): sample now.
        None => Sampler::new().sample(&manager, None),
    };
    Json(MemoryBody {
        interval_s: SAMPLE_INTERVAL.as_secs_f64(),
        current,
        history,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pressure_levels() {
        assert_eq!(pressure(50, 100), "normal");
        assert_eq!(pressure(20, 100), "warning");
        assert_eq!(pressure(5, 100), "critical");
        assert_eq!(pressure(0, 0), "normal");
    }

    #[test]
    fn history_is_bounded() {
        let history = MemoryHistory::default();
        for i in 0..HISTORY_LEN + 5 {
            history.push(MemorySample {
                t_ms: i as u64,
                ..Default::default()
            });
        }
        let all = history.all();
        assert_eq!(all.len(), HISTORY_LEN);
        assert_eq!(all[0].t_ms, 5);
    }
}
