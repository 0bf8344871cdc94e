//! Tauri's build step (reads tauri.conf.json, the icons and the shell page),
//! plus the rpath to the prebuilt `libmlx` on Linux (as the core's build.rs).
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_MLX_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_MLX_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
    tauri_build::build();
}
