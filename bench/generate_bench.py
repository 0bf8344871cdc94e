"""Single-sequence speed: `hearth generate` vs mlx-lm's generate loop.

Both run on the same model folder, the same prompt token ids and the same
BLAS, in alternating fresh processes; each reports prefill tok/s (prompt
tokens / time to first token) and decode tok/s (tokens after the first /
time after the first), the definitions mlx_lm.generate prints. Neither stops
at EOS, so both generate exactly --max-tokens tokens. Prints a Markdown table
of medians and the Hearth / mlx-lm ratios; --out appends it to a file.

Usage:
  .venv/bin/python bench/generate_bench.py --model DIR [--model DIR2 ...]
      [--prompt-tokens 512] [--max-tokens 128] [--runs 5] [--out FILE]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEARTH = ROOT / "target" / "release" / "hearth"

MLX_LM_RUNNER = r"""
import json, sys, time
import mlx.core as mx
from mlx_lm import load
from mlx_lm.generate import generate_step
model_path, ids_file, max_tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
ids = json.load(open(ids_file))
model, _ = load(model_path)
mx.reset_peak_memory()
start = time.perf_counter()
first = None
n = 0
for (tok, _), _ in zip(generate_step(mx.array(ids), model, max_tokens=max_tokens), range(max_tokens)):
    if first is None:
        first = time.perf_counter()
    n += 1
end = time.perf_counter()
print(json.dumps({
    "prefill_tokens_per_second": len(ids) / (first - start),
    "decode_tokens_per_second": (n - 1) / (end - first) if n > 1 else 0.0,
    "completion_tokens": n,
    "peak_memory_bytes": mx.get_peak_memory(),
}))
"""


def blas_env() -> dict:
    """Same BLAS for both: Debian's OpenBLAS, one thread (FACTS.md)."""
    env = dict(os.environ)
    lib = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3"
    if os.path.exists(lib):
        env["LD_PRELOAD"] = lib
        env.setdefault("OPENBLAS_CORETYPE", "SkylakeX")
        env["OPENBLAS_NUM_THREADS"] = "1"
    return env


def prompt_ids(model: Path, n: int) -> list:
    """n token ids of ordinary text, from the model's own tokenizer."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model))
    text = (ROOT / "README.md").read_text() * 20
    ids = tok.encode(text, add_special_tokens=False)[:n]
    assert len(ids) == n, f"README too short for {n} tokens"
    return ids


def run_hearth(model: Path, ids_file: Path, max_tokens: int, env: dict) -> dict:
    ids = json.loads(ids_file.read_text())
    # The CLI takes text; feed the ids through --prompt-ids.
    out = subprocess.run(
        [str(HEARTH), "generate", "--model", str(model), "--prompt-ids",
         ",".join(map(str, ids)), "--max-tokens", str(max_tokens),
         "--ignore-eos", "--json"],
        capture_output=True, text=True, env=env, check=True,
    )
    return json.loads(out.stdout)


def run_mlx_lm(model: Path, ids_file: Path, max_tokens: int, env: dict) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", MLX_LM_RUNNER, str(model), str(ids_file), str(max_tokens)],
        capture_output=True, text=True, env=env, check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", action="append", required=True, type=Path)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    env = blas_env()

    lines = [
        f"prompt {args.prompt_tokens} tokens, {args.max_tokens} generated, "
        f"{args.runs} alternating runs each, medians; BLAS: "
        f"{env.get('LD_PRELOAD', 'wheel default')} threads={env.get('OPENBLAS_NUM_THREADS', '-')}",
        "",
        "| model | prefill tok/s hearth | prefill tok/s mlx-lm | ratio | decode tok/s hearth | decode tok/s mlx-lm | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for model in args.model:
        ids = prompt_ids(model, args.prompt_tokens)
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(ids, f)
            ids_file = Path(f.name)
        results = {"hearth": [], "mlx-lm": []}
        for i in range(args.runs):
            order = [("hearth", run_hearth), ("mlx-lm", run_mlx_lm)]
            if i % 2:
                order.reverse()
            for name, fn in order:
                r = fn(model, ids_file, args.max_tokens, env)
                assert r["completion_tokens"] == args.max_tokens, (name, r)
                results[name].append(r)
                print(f"{model.name} run {i} {name}: prefill "
                      f"{r['prefill_tokens_per_second']:.1f} decode "
                      f"{r['decode_tokens_per_second']:.1f}", file=sys.stderr)

        def med(name, key):
            return statistics.median(r[key] for r in results[name])

        pf_h, pf_m = med("hearth", "prefill_tokens_per_second"), med("mlx-lm", "prefill_tokens_per_second")
        dc_h, dc_m = med("hearth", "decode_tokens_per_second"), med("mlx-lm", "decode_tokens_per_second")
        lines.append(
            f"| {model.name} | {pf_h:.1f} | {pf_m:.1f} | {pf_h / pf_m:.2f}x "
            f"| {dc_h:.1f} | {dc_m:.1f} | {dc_h / dc_m:.2f}x |"
        )
    table = "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "a") as f:
            f.write(f"\n## {time.strftime('%Y-%m-%d %H:%M')}\n\n`{' '.join(sys.argv)}`\n\n{table}\n")


if __name__ == "__main__":
    main()
