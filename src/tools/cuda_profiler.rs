//! Brackets a region for Nsight Compute's `--profile-from-start off`, so a
//! profile holds only the steps of interest: `cuProfilerStart` and
//! `cuProfilerStop` of the CUDA driver, looked up at run time (nothing
//! links against CUDA). Without the driver (a CPU build, macOS) both do
//! nothing and [`start`] says so.

use std::ffi::{c_char, c_int, c_void, CStr};

#[cfg(unix)]
extern "C" {
    fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

/// `RTLD_NOW` (the same value on Linux and macOS).
#[cfg(unix)]
const RTLD_NOW: c_int = 2;

/// Calls the driver's `name()` (`CUresult f(void)`); true if it exists and
/// returned `CUDA_SUCCESS`.
#[cfg(unix)]
fn call(name: &CStr) -> bool {
    // SAFETY: dlopen/dlsym get NUL-terminated names; the symbol, when
    // found, is the driver's `CUresult cuProfilerStart(void)` (or Stop),
    // which takes no arguments and returns an int-sized enum.
    unsafe {
        let lib = dlopen(c"libcuda.so.1".as_ptr(), RTLD_NOW);
        if lib.is_null() {
            return false;
        }
        let f = dlsym(lib, name.as_ptr());
        if f.is_null() {
            return false;
        }
        let f: extern "C" fn() -> c_int = std::mem::transmute(f);
        f() == 0
    }
}

#[cfg(not(unix))]
fn call(_name: &CStr) -> bool {
    false
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
