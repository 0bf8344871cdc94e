//! Brackets a region for Nsight Compute's `--profile-from-start off`, so a
//! profile holds only the steps of interest: `cuProfilerStart` and
//! `cuProfilerStop` of the CUDA driver, looked up at run time (nothing
//! links against CUDA). Without the driver (a CPU build, macOS) both do
//! nothing and [`start`] says so.

use std::ffi::{c_int, CStr};

/// Calls the driver's `name()` (`CUresult f(void)`); true if it exists and
/// returned `CUDA_SUCCESS`.
fn call(name: &CStr) -> bool {
    let Some(f) = crate::device::cuda_driver_fn(name) else {
        return false;
    };
    // SAFETY: the symbol is the driver's `CUresult cuProfilerStart(void)`
    // (or Stop), which takes no arguments and returns an int-sized enum.
    let f: extern "C" fn() -> c_int = unsafe { std::mem::transmute(f) };
    f() == 0
}

/// Starts the profiled region; false where there is no CUDA driver.
pub fn start() -> bool {
    call(c"cuProfilerStart")
}

/// Ends the profiled region.
pub fn stop() {
    call(c"cuProfilerStop");
}

#[cfg(test)]
mod tests {
    #[test]
    fn without_a_driver_nothing_happens() {
        // CI has no GPU: the lookup fails cleanly instead of crashing.
        if std::path::Path::new("/dev/nvidiactl").exists() {
            return;
        }
        assert!(!super::start());
        super::stop();
    }
}
