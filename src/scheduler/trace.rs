//! Optional per-step trace for profiling (`HEARTH_STEP_TRACE=/path/file.tsv`).
//!
//! One tab-separated line per engine step: microseconds since the engine
//! started, the step's duration, the idle gap before it (host time spent
//! outside `step`: commands, admission, metrics), decode rows, prompt tokens
//! prefilled, the batch span (rows allocated), whether the decode was
//! pipelined; then where the step's time went, in microseconds: prompt
//! passes (each ends in a device sync), sampling the first tokens of the
//! prompts they completed, building and queueing the decode pass, and
//! reading back and sending the previous decode's tokens (waits for the
//! device); MiB in MLX's buffer cache when the step began (0 at the
//! start of a burst: every buffer is allocated afresh); last, on Linux, what
//! the engine thread itself did in the step: its CPU time in microseconds,
//! the times it was preempted (involuntary context switches), the CPU it
//! ended on, and the burst (a run of steps between idle spells, counted
//! from 0), so a slow step shows whether the thread computed, waited or was
//! pushed off its core. Used to see where step time goes on a GPU
//! (docs/cuda.md); off by default, costs one buffered write and one
//! `getrusage` per step when on.

use std::{
    fs::File,
    io::{BufWriter, Write},
    time::Instant,
};

/// What one step did, for the trace.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct StepStats {
    pub decode_rows: usize,
    pub prefill_tokens: usize,
    pub span: usize,
    pub pipelined: bool,
    pub prefill_us: u64,
    pub first_tokens_us: u64,
    pub decode_us: u64,
    pub deliver_us: u64,
    pub cache_mb: u64,
}

/// The calling thread's CPU time (µs) and involuntary context switches so
/// far; zeros where the OS does not say (only Linux reports per thread).
fn thread_usage() -> (u64, u64) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: getrusage writes a plain struct we own.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) } == 0 {
            let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
            return (
                us(usage.ru_utime) + us(usage.ru_stime),
                usage.ru_nivcsw as u64,
            );
        }
    }
    (0, 0)
}

/// The CPU the calling thread runs on (-1 where unknown).
fn current_cpu() -> i64 {
    // SAFETY: no arguments, no memory.
    #[cfg(target_os = "linux")]
    return i64::from(unsafe { libc::sched_getcpu() });
    #[cfg(not(target_os = "linux"))]
    return -1;
}

pub(super) struct StepTrace {
    out: BufWriter<File>,
    origin: Instant,
    last_end: Option<Instant>,
    /// Bursts ended so far (the current burst's number).
    burst: u64,
    /// [`thread_usage`] when the current step began.
    usage_at_start: (u64, u64),
}

impl StepTrace {
    /// Opens the trace file named by `HEARTH_STEP_TRACE`, if set.
    pub(super) fn from_env() -> Option<Self> {
        Self::create(std::path::Path::new(&std::env::var_os(
            "HEARTH_STEP_TRACE",
        )?))
    }

    /// Starts a trace file at `path` (its header line written).
    fn create(path: &std::path::Path) -> Option<Self> {
        match File::create(path) {
            Ok(file) => {
                let mut out = BufWriter::new(file);
                let _ = writeln!(
                    out,
                    "t_us\tstep_us\tgap_us\tdecode_rows\tprefill_tokens\tspan\tpipelined\t\
                     prefill_us\tfirst_tokens_us\tdecode_us\tdeliver_us\tcache_mb\t\
                     cpu_us\tpreempted\tcpu\tburst"
                );
                Some(StepTrace {
                    out,
                    origin: Instant::now(),
                    last_end: None,
                    burst: 0,
                    usage_at_start: (0, 0),
                })
            }
            Err(e) => {
                tracing::warn!(path = ?path, error = %e, "cannot open the step trace");
                None
            }
        }
    }

    /// Marks the start of a step (on the engine thread).
    pub(super) fn begin(&mut self) {
        self.usage_at_start = thread_usage();
    }

    /// Writes the line of a step that began at `started` (after
    /// [`StepTrace::begin`], on the same thread).
    pub(super) fn record(&mut self, started: Instant, ended: Instant, stats: StepStats) {
        let (cpu_us, preempted) = thread_usage();
        let (cpu0, preempted0) = self.usage_at_start;
        let gap = self
            .last_end
            .map(|last| started.saturating_duration_since(last).as_micros())
            .unwrap_or(0);
        self.last_end = Some(ended);
        let _ = writeln!(
            self.out,
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            started.saturating_duration_since(self.origin).as_micros(),
            ended.saturating_duration_since(started).as_micros(),
            gap,
            stats.decode_rows,
            stats.prefill_tokens,
            stats.span,
            u8::from(stats.pipelined),
            stats.prefill_us,
            stats.first_tokens_us,
            stats.decode_us,
            stats.deliver_us,
            stats.cache_mb,
            cpu_us.saturating_sub(cpu0),
            preempted.saturating_sub(preempted0),
            current_cpu(),
            self.burst,
        );
    }

    /// An idle engine (nothing running) ends the current burst: the next
    /// step's gap is not host overhead.
    pub(super) fn idle(&mut self) {
        if self.last_end.is_some() {
            self.burst += 1;
        }
        self.last_end = None;
        let _ = self.out.flush();
    }
}

impl Drop for StepTrace {
    fn drop(&mut self) {
        let _ = self.out.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every line has the header's columns, in its order (the summary
    /// script reads them by name).
    #[test]
    fn lines_match_the_header() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace.tsv");
        let mut trace = StepTrace::create(&path).unwrap();
        let t0 = Instant::now();
        trace.begin();
        let stats = StepStats {
            decode_rows: 3,
            prefill_tokens: 40,
            span: 4,
            pipelined: true,
            prefill_us: 11,
            first_tokens_us: 12,
            decode_us: 13,
            deliver_us: 14,
            cache_mb: 15,
        };
        trace.record(t0, t0 + std::time::Duration::from_micros(500), stats);
        // A burst ends; the next step is in burst 1.
        trace.idle();
        trace.begin();
        // Some CPU time on this thread, so the count has something to show.
        let spin = Instant::now();
        let mut x = 0u64;
        while spin.elapsed() < std::time::Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        trace.record(t0, t0 + std::time::Duration::from_micros(700), stats);
        drop(trace);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
        assert_eq!(lines.len(), 3);
        let row: std::collections::HashMap<&str, &str> = lines[0]
            .iter()
            .copied()
            .zip(lines[1].iter().copied())
            .collect();
        assert_eq!(lines[0].len(), lines[1].len());
        assert_eq!(lines[0].len(), lines[2].len());
        let second: std::collections::HashMap<&str, &str> = lines[0]
            .iter()
            .copied()
            .zip(lines[2].iter().copied())
            .collect();
        assert_eq!(row.get("burst"), Some(&"0"));
        assert_eq!(second.get("burst"), Some(&"1"));
        if cfg!(target_os = "linux") {
            // 20 ms of spinning is at least 10 ms of this thread's CPU time
            // (the clock ticks in microseconds, but a loaded machine may
            // take the core away for part of it).
            let cpu: u64 = second["cpu_us"].parse().unwrap();
            assert!(cpu >= 10_000, "cpu_us {cpu}");
            let on: i64 = second["cpu"].parse().unwrap();
            assert!(on >= 0, "cpu {on}");
        }
        for (name, want) in [
            ("step_us", "500"),
            ("gap_us", "0"),
            ("decode_rows", "3"),
            ("prefill_tokens", "40"),
            ("span", "4"),
            ("pipelined", "1"),
            ("prefill_us", "11"),
            ("first_tokens_us", "12"),
            ("decode_us", "13"),
            ("deliver_us", "14"),
            ("cache_mb", "15"),
        ] {
            assert_eq!(row.get(name), Some(&want), "{name}");
        }
    }
}
