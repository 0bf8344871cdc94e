#!/usr/bin/env python3
"""MLX primitives in one decoding step of mlx-lm, by name.

    .venv/bin/python bench/step_ops_mlx_lm.py MODEL_DIR [--prompt-tokens 16]

The mlx-lm side of `hearth dev step-ops` (src/tools/step_ops.rs): load the
model, prefill `prompt-tokens` token ids (100, 101, ...), build the next
token's logits without evaluating them, export the graph with
`mx.export_to_dot` and count its primitive nodes by label. Run both on the
same checkpoint and device: on the CPU, MLX's fast kernels (RMSNorm, RoPE,
attention) appear as their fallback graphs in both.
"""
import argparse
import collections
import os
import re
import tempfile

import mlx.core as mx
from mlx_lm import load
from mlx_lm.models.cache import make_prompt_cache


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--prompt-tokens", type=int, default=16)
    args = ap.parse_args()
    model, _ = load(args.model)
    cache = make_prompt_cache(model)
    prompt = mx.array([list(range(100, 100 + max(1, args.prompt_tokens)))])
    logits = model(prompt, cache=cache)
    mx.eval(logits, [c.state for c in cache])
    logits = model(mx.array([[7]]), cache=cache)[:, -1, :]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "step.dot")
        mx.export_to_dot(path, logits)
        dot = open(path).read()
    counts = collections.Counter()
    for line in dot.splitlines():
        if "shape=rectangle" not in line:
            continue
        m = re.search(r'label ="([^"]*)"', line)
        if m:
            label = m.group(1)
            counts["Compiled" if label.startswith("Compiled") else label] += 1
    layers = len(model.layers)
    print(f"{args.model}: {sum(counts.values())} primitives in one decoding step ({layers} layers)\n")
    print("| primitive | count |\n|---|---:|")
    for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"| {name} | {n} |")


if __name__ == "__main__":
    main()
