#!/usr/bin/env bash
# Runs every check and test: set-up (idempotent), formatting, clippy, the
# Rust unit and integration tests (including live parity against mlx-lm).
set -euo pipefail
cd "$(dirname "$0")/.."
HEARTH_SKIP_BUILD=1 scripts/setup.sh
echo "== cargo fmt --check" >&2
cargo fmt --all -- --check
echo "== cargo clippy" >&2
cargo clippy --workspace --all-targets --release --locked -q -- -D warnings
echo "== ui: typecheck and Vitest" >&2
npm run --prefix ui typecheck --silent
npm test --prefix ui --silent
echo "== cargo test" >&2
cargo test --workspace --release --locked
