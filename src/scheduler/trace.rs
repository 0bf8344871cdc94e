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
//! device); last, MiB in MLX's buffer cache when the step began (0 at the
//! start of a burst: every buffer is allocated afresh). Used to see where
//! step time goes on a GPU (docs/cuda.md); off by default, costs one
//! buffered write per step when on.

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

pub(super) struct StepTrace {
    out: BufWriter<File>,
    origin: Instant,
    last_end: Option<Instant>,
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
                     prefill_us\tfirst_tokens_us\tdecode_us\tdeliver_us\tcache_mb"
                );
                Some(StepTrace {
                    out,
                    origin: Instant::now(),
                    last_end: None,
                })
            }
            Err(e) => {
                tracing::warn!(path = ?path, error = %e, "cannot open the step trace");
                None
            }
        }
    }

    pub(super) fn record(&mut self, started: Instant, ended: Instant, stats: StepStats) {
        let gap = self
            .last_end
            .map(|last| started.saturating_duration_since(last).as_micros())
            .unwrap_or(0);
        self.last_end = Some(ended);
        let _ = writeln!(
            self.out,
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
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
        );
    }

    /// An idle engine (nothing running) ends the current burst: the next
    /// step's gap is not host overhead.
    pub(super) fn idle(&mut self) {
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
        drop(trace);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
        assert_eq!(lines.len(), 2);
        let row: std::collections::HashMap<&str, &str> = lines[0]
            .iter()
            .copied()
            .zip(lines[1].iter().copied())
            .collect();
        assert_eq!(lines[0].len(), lines[1].len());
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
