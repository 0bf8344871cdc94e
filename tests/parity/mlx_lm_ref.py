"""Reference outputs from mlx-lm for Hearth's parity tests.

Given a model folder and prompt token ids, writes the first forward pass's
logits (float32 .npy, shape [L, vocab]) and prints JSON with the greedy
continuation produced by mlx-lm's own generate_step (its default sampler is
argmax). Hearth's tests compare against these, on the same files, live.
"""

import argparse
import json
import sys

import mlx.core as mx
import numpy as np
from mlx_lm import load
from mlx_lm.generate import generate_step

from mlx_compat import gather_qmm_without_global_scale


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-ids", help="comma-separated token ids")
    ap.add_argument("--prompt", help="text, tokenized by the model's tokenizer")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--logits-out", help="write first-forward logits here (.npy)")
    ap.add_argument("--prefill-step", type=int, default=2048)
    args = ap.parse_args()
    gather_qmm_without_global_scale()

    model, tokenizer = load(args.model)
    if args.prompt_ids:
        ids = [int(t) for t in args.prompt_ids.split(",")]
    else:
        ids = tokenizer.encode(args.prompt)

    if args.logits_out:
        logits = model(mx.array([ids]))[0].astype(mx.float32)
        np.save(args.logits_out, np.array(logits))

    tokens = []
    for (token, _), _ in zip(
        generate_step(
            mx.array(ids),
            model,
            max_tokens=args.max_tokens,
            prefill_step_size=args.prefill_step,
        ),
        range(args.max_tokens),
    ):
        tokens.append(int(token))
    text = tokenizer.decode(tokens)
    json.dump({"prompt_ids": ids, "tokens": tokens, "text": text}, sys.stdout)


if __name__ == "__main__":
    main()
