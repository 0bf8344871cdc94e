# Shared settings for the peer-server scripts (sourced, not run).
#
# Every peer lives in its own venv under .hearth/peers/<name>/venv so its pins
# never touch the project's .venv, and every server (Hearth included) gets the
# same BLAS: Debian's OpenBLAS, one thread (see ../../docs/bench.md).

PEERS_ROOT=${HEARTH_PEERS_DIR:-"$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.hearth/peers"}
PEERS_PYTHON=${PYTHON:-python3}
OPENBLAS_LIB=/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3

peer_log() { printf '\033[1m== %s\033[0m\n' "$*" >&2; }

# Export the BLAS environment Hearth runs with (Linux only; a no-op elsewhere).
# Hearth preloads OpenBLAS by itself (src/blas.rs); the peers need it named.
peer_blas_env() {
  if [[ "$(uname -s)" == Linux && -e "$OPENBLAS_LIB" ]]; then
    export LD_PRELOAD="$OPENBLAS_LIB"
    export OPENBLAS_NUM_THREADS=1
  fi
}

peer_known() {
  case "$1" in
    mlx-lm | mlx-openai-server) return 0 ;;
    *) echo "unknown peer '$1' (known: mlx-lm, mlx-openai-server)" >&2; return 1 ;;
  esac
}
