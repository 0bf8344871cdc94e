"""Reference outputs of mlx-lm's sparse MoE block with a shared expert
(Qwen3-Next / Qwen3.5-MoE: `Qwen3NextSparseMoeBlock`) for Hearth's moe.rs.

Makes seeded random weights and inputs, runs the block dense and after
mlx-lm-style quantization (experts 4-bit, router and shared-expert gate
8-bit), and writes into --out:
  hf.safetensors      dense weights in Hugging Face's fused layout
                      (mlp.experts.gate_up_proj / down_proj, gate rows first)
  q.safetensors       quantized weights in MLX layout (mlp.switch_mlp.*)
  x{i}.npy            inputs [B, L, hidden]
  dense{i}.npy, q{i}.npy  the block's outputs
"""

import argparse
import json
import sys
from types import SimpleNamespace

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten
from mlx_lm.models.qwen3_next import Qwen3NextSparseMoeBlock

from mlx_compat import gather_qmm_without_global_scale


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=4)
    ap.add_argument("--moe-ffn", type=int, default=64)
    ap.add_argument("--shared-ffn", type=int, default=128)
    args = ap.parse_args()
    gather_qmm_without_global_scale()

    cfg = SimpleNamespace(
        hidden_size=args.hidden,
        moe_intermediate_size=args.moe_ffn,
        shared_expert_intermediate_size=args.shared_ffn,
        norm_topk_prob=True,
        num_experts=args.experts,
        num_experts_per_tok=args.top_k,
    )
    mx.random.seed(42)
    block = Qwen3NextSparseMoeBlock(cfg)
    # Spread the router so top-k choices are clear-cut.
    block.gate.weight = mx.random.normal(block.gate.weight.shape) * 0.5
    mx.eval(block.parameters())
    inputs = [
        mx.random.normal((1, 40, args.hidden)),  # 160 token/expert pairs: sorted
        mx.random.normal((2, 3, args.hidden)),  # 24 pairs: unsorted
    ]

    w = {f"mlp.{k}": v for k, v in tree_flatten(block.parameters())}
    hf = {k: v for k, v in w.items() if ".switch_mlp." not in k}
    sw = "mlp.switch_mlp"
    hf["mlp.experts.gate_up_proj"] = mx.concatenate(
        [w[f"{sw}.gate_proj.weight"], w[f"{sw}.up_proj.weight"]], axis=1
    )
    hf["mlp.experts.down_proj"] = w[f"{sw}.down_proj.weight"]
    mx.save_safetensors(f"{args.out}/hf.safetensors", hf)
    for i, x in enumerate(inputs):
        np.save(f"{args.out}/x{i}.npy", np.array(x))
        np.save(f"{args.out}/dense{i}.npy", np.array(block(x)))

    def predicate(path, module):
        if not hasattr(module, "to_quantized"):
            return False
        if path.endswith("mlp.gate") or path.endswith("shared_expert_gate") or path in (
            "gate",
            "shared_expert_gate",
        ):
            return {"group_size": 64, "bits": 8}
        return True

    nn.quantize(block, group_size=64, bits=4, class_predicate=predicate)
    q = {f"mlp.{k}": v for k, v in tree_flatten(block.parameters())}
    mx.save_safetensors(f"{args.out}/q.safetensors", q)
    for i, x in enumerate(inputs):
        np.save(f"{args.out}/q{i}.npy", np.array(block(x)))
    json.dump(
        {
            "inputs": len(inputs),
            "gate_bits": block.gate.bits,
            "expert_bits": block.switch_mlp.up_proj.bits,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
