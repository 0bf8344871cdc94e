#!/usr/bin/env bash
# Install peer OpenAI-compatible servers, each in its own pinned venv under
# .hearth/peers/<name>/venv. Idempotent (a stamp file records the pins).
#
#   bench/peers/install.sh [mlx-lm] [mlx-openai-server]     (default: both)
#
# Pins (FACTS.md, seen working on Debian 12 x86_64 CPU):
#   mlx-lm:            mlx==0.32.4 mlx-cpu==0.32.4 mlx-lm==0.32.2
#   mlx-openai-server: mlx-openai-server==1.7.1, then mlx==0.31.2 mlx-cpu==0.31.2
#                      installed --no-deps in place of the CUDA MLX wheel its
#                      dependency tree resolves to on Linux (unusable without a GPU).
set -euo pipefail
source "$(dirname "$0")/common.sh"

install_mlx_lm() {
  local dir="$PEERS_ROOT/mlx-lm" pins="mlx==0.32.4 mlx-cpu==0.32.4 mlx-lm==0.32.2"
  [[ "$(cat "$dir/.stamp" 2>/dev/null)" == "$pins" ]] && { peer_log "mlx-lm: up to date"; return; }
  peer_log "mlx-lm: creating $dir/venv ($pins)"
  rm -rf "$dir/venv" && mkdir -p "$dir"
  "$PEERS_PYTHON" -m venv "$dir/venv"
  "$dir/venv/bin/pip" install -q --disable-pip-version-check $pins
  echo "$pins" > "$dir/.stamp"
}

install_mlx_openai_server() {
  local dir="$PEERS_ROOT/mlx-openai-server"
  local pins="mlx-openai-server==1.7.1 mlx==0.31.2 mlx-cpu==0.31.2"
  [[ "$(cat "$dir/.stamp" 2>/dev/null)" == "$pins" ]] && { peer_log "mlx-openai-server: up to date"; return; }
  peer_log "mlx-openai-server: creating $dir/venv ($pins; large: its deps include torch)"
  rm -rf "$dir/venv" && mkdir -p "$dir"
  "$PEERS_PYTHON" -m venv "$dir/venv"
  local pip=("$dir/venv/bin/pip" install -q --disable-pip-version-check)
  # The server with its declared dependencies. On Linux these resolve MLX to
  # the CUDA build (mlx-cuda-*), which cannot load without a GPU ...
  "${pip[@]}" mlx-openai-server==1.7.1
  # ... so replace it with the CPU build, without letting pip re-resolve.
  local cuda
  cuda=$("$dir/venv/bin/pip" list --format=freeze 2>/dev/null | grep -io '^mlx-cuda[^=]*' || true)
  if [[ -n "$cuda" ]]; then
    "$dir/venv/bin/pip" uninstall -q -y $cuda
  fi
  "${pip[@]}" --no-deps --force-reinstall mlx==0.31.2 mlx-cpu==0.31.2
  "$dir/venv/bin/python" -c "import mlx.core as mx; mx.eval(mx.ones(2) + 1)" \
    || { echo "mlx-openai-server venv: MLX does not load" >&2; return 1; }
  echo "$pins" > "$dir/.stamp"
}

targets=("$@")
((${#targets[@]})) || targets=(mlx-lm mlx-openai-server)
for t in "${targets[@]}"; do
  peer_known "$t"
  case "$t" in
    mlx-lm) install_mlx_lm ;;
    mlx-openai-server) install_mlx_openai_server ;;
  esac
done
