#!/usr/bin/env bash
# Prefill speed vs prompt length of Hearth on a dummy Qwen3.5-35B-A3B (real
# dimensions, fewer layers, bf16) on one H200 with MLX's CUDA backend.
#
# Uses the files `bash bench/cuda/h200.sh prepare` builds, copied under
# target/q35dev/ (ignored; carried to the device):
#   device run, carry [target/q35dev/stash]: bash bench/cuda/qwen35_prefill.sh stash
#   device run, carry [target/q35dev/run]:   bash bench/cuda/qwen35_prefill.sh run
# Environment: LAYERS (default 8), LENGTHS (default "4096 16384 52000").
set -euo pipefail
cd "$(dirname "$0")/../.."
phase=${1:?stash|run}
WHEEL=mlx_cuda_13-0.32.2-py3-none-manylinux_2_35_x86_64.whl
STASH=/root/stash
D=target/q35dev
case "$phase" in
stash)
  mkdir -p $STASH && cp $D/stash/* $STASH/ && ls -la $STASH
  ;;
run)
  cat $STASH/wheel.part1 $D/run/wheel.part2 > /tmp/$WHEEL
  echo "$(cat $D/run/wheel.sha256)  /tmp/$WHEEL" | sha256sum -c
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/$WHEEL \
      $STASH/mlx-0.32.2-cp312-*.whl
  ln -sfn /opt/torch/.venv/lib/python3.12/site-packages/nvidia /tmp/site/nvidia
  export LD_LIBRARY_PATH=/tmp/site/mlx/lib CUDA_HOME=/tmp/site/nvidia/cu13
  mkdir -p /tmp/tok && xz -dc $STASH/tokenizer.json.xz > /tmp/tok/tokenizer.json
  cp $STASH/tokenizer_config.json /tmp/tok/
  xz -dc $D/run/hearth.xz > /tmp/hearth && chmod +x /tmp/hearth
  H=/tmp/hearth
  LAYERS=${LAYERS:-8}
  M=/tmp/q35-${LAYERS}l
  time $H dev dummy-model --arch qwen3_5_moe --shape "qwen3.5-35b-a3b,layers=$LAYERS" \
      --dtype bf16 --tokenizer /tmp/tok/tokenizer.json --out $M
  # ' hello' is one token of the Qwen3 vocabulary.
  prompt() { python3 -c "import sys; sys.stdout.write(' hello' * $1)" > /tmp/p$1.txt; }
  prompt 64
  echo "warm-up (kernel compilation)"
  $H generate --model $M --prompt-file /tmp/p64.txt --max-tokens 4 --ignore-eos --json \
      > "$OUT/warmup.json"
  for n in ${LENGTHS:-4096 16384 52000}; do
    prompt "$n"
    $H generate --model $M --prompt-file /tmp/p$n.txt --max-tokens 8 --ignore-eos --json \
        --prefill-chunk ${CHUNK:-2048} > "$OUT/prefill-$n.json"
    python3 - "$OUT/prefill-$n.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(json.dumps({k: s[k] for k in s if "prefill" in k or "prompt" in k or "peak" in k or "decode" in k}))
PY
  done
  ;;
esac
