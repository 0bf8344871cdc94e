//! Benchmark harness (in progress).
