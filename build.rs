//! Build script of the `hearth` crate:
//! - lets binaries and tests find the prebuilt `libmlx` at run time (Linux):
//!   mlx-sys publishes the library directory as `DEP_MLX_LIB_DIR`;
//! - embeds the web UI: every file of `ui/dist` (built by `npm run build` in
//!   `ui/`) becomes an `include_bytes!` entry of `$OUT_DIR/ui_assets.rs`. When
//!   `ui/dist` is missing the list is empty and the binary still builds; `/`
//!   then says how to build the UI (src/webui.rs).
use std::{
    fmt::Write,
    path::{Path, PathBuf},
};

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_MLX_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_MLX_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
    embed_ui();
}

fn embed_ui() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let dist = manifest.join("ui").join("dist");
    // Cargo scans the folder recursively; a missing folder reruns this
    // script on every build, so a first `npm run build` is picked up.
    println!("cargo:rerun-if-changed={}", dist.display());
    let mut files = Vec::new();
    if dist.join("index.html").is_file() {
        collect(&dist, &dist, &mut files);
    }
    files.sort();
    // Copies, so that rebuilding the UI during a compile cannot pull files
    // from under it.
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let copies = out_dir.join("ui");
    let _ = std::fs::remove_dir_all(&copies);
    let mut code = String::from("pub static ASSETS: &[(&str, &[u8])] = &[\n");
    for (i, (name, path)) in files.iter().enumerate() {
        let copy = copies.join(i.to_string());
        std::fs::create_dir_all(&copies).expect("create the UI copy folder");
        std::fs::copy(path, &copy).expect("copy a UI file");
        let _ = writeln!(
            code,
            "    ({name:?}, include_bytes!({:?})),",
            copy.display().to_string()
        );
    }
    code.push_str("];\n");
    std::fs::write(out_dir.join("ui_assets.rs"), code).expect("write ui_assets.rs");
}

fn collect(root: &Path, dir: &Path, files: &mut Vec<(String, String)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(root, &path, files);
        } else if let Ok(rel) = path.strip_prefix(root) {
            let name = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            files.push((name, path.display().to_string()));
        }
    }
}
