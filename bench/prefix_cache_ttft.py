#!/usr/bin/env python3
"""Turn-1 vs turn-2 time to first token of a long agent conversation.

Starts `hearth serve` on MODEL twice (prefix cache on, then off with
`--prefix-cache-mb 0`), and on each sends the same two chat turns, streamed:
turn 1 is a system prompt of about --tokens tokens plus a question; turn 2
resends everything (turn 1, its answer, a new question), as agents do.
TTFT = request sent to first streamed chunk with content. Prints a markdown
table (and appends it to --out if given). Standard library only.

  python3 bench/prefix_cache_ttft.py --hearth target/release/hearth \
      --model /tmp/q3-bench --tokens 8000 --out bench/results/prefix-cache-DATE.md
"""

import argparse
import json
import os
import random
import re
import socket
import subprocess
import sys
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, proc, timeout=600):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"hearth serve exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    sys.exit("hearth serve did not become ready")


def stream_chat(url, messages, max_tokens):
    """Returns (ttft_s, total_s, content, usage)."""
    body = {
        "model": "default",
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    req = urllib.request.Request(
        url + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    start = time.perf_counter()
    ttft = None
    content = []
    usage = None
    with urllib.request.urlopen(req, timeout=3600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if event.get("usage"):
                usage = event["usage"]
            for choice in event.get("choices", []):
                delta = choice.get("delta", {})
                text = delta.get("content") or delta.get("reasoning_content")
                if text:
                    if ttft is None:
                        ttft = time.perf_counter() - start
                    content.append(delta.get("content") or "")
    return ttft, time.perf_counter() - start, "".join(content), usage


def conversation(words):
    rng = random.Random(7)
    vocab = re.findall(r"[a-z]+", __doc__.lower()) + [
        "kernel", "scheduler", "batch", "memory", "cache", "token", "model",
        "request", "server", "latency", "budget", "prefix", "thread", "queue",
    ]
    text = " ".join(rng.choice(vocab) for _ in range(words))
    return [
        {"role": "system", "content": "You are a coding agent. Project notes: " + text},
        {"role": "user", "content": "Summarise the notes in one sentence."},
    ]


def run(args, extra, label):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [args.hearth, "serve", "--port", str(port), "--model", args.model] + extra
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(url, proc)
        # Warm-up (one-time costs), on an unrelated prompt.
        stream_chat(url, [{"role": "user", "content": "hello"}], 2)
        messages = conversation(args.words)
        t1, _, answer, u1 = stream_chat(url, messages, args.max_tokens)
        messages = messages + [
            {"role": "assistant", "content": answer},
            {"role": "user", "content": "Now list the three most important points."},
        ]
        t2, _, _, u2 = stream_chat(url, messages, args.max_tokens)
        cached = lambda u: (u or {}).get("prompt_tokens_details", {}).get("cached_tokens", 0)
        return {
            "label": label,
            "t1": t1, "t2": t2,
            "p1": (u1 or {}).get("prompt_tokens"), "p2": (u2 or {}).get("prompt_tokens"),
            "c1": cached(u1), "c2": cached(u2),
        }
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hearth", default="target/release/hearth")
    ap.add_argument("--model", required=True)
    ap.add_argument("--words", type=int, default=6000,
                    help="system prompt words (tune for the token count you want)")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--out")
    args = ap.parse_args()
    rows = [run(args, [], "prefix cache on"), run(args, ["--prefix-cache-mb", "0"], "off")]
    lines = [
        "| server | turn 1 prompt | turn 1 TTFT | turn 2 prompt | cached | turn 2 TTFT | turn 2 / turn 1 |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['label']} | {r['p1']} | {r['t1']:.2f} s | {r['p2']} | {r['c2']} "
            f"| {r['t2']:.2f} s | {r['t2'] / r['t1']:.3f}x |"
        )
    table = "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "a") as f:
            f.write(f"\nCommand: `{' '.join(sys.argv)}`\n\n{table}\n")


if __name__ == "__main__":
    main()
