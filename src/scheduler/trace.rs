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
//! start of a burst: every buffer is allocated afresh); then, on Linux, what
//! the engine thread itself did in the step: its CPU time in microseconds,
//! the times it was preempted (involuntary context switches), the CPU it
//! ended on, and the burst (a run of steps between idle spells, counted
//! from 0), so a slow step shows whether the thread computed, waited or was
//! pushed off its core; then the part of that CPU time spent in the kernel
//! (`sys_us`), the times the thread blocked (voluntary context switches:
//! device syncs, locks) and the page faults it took, which show whether a
//! slow step was host syscalls and faults (managed memory moving between
//! host and device, a sandbox's slow system calls) rather than graph
//! building; last, the part of the decode pass's time spent in MLX's
//! evaluation call (encoding and launching its kernels; the rest of it is
//! building the graph). Used to see where step time goes on a GPU
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
    /// The part of `decode_us` spent in MLX's evaluation call.
    pub queue_us: u64,
}

/// What the calling thread has used so far (zeros where the OS does not
/// say: only Linux reports per thread).
#[derive(Debug, Default, Clone, Copy)]
struct Usage {
    /// User plus system CPU time, µs.
    cpu_us: u64,
    /// System (kernel) CPU time, µs.
    sys_us: u64,
    /// Involuntary context switches (preemptions).
    preempted: u64,
    /// Voluntary context switches (the thread blocked).
    waits: u64,
    /// Minor plus major page faults.
    faults: u64,
}

impl Usage {
    /// What was used between `self` (earlier) and `later`.
    fn until(self, later: Usage) -> Usage {
        Usage {
            cpu_us: later.cpu_us.saturating_sub(self.cpu_us),
            sys_us: later.sys_us.saturating_sub(self.sys_us),
            preempted: later.preempted.saturating_sub(self.preempted),
            waits: later.waits.saturating_sub(self.waits),
            faults: later.faults.saturating_sub(self.faults),
        }
    }
}

fn thread_usage() -> Usage {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: getrusage writes a plain struct we own.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) } == 0 {
            let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
            return Usage {
                cpu_us: us(usage.ru_utime) + us(usage.ru_stime),
                sys_us: us(usage.ru_stime),
                preempted: usage.ru_nivcsw as u64,
                waits: usage.ru_nvcsw as u64,
                faults: (usage.ru_minflt + usage.ru_majflt) as u64,
            };
        }
    }
    Usage::default()
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
    usage_at_start: Usage,
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
                     cpu_us\tpreempted\tcpu\tburst\tsys_us\twaits\tfaults\tqueue_us"
                );
                Some(StepTrace {
                    out,
                    origin: Instant::now(),
                    last_end: None,
                    burst: 0,
                    usage_at_start: Usage::default(),
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
        let used = self.usage_at_start.until(thread_usage());
        let gap = self
            .last_end
            .map(|last| started.saturating_duration_since(last).as_micros())
            .unwrap_or(0);
        self.last_end = Some(ended);
        let _ = writeln!(
            self.out,
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
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
            used.cpu_us,
            used.preempted,
            current_cpu(),
            self.burst,
            used.sys_us,
            used.waits,
            used.faults,
            stats.queue_us,
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

    /// Writes one byte per page of `len` bytes of newly mapped memory, so
    /// the thread takes page faults (a heap allocation may reuse pages that
    /// are already resident).
    fn touch_fresh_pages(len: usize) {
        #[cfg(target_os = "linux")]
        // SAFETY: an anonymous private mapping we own, written within its
        // length and unmapped before returning.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            for i in (0..len).step_by(4096) {
                std::ptr::write_volatile(p.cast::<u8>().add(i), 1);
            }
            libc::munmap(p, len);
        }
        #[cfg(not(target_os = "linux"))]
        let _ = len;
    }

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
            queue_us: 16,
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
        // A block (a voluntary switch) and fresh pages written (faults).
        std::thread::sleep(std::time::Duration::from_millis(2));
        touch_fresh_pages(16 << 20);
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
            let sys: u64 = second["sys_us"].parse().unwrap();
            assert!(sys <= cpu, "sys_us {sys} > cpu_us {cpu}");
            let waits: u64 = second["waits"].parse().unwrap();
            assert!(waits >= 1, "waits {waits}");
            let faults: u64 = second["faults"].parse().unwrap();
            assert!(faults >= 1, "faults {faults}");
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
            ("queue_us", "16"),
        ] {
            assert_eq!(row.get(name), Some(&want), "{name}");
        }
    }
}
