"""Decode speed with and without a JSON schema (structured output overhead).

Usage: .venv/bin/python bench/structured_bench.py --url http://127.0.0.1:8000 [--repeats 5]

For each stream count (1 and 4), alternating repeat by repeat, it sends the
same prompt free (`ignore_eos`, exactly --max-tokens tokens) and constrained
by a schema whose one string field is longer than --max-tokens (so it also
runs exactly --max-tokens tokens and ends with `length`), streamed. Decode
tok/s of a request = (tokens - 1) / (last token time - first token time):
prefill and grammar compilation are left out. Prints medians as Markdown.
"""

import argparse
import json
import statistics
import threading
import time
import urllib.request

SCHEMA = {
    "type": "object",
    "properties": {"story": {"type": "string", "minLength": 2000}},
    "required": ["story"],
    "additionalProperties": False,
}
PROMPT = "Write a long story about a lighthouse keeper, as JSON with a `story` field."


def one(url, constrained, max_tokens, out):
    body = {
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
    }
    if constrained:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "story", "schema": SCHEMA},
        }
    else:
        body["ignore_eos"] = True
    request = urllib.request.Request(
        url + "/v1/chat/completions",
        json.dumps(body).encode(),
        {"content-type": "application/json"},
    )
    stamps = []
    with urllib.request.urlopen(request, timeout=900) as response:
        for line in response:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            for choice in event.get("choices", []):
                if choice.get("delta", {}).get("content"):
                    stamps.append(time.perf_counter())
    out.append((len(stamps) - 1) / (stamps[-1] - stamps[0]))


def run(url, constrained, streams, max_tokens):
    out = []
    threads = [
        threading.Thread(target=one, args=(url, constrained, max_tokens, out))
        for _ in range(streams)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return statistics.mean(out) * streams  # aggregate decode tok/s


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--streams", default="1,4")
    args = parser.parse_args()
    run(args.url, True, 1, 8)  # warm-up: builds the grammar compiler
    print("| streams | free tok/s | json_schema tok/s | ratio |")
    print("|---|---|---|---|")
    for streams in [int(s) for s in args.streams.split(",")]:
        free, constrained = [], []
        for _ in range(args.repeats):
            free.append(run(args.url, False, streams, args.max_tokens))
            constrained.append(run(args.url, True, streams, args.max_tokens))
        f, c = statistics.median(free), statistics.median(constrained)
        print(f"| {streams} | {f:.1f} | {c:.1f} | {c / f:.2f} |", flush=True)


if __name__ == "__main__":
    main()
