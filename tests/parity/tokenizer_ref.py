#!/usr/bin/env python3
"""Reference tokenizer outputs from Hugging Face `transformers`, for Hearth's parity tests.

Hearth's tokenizer (models/src/tokenizer.rs) must encode, decode and render chat templates exactly
as `transformers` does. models/tests/tokenizer.rs runs this script and compares its JSON output
with what the Rust side produces for the same cases.

Usage:
    tokenizer_ref.py --hf DIR   [--mlx-lm] < cases.json > results.json
    tokenizer_ref.py --gguf FILE           < cases.json > results.json

`--hf DIR` loads DIR with `AutoTokenizer.from_pretrained`; `--mlx-lm` also loads it with
`mlx_lm.tokenizer_utils.load` and reports that tokenizer's encodings too.

`--gguf FILE` loads the tokenizer a GGUF file describes. With PyTorch installed this is
`AutoTokenizer.from_pretrained(dir, gguf_file=name)`. transformers' GGUF reader imports torch even
for the tokenizer alone, so without torch the script reads the metadata with the `gguf` package
and hands it to the same transformers functions that `from_pretrained` uses for the conversion
(`get_gguf_tokenizer`'s grouping, `convert_gguf_tokenizer`, `TokenizersBackend`). The output's
"loader" field says which path ran.

cases.json:
    {"encode": [{"text": str, "add_special_tokens": bool}],
     "decode": [{"ids": [int], "skip_special_tokens": bool}],
     "chat":   [{"messages": [...], "tools": [...] | null, "add_generation_prompt": bool,
                 "enable_thinking": bool | null, "extra": {...},
                 "chat_template": str | null  (renders this template instead of the tokenizer's)}]}

results.json:
    {"loader": str, "bos_token": str | null, "eos_token": str | null, "chat_template": str | null,
     "encode": [[int]], "decode": [str], "chat": [{"text": str} | {"error": str}],
     "mlx_lm_encode": [[int]]   (only with --mlx-lm)}
"""

import argparse
import json
import os
import sys


def load_hf(directory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(directory), "transformers.AutoTokenizer"


def _gguf_metadata(path):
    """Every GGUF key/value as plain Python values, read with the `gguf` package."""
    from gguf import GGUFReader

    reader = GGUFReader(path)
    return {name: field.contents() for name, field in reader.fields.items() if not name.startswith("GGUF.")}


def load_gguf(path):
    try:
        import torch  # noqa: F401  (transformers' GGUF reader needs it)
    except ImportError:
        pass
    else:
        from transformers import AutoTokenizer

        directory, name = os.path.split(os.path.abspath(path))
        return AutoTokenizer.from_pretrained(directory, gguf_file=name), "transformers.AutoTokenizer(gguf_file=)"

    from transformers.integrations.gguf.gguf_tokenizer_mapping import (
        _SPECIAL_TOKENS,
        GGUF_TOKENIZER_MAPPING,
        convert_gguf_tokenizer,
    )
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    metadata = _gguf_metadata(path)
    # The same grouping as transformers' `get_gguf_tokenizer`, over metadata from the `gguf` package.
    grouped = {
        group: {name: metadata[f"tokenizer.{key}"] for key, name in renames.items() if f"tokenizer.{key}" in metadata}
        for group, renames in GGUF_TOKENIZER_MAPPING.items()
    }
    tokenizer_dict, tokenizer_config = grouped["tokenizer"], grouped["tokenizer_config"]
    if tokenizer_dict.get("tokenizer_type") == "llama":
        tokenizer_config.setdefault("add_bos_token", True)
    for name, key in _SPECIAL_TOKENS.items():
        token_id = metadata.get(f"tokenizer.ggml.{key}")
        tokenizer_config[name] = tokenizer_dict["tokens"][token_id] if token_id is not None else None
    backend, extra = convert_gguf_tokenizer(metadata["general.architecture"], tokenizer_dict)
    kwargs = dict(tokenizer_config, **extra)
    return TokenizersBackend(tokenizer_object=backend, **kwargs), "transformers GGUF conversion (gguf reader, no torch)"


def run(tokenizer, cases):
    results = {"encode": [], "decode": [], "chat": []}
    for case in cases.get("encode", []):
        results["encode"].append(tokenizer.encode(case["text"], add_special_tokens=case["add_special_tokens"]))
    for case in cases.get("decode", []):
        results["decode"].append(tokenizer.decode(case["ids"], skip_special_tokens=case["skip_special_tokens"]))
    for case in cases.get("chat", []):
        kwargs = dict(case.get("extra") or {})
        if case.get("enable_thinking") is not None:
            kwargs["enable_thinking"] = case["enable_thinking"]
        try:
            if case.get("chat_template") is not None:
                kwargs["chat_template"] = case["chat_template"]
            text = tokenizer.apply_chat_template(
                case["messages"],
                tools=case.get("tools"),
                add_generation_prompt=case.get("add_generation_prompt", False),
                tokenize=False,
                **kwargs,
            )
            results["chat"].append({"text": text})
        except Exception as error:  # the Rust side must fail on the same cases
            results["chat"].append({"error": f"{type(error).__name__}: {error}"})
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--hf", metavar="DIR", help="a Hugging Face tokenizer folder")
    source.add_argument("--gguf", metavar="FILE", help="a GGUF file")
    parser.add_argument("--mlx-lm", action="store_true", help="also encode with mlx_lm's tokenizer loader (--hf only)")
    args = parser.parse_args()

    cases = json.load(sys.stdin)
    tokenizer, loader = load_hf(args.hf) if args.hf else load_gguf(args.gguf)
    results = run(tokenizer, cases)
    template = tokenizer.chat_template
    results.update(
        loader=loader,
        bos_token=tokenizer.bos_token,
        eos_token=tokenizer.eos_token,
        chat_template=template if isinstance(template, str) or template is None else template.get("default"),
    )
    if args.mlx_lm:
        if not args.hf:
            parser.error("--mlx-lm needs --hf")
        from pathlib import Path

        from mlx_lm.tokenizer_utils import load as mlx_lm_load

        wrapper = mlx_lm_load(Path(args.hf))
        results["mlx_lm_encode"] = [
            wrapper.encode(case["text"], add_special_tokens=case["add_special_tokens"]) for case in cases.get("encode", [])
        ]
    json.dump(results, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
