//! Builds mlx-c 0.7.0 and generates its Rust bindings.
//!
//! * Apple targets: mlx-c and MLX are built from source with CMake exactly as the
//!   published `mlx-sys` does (Metal + Accelerate, MLX fetched by mlx-c's CMake).
//! * Other targets (Linux): mlx-c is compiled statically against the prebuilt
//!   `libmlx.so` shipped by the PyPI wheel `mlx-cpu` (or `mlx-cuda-*`), after
//!   three small source fixes (see docs/mlx-on-linux.md).
//!
//! mlx-c's sources come from the published `mlx-sys` crate, downloaded by cargo
//! through the stand-alone manifest in `upstream/`; nothing third-party is
//! committed to our repository.

use std::{
    env, fs,
    path::{Path, PathBuf},
    process::Command,
};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=compat");
    println!("cargo:rerun-if-env-changed=HEARTH_MLX_DIR");
    println!("cargo:rerun-if-env-changed=HEARTH_MLX_C_DIR");

    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let apple = env::var("CARGO_CFG_TARGET_VENDOR").as_deref() == Ok("apple");

    let pristine = locate_mlx_c_sources(&manifest_dir);
    let mlx_c = out_dir.join("mlx-c");
    if mlx_c.exists() {
        fs::remove_dir_all(&mlx_c).expect("clear old mlx-c copy");
    }
    copy_dir(&pristine, &mlx_c).expect("copy mlx-c sources into OUT_DIR");

    if apple {
        build_apple(&mlx_c);
    } else {
        let mlx_dir = find_mlx_dir(&manifest_dir);
        let mlx_dir = mlx_dir.canonicalize().unwrap_or(mlx_dir);
        // A new wheel in .venv (scripts/requirements-linux.txt) must rebuild mlx-c.
        for file in ["include/mlx/version.h", "lib/libmlx.so"] {
            println!("cargo:rerun-if-changed={}", mlx_dir.join(file).display());
        }
        patch_for_linux(&mlx_c, &manifest_dir.join("compat"));
        patch_for_mlx(&mlx_c, &mlx_dir);
        build_linux(&mlx_c, &mlx_dir);
    }
    generate_bindings(&mlx_c, &out_dir, apple);
}

/// Finds the unpacked published `mlx-sys-0.7.0/src/mlx-c` directory.
fn locate_mlx_c_sources(manifest_dir: &Path) -> PathBuf {
    if let Some(dir) = env::var_os("HEARTH_MLX_C_DIR") {
        return PathBuf::from(dir);
    }
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let upstream = manifest_dir.join("upstream/Cargo.toml");
    println!("cargo:rerun-if-changed={}", upstream.display());
    let metadata = |offline: bool| {
        let mut cmd = Command::new(&cargo);
        cmd.arg("metadata").args(["--format-version", "1"]);
        if offline {
            cmd.arg("--offline");
        }
        cmd.arg("--manifest-path").arg(&upstream);
        cmd.output()
    };
    let mut output = metadata(true).expect("run cargo metadata");
    if !output.status.success() {
        // Not downloaded yet: let cargo fetch the published crate (no build).
        let status = Command::new(&cargo)
            .arg("fetch")
            .arg("--manifest-path")
            .arg(&upstream)
            .status()
            .expect("run cargo fetch");
        assert!(
            status.success(),
            "cargo fetch of the mlx-c sources failed; run `cargo fetch --manifest-path {}`",
            upstream.display()
        );
        output = metadata(true).expect("run cargo metadata");
    }
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("cargo metadata JSON");
    let packages = json["packages"].as_array().expect("packages array");
    let manifest = packages
        .iter()
        .find(|p| p["name"] == "mlx-sys" && p["version"] == "0.7.0")
        .and_then(|p| p["manifest_path"].as_str())
        .expect("mlx-sys 0.7.0 in cargo metadata");
    let dir = Path::new(manifest).parent().unwrap().join("src/mlx-c");
    assert!(
        dir.join("CMakeLists.txt").exists(),
        "mlx-c sources missing at {}",
        dir.display()
    );
    dir
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// Replaces `needle` once in `file`, failing loudly if mlx-c changed under us.
fn replace_in(file: &Path, needle: &str, replacement: &str) {
    let text = fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    assert!(
        text.contains(needle),
        "{}: expected text not found; the mlx-c fix needs updating",
        file.display()
    );
    fs::write(file, text.replacen(needle, replacement, 1)).expect("write patched file");
}

/// The fixes mlx-c 0.7.0 needs to build with GCC 12 on x86_64 (docs/mlx-on-linux.md).
fn patch_for_linux(mlx_c: &Path, compat: &Path) {
    // 1. `std::format` is missing from libstdc++ 12: route it to a small shim.
    let io_h = mlx_c.join("mlx/c/private/io.h");
    fs::copy(
        compat.join("format_compat.h"),
        mlx_c.join("mlx/c/private/format_compat.h"),
    )
    .expect("copy format shim");
    replace_in(
        &io_h,
        "#include <streambuf>",
        "#include <streambuf>\n#include \"mlx/c/private/format_compat.h\"",
    );
    let text = fs::read_to_string(&io_h).unwrap();
    fs::write(
        &io_h,
        text.replace("std::format(", "hearth_compat::format("),
    )
    .unwrap();

    // 2. float16_t / bfloat16_t exist only on ARM: give x86_64 16-bit storage types
    //    so the `mlx_array_*_float16/bfloat16` accessors (raw bit access) exist.
    replace_in(
        &mlx_c.join("mlx/c/half.h"),
        "#ifdef __cplusplus\n}\n#endif",
        "#if !defined(HAS_FLOAT16) && !defined(HAS_BFLOAT16)\n\
         #include <stdint.h>\n\
         #define HAS_FLOAT16\n#define HAS_BFLOAT16\n\
         typedef uint16_t float16_t; /* IEEE half, raw bits */\n\
         typedef uint16_t bfloat16_t; /* bfloat16, raw bits */\n\
         #endif\n\n#ifdef __cplusplus\n}\n#endif",
    );
}

/// mlx-c 0.7.0 was written against MLX 0.32.2; later 0.32 releases changed
/// one C++ signature it calls. Adapts the call to the headers it builds with.
fn patch_for_mlx(mlx_c: &Path, mlx_dir: &Path) {
    let ops_h = fs::read_to_string(mlx_dir.join("include/mlx/ops.h")).unwrap_or_default();
    // MLX 0.32.3 added `global_scale` (NVFP4 scales) to `gather_qmm`, before
    // `sorted_indices`; mlx-c's C API has no such argument: pass none.
    let gather_qmm = ops_h
        .split("array gather_qmm(")
        .nth(1)
        .and_then(|rest| rest.split(");").next())
        .unwrap_or("");
    if gather_qmm.contains("global_scale") {
        let ops_cpp = mlx_c.join("mlx/c/ops.cpp");
        let mut text = fs::read_to_string(&ops_cpp).expect("read mlx-c ops.cpp");
        let start = text
            .find("int mlx_gather_qmm(")
            .expect("mlx-c ops.cpp: mlx_gather_qmm not found; the MLX fix needs updating");
        let at = start
            + text[start..]
                .find("            sorted_indices,")
                .expect("mlx-c ops.cpp: gather_qmm's sorted_indices not found");
        text.insert_str(at, "            std::nullopt,\n");
        fs::write(&ops_cpp, text).expect("write patched ops.cpp");
    }
}

fn find_mlx_dir(manifest_dir: &Path) -> PathBuf {
    if let Some(dir) = env::var_os("HEARTH_MLX_DIR") {
        return PathBuf::from(dir);
    }
    let venv_lib = manifest_dir.join("../.venv/lib");
    if let Ok(entries) = fs::read_dir(&venv_lib) {
        for entry in entries.flatten() {
            let candidate = entry.path().join("site-packages/mlx");
            if candidate.join("lib/libmlx.so").exists() {
                return candidate;
            }
        }
    }
    panic!(
        "no prebuilt MLX found: run `scripts/setup.sh` (creates .venv with the mlx-cpu wheel) \
         or set HEARTH_MLX_DIR to the wheel's `mlx` package directory (holding lib/libmlx.so)"
    );
}

fn build_linux(mlx_c: &Path, mlx_dir: &Path) {
    let lib_dir = mlx_dir.join("lib");
    assert!(
        lib_dir.join("libmlx.so").exists(),
        "{} has no libmlx.so",
        lib_dir.display()
    );
    let dst = cmake::Config::new(mlx_c)
        .define("MLX_C_USE_SYSTEM_MLX", "ON")
        .define("MLX_C_BUILD_EXAMPLES", "OFF")
        .define("BUILD_SHARED_LIBS", "OFF")
        .define("MLX_DIR", mlx_dir.join("share/cmake/MLX"))
        .define("CMAKE_BUILD_TYPE", "Release")
        .profile("Release")
        .build();
    for sub in ["lib", "lib64"] {
        println!("cargo:rustc-link-search=native={}", dst.join(sub).display());
    }
    println!("cargo:rustc-link-lib=static=mlxc");
    println!("cargo:rustc-link-search=native={}", lib_dir.display());
    println!("cargo:rustc-link-lib=dylib=mlx");
    println!("cargo:rustc-link-lib=dylib=stdc++");
    // Read by dependents' build scripts as DEP_MLX_LIB_DIR to set an rpath.
    println!("cargo:lib_dir={}", lib_dir.display());
    println!("cargo:include={}", mlx_dir.join("include").display());
}

fn build_apple(mlx_c: &Path) {
    let mut config = cmake::Config::new(mlx_c);
    config
        .define("CMAKE_INSTALL_PREFIX", ".")
        .define("CMAKE_C_COMPILER", "/usr/bin/cc")
        .define("CMAKE_CXX_COMPILER", "/usr/bin/c++")
        .define("CMAKE_BUILD_TYPE", "Release")
        .define("MLX_C_BUILD_EXAMPLES", "OFF")
        .define("MLX_BUILD_METAL", "ON")
        .define("MLX_BUILD_ACCELERATE", "ON")
        .profile("Release");
    let dst = config.build();
    let build = dst.join("build");
    println!(
        "cargo:rustc-link-search=native={}",
        build.join("lib").display()
    );
    println!(
        "cargo:rustc-link-search=native={}",
        dst.join("lib").display()
    );
    println!(
        "cargo:rustc-link-search=native={}",
        build.join("_deps/mlx-build").display()
    );
    println!(
        "cargo:rustc-link-search=native={}",
        build.join("_deps/mlx-build/mlx/io").display()
    );
    for lib in ["mlx", "mlxc", "gguflib"] {
        println!("cargo:rustc-link-lib=static={lib}");
    }
    println!("cargo:rustc-link-lib=c++");
    println!("cargo:rustc-link-lib=dylib=objc");
    for framework in ["Foundation", "Metal", "Accelerate"] {
        println!("cargo:rustc-link-lib=framework={framework}");
    }
}

fn generate_bindings(mlx_c: &Path, out_dir: &Path, apple: bool) {
    let mut headers: Vec<PathBuf> = fs::read_dir(mlx_c.join("mlx/c"))
        .expect("mlx-c headers")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "h"))
        .collect();
    headers.sort();
    let mut builder = bindgen::Builder::default()
        .rust_target("1.73.0".parse().expect("rust target"))
        .clang_arg(format!("-I{}", mlx_c.display()))
        .blocklist_function("malloc")
        .blocklist_function("realloc");
    if !apple {
        // Defined in lib.rs with the same shapes bindgen gives them on ARM.
        builder = builder
            .blocklist_type("float16_t")
            .blocklist_type("bfloat16_t");
    }
    for header in &headers {
        builder = builder.header(header.to_string_lossy());
    }
    builder
        .generate()
        .expect("generate mlx-c bindings")
        .write_to_file(out_dir.join("bindings.rs"))
        .expect("write bindings.rs");
}
