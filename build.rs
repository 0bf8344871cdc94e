//! Lets binaries and tests find the prebuilt `libmlx` at run time (Linux):
//! mlx-sys publishes the library directory as `DEP_MLX_LIB_DIR`.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_MLX_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_MLX_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
