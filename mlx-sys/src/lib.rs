//! Raw bindings to mlx-c 0.7.0, generated at build time (see build.rs).
//!
//! This crate stands in for the published `mlx-sys` 0.7.0 through
//! `[patch.crates-io]`, so that mlx-rs builds on Linux as well as on macOS.
//! Off Apple targets it also supplies two things the published crate assumes:
//! the 16-bit float storage types and `mach_approximate_time`.

#![allow(non_upper_case_globals)]
#![allow(non_camel_case_types)]
#![allow(non_snake_case)]
#![allow(clippy::all)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

/// IEEE half-precision value as raw bits (bindgen's shape for `__fp16` on ARM).
#[cfg(not(target_vendor = "apple"))]
#[repr(transparent)]
#[derive(Debug, Default, Copy, Clone, PartialEq, Eq)]
pub struct float16_t(pub u16);

/// bfloat16 value as raw bits (bindgen's shape for `__bf16` on ARM).
#[cfg(not(target_vendor = "apple"))]
pub type bfloat16_t = u16;

/// mlx-rs seeds its default random key from `mach_approximate_time`, a Darwin
/// call that `mach-sys` declares on every platform. Off Apple we provide it as
/// a monotonic nanosecond clock.
#[cfg(not(target_vendor = "apple"))]
#[no_mangle]
pub extern "C" fn mach_approximate_time() -> u64 {
    use std::sync::OnceLock;
    use std::time::Instant;
    static START: OnceLock<Instant> = OnceLock::new();
    let start = START.get_or_init(Instant::now);
    // Offset by wall-clock so different processes get different seeds.
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    wall.wrapping_add(start.elapsed().as_nanos() as u64)
}
