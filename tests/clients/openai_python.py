"""The official `openai` Python client against a live `hearth serve`.

Run by tests/server_clients.rs:
    python openai_python.py --base-url http://127.0.0.1:PORT/v1 --kind real|dummy

`real` is the default model (SmolLM2-135M-Instruct: answers "Paris"); `dummy`
is a tiny random-weight Qwen3 (Qwen3 chat template, context 4096), where
`ignore_eos` makes every generation end on max_tokens so token counts are
exact. Each check prints one line; the script exits 1 if any failed.
"""

import argparse
import sys
import traceback

import openai

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def stream_chat(client, **kwargs):
    """Returns (chunks, content, reasoning, finish_reason, usage) of a streamed chat
    (text and finish reason of choice 0)."""
    chunks = list(client.chat.completions.create(stream=True, **kwargs))
    content, reasoning, finish, usage = "", "", {}, None
    for chunk in chunks:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            content += delta.content or ""
            reasoning += getattr(delta, "reasoning_content", None) or ""
        for choice in chunk.choices:
            if choice.finish_reason is not None:
                assert choice.index not in finish, "two finish chunks"
                finish[choice.index] = choice.finish_reason
    return chunks, content, reasoning, finish.get(0), usage


def token_chunks(chunks, index=0):
    """Chunks carrying one generated token: not the role chunk, not the finish chunk."""
    return [
        c
        for chunk in chunks
        for c in chunk.choices
        if c.index == index and c.finish_reason is None and c.delta.role is None
    ]


USER = [{"role": "user", "content": "What is the capital of France?"}]


@check
def models(client, args):
    listed = client.models.list()
    ids = [m.id for m in listed.data]
    assert ids == [args.model_id], ids
    assert client.models.retrieve("default").id == args.model_id
    try:
        client.models.retrieve("no-such-model")
        raise AssertionError("expected 404")
    except openai.NotFoundError:
        pass


@check
def chat_whole(client, args):
    r = client.chat.completions.create(
        model="default", messages=USER, temperature=0, max_tokens=12,
        extra_body={"ignore_eos": args.kind == "dummy"},
    )
    choice = r.choices[0]
    assert r.object == "chat.completion"
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str)
    if args.kind == "real":
        assert "Paris" in choice.message.content, choice.message.content
        assert choice.finish_reason == "stop"
    else:
        assert choice.finish_reason == "length"
        assert r.usage.completion_tokens == 12
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


@check
def chat_stream_usage_equals_tokens(client, args):
    n_tokens = 20 if args.kind == "dummy" else 6
    chunks, content, _, finish, usage = stream_chat(
        client, model=args.model_id, messages=USER, temperature=0, max_tokens=n_tokens,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert finish == "length", finish
    assert usage is not None and chunks[-1].choices == []
    assert usage.completion_tokens == n_tokens, usage
    assert len(token_chunks(chunks)) == usage.completion_tokens
    whole = client.chat.completions.create(
        model=args.model_id, messages=USER, temperature=0, max_tokens=n_tokens,
        extra_body={"ignore_eos": True},
    )
    assert whole.choices[0].message.content == content


@check
def chat_stream_natural_end(client, args):
    if args.kind != "real":
        return
    chunks, content, _, finish, usage = stream_chat(
        client, model="default", messages=USER, temperature=0, max_tokens=12,
        stream_options={"include_usage": True},
    )
    assert "Paris" in content and finish == "stop", (content, finish)
    # The end-of-sequence token is counted; its place is the finish chunk.
    assert len(token_chunks(chunks)) == usage.completion_tokens - 1


@check
def completions(client, args):
    prompt = "The capital of France is"
    r = client.completions.create(
        model="default", prompt=prompt, temperature=0, max_tokens=6,
        extra_body={"ignore_eos": True},
    )
    assert r.object == "text_completion"
    assert r.usage.completion_tokens == 6 and r.choices[0].finish_reason == "length"
    if args.kind == "real":
        assert "Paris" in r.choices[0].text, r.choices[0].text
    stream = list(client.completions.create(
        model="default", prompt=prompt, temperature=0, max_tokens=6, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
    ))
    text = "".join(c.text for chunk in stream for c in chunk.choices)
    assert text == r.choices[0].text, (text, r.choices[0].text)
    assert stream[-1].usage.completion_tokens == 6
    assert sum(1 for chunk in stream for c in chunk.choices if c.finish_reason is None) == 6


@check
def stop_strings(client, args):
    if args.kind == "real":
        r = client.completions.create(
            model="default", prompt="The capital of France is", temperature=0,
            max_tokens=8, stop=["."],
        )
        assert r.choices[0].text == " Paris", repr(r.choices[0].text)
        assert r.choices[0].finish_reason == "stop"
        _, content, _, finish, _ = stream_chat(
            client, model="default", messages=USER, temperature=0, max_tokens=12,
            stop="Paris",
        )
        assert "Paris" not in content and finish == "stop", (content, finish)
    else:
        # Whatever the random model says, a stop string taken from its own
        # output cuts the text right before it.
        full = client.completions.create(
            model="default", prompt="Hello", temperature=0, max_tokens=30,
            extra_body={"ignore_eos": True},
        ).choices[0].text
        stop = full.strip()[:2] if full.strip() else None
        if not stop:
            return
        r = client.completions.create(
            model="default", prompt="Hello", temperature=0, max_tokens=30, stop=[stop],
            extra_body={"ignore_eos": True},
        )
        assert r.choices[0].finish_reason == "stop"
        assert full.startswith(r.choices[0].text + stop), (full, r.choices[0].text, stop)


@check
def max_tokens_variants(client, args):
    r = client.chat.completions.create(
        model="default", messages=USER, temperature=0, max_completion_tokens=3,
        extra_body={"ignore_eos": True},
    )
    assert r.usage.completion_tokens == 3 and r.choices[0].finish_reason == "length"


@check
def logprobs(client, args):
    r = client.chat.completions.create(
        model="default", messages=USER, temperature=0, max_tokens=5, logprobs=True,
        top_logprobs=3, extra_body={"ignore_eos": True},
    )
    content = r.choices[0].logprobs.content
    assert len(content) == 5 == r.usage.completion_tokens
    for entry in content:
        assert entry.logprob <= 0
        assert len(entry.top_logprobs) == 3
        assert entry.token == entry.top_logprobs[0].token  # greedy
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob
    joined = b"".join(bytes(e.bytes) for e in content).decode("utf-8", "replace")
    assert joined == r.choices[0].message.content, (joined, r.choices[0].message.content)
    legacy = client.completions.create(
        model="default", prompt="Hello", temperature=0, max_tokens=4, logprobs=2,
        extra_body={"ignore_eos": True},
    )
    lp = legacy.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.text_offset) == 4
    assert all(len(t) <= 2 for t in lp.top_logprobs)
    chunks, _, _, _, _ = stream_chat(
        client, model="default", messages=USER, temperature=0, max_tokens=4, logprobs=True,
        top_logprobs=1, extra_body={"ignore_eos": True},
    )
    streamed = [c.logprobs.content[0] for c in token_chunks(chunks)]
    assert [e.token for e in streamed] == [e.token for e in content[:4]]


@check
def n_choices(client, args):
    r = client.chat.completions.create(
        model="default", messages=USER, n=2, temperature=0.8, seed=3, max_tokens=4,
        extra_body={"ignore_eos": True},
    )
    assert sorted(c.index for c in r.choices) == [0, 1]
    assert r.usage.completion_tokens == 8
    chunks, _, _, _, usage = stream_chat(
        client, model="default", messages=USER, n=2, max_tokens=3,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
    )
    for index in (0, 1):
        assert len(token_chunks(chunks, index)) == 3
    assert usage.completion_tokens == 6


@check
def thinking(client, args):
    if args.kind != "dummy":
        return
    # Force `<think>` so the output opens a think block.
    r = client.chat.completions.create(
        model="default", messages=USER, temperature=0, max_tokens=3,
        logit_bias={"151667": 100}, extra_body={"ignore_eos": True},
    )
    message = r.choices[0].message
    assert message.content == "", message
    assert message.reasoning_content == "<think><think>", message
    _, content, reasoning, _, _ = stream_chat(
        client, model="default", messages=USER, temperature=0, max_tokens=3,
        logit_bias={"151667": 100}, extra_body={"ignore_eos": True},
    )
    assert (content, reasoning) == ("", "<think><think>"), (content, reasoning)
    # Thinking switched off through the template kwargs: no reasoning field.
    r = client.chat.completions.create(
        model="default", messages=USER, temperature=0, max_tokens=3,
        extra_body={"ignore_eos": True, "chat_template_kwargs": {"enable_thinking": False}},
    )
    assert getattr(r.choices[0].message, "reasoning_content", None) is None


@check
def errors(client, args):
    try:
        client.chat.completions.create(model="gpt-4o", messages=USER)
        raise AssertionError("expected 404")
    except openai.NotFoundError as e:
        assert e.status_code == 404
        assert e.body["code"] == "model_not_found", e.body
    try:
        client.chat.completions.create(model="default", messages=USER, temperature=7)
        raise AssertionError("expected 400")
    except openai.BadRequestError as e:
        assert e.body["param"] == "temperature", e.body
    context = 8192 if args.kind == "real" else 4096
    try:
        client.chat.completions.create(
            model="default", messages=[{"role": "user", "content": "hello " * (context + 500)}],
        )
        raise AssertionError("expected 400")
    except openai.BadRequestError as e:
        message = e.body["message"]
        assert str(context) in message, message
        numbers = [int(w) for w in message.replace(".", " ").split() if w.isdigit()]
        assert any(n > context for n in numbers), message
    try:
        client.completions.create(model="default", prompt="x", max_tokens=0)
        raise AssertionError("expected 400")
    except openai.BadRequestError as e:
        assert e.body["param"] == "max_tokens", e.body


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--kind", choices=["real", "dummy"], required=True)
    parser.add_argument("--model-id", required=True)
    args = parser.parse_args()
    client = openai.OpenAI(base_url=args.base_url, api_key="unused", max_retries=0, timeout=120)
    failed = 0
    for fn in CHECKS:
        try:
            fn(client, args)
            print(f"ok     {fn.__name__}")
        except Exception:  # noqa: BLE001 - report every failing check
            failed += 1
            print(f"FAILED {fn.__name__}\n{traceback.format_exc()}")
    print(f"openai {openai.__version__}: {len(CHECKS) - failed} of {len(CHECKS)} checks ok")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
