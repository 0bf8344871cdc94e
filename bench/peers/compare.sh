#!/usr/bin/env bash
# One-command comparison: start the servers on the same model with the same
# BLAS, run `hearth bench --compare` (servers alternate repeat by repeat),
# write JSON + Markdown, stop the servers (also on failure or Ctrl-C).
#
#   bench/peers/compare.sh [--model DIR] [--servers hearth,mlx-lm,mlx-openai-server]
#                          [--out bench/results/NAME] [-- MORE hearth bench ARGS]
#
# Defaults: a dummy Qwen3 "tiny" model in /tmp/qwen3-tiny (made with
# `hearth dev dummy-model` if missing), all three servers, the quick preset,
# output bench/results/serve-<date>.{json,md}. Ports: hearth 8000,
# mlx-lm 8081, mlx-openai-server 8082. Install peers first (install.sh).
# HEARTH_BIN selects the hearth binary (default target/release/hearth).
set -euo pipefail
source "$(dirname "$0")/common.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HEARTH=${HEARTH_BIN:-$ROOT/target/release/hearth}

model=/tmp/qwen3-tiny
servers=hearth,mlx-lm,mlx-openai-server
out=$ROOT/bench/results/serve-$(date +%F)
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --servers) servers=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) sed -n '2,14p' "$0" >&2; exit 2 ;;
  esac
done

if [[ ! -d "$model" ]]; then
  peer_log "making the dummy model $model"
  "$HEARTH" dev dummy-model --arch qwen3 --shape tiny \
    --tokenizer "$ROOT/.hearth/fixtures/qwen3-tokenizer/tokenizer.json" --out "$model"
fi

port_of() {
  case "$1" in
    hearth) echo 8000 ;;
    mlx-lm) echo 8081 ;;
    mlx-openai-server) echo 8082 ;;
    *) peer_known "$1" ;;
  esac
}

started=()
cleanup() {
  for s in "${started[@]}"; do
    "$(dirname "$0")/stop.sh" "$s" "$(port_of "$s")" || true
  done
}
trap cleanup EXIT

compare=()
IFS=, read -r -a list <<< "$servers"
for s in "${list[@]}"; do
  port=$(port_of "$s")
  "$(dirname "$0")/start.sh" "$s" --model "$model" --port "$port" >/dev/null
  started+=("$s")
  compare+=("${s//-/_}=http://127.0.0.1:$port/v1")
done

mkdir -p "$(dirname "$out")"
"$HEARTH" bench --compare "$(IFS=,; echo "${compare[*]}")" --tokenizer "$model" \
  --json-out "$out.json" --markdown-out "$out.md" "${extra[@]}"
peer_log "wrote $out.md and $out.json"
