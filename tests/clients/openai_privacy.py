#!/usr/bin/env python3
"""Anonymization opt-in through the official `openai` Python client (tests/server_privacy.rs).

Sends `X-Hearth-Anonymize: true` with `extra_headers` and checks, on a live `hearth serve`
with the default model (greedy decoding):
- the response header `X-Hearth-Anonymized` (read with `with_raw_response`);
- the model saw the placeholder: `usage.prompt_tokens` equals that of a plain request whose prompt
  already holds `[EMAIL_1]`, and differs from the clear prompt's;
- the model wrote the placeholder and the client gets the real value back, whole and streamed.
"""

import argparse
import re

from openai import OpenAI


def list_prompt(value):
    return f"Contact list:\nEmail: {value}\nEmail: {value}\nEmail: {value}\nEmail:"


def restored(text, email):
    """What the restorer makes of the model's text ([EMAIL_1] and the variants it accepts)."""
    return re.sub(r"(?<![A-Za-z0-9_])\[?EMAIL_1\]?(?![0-9])", lambda _: email, text, flags=re.IGNORECASE)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--email", required=True)
    args = parser.parse_args()
    client = OpenAI(base_url=args.base_url, api_key="unused", max_retries=0)
    private = {"X-Hearth-Anonymize": "true"}
    common = dict(model="default", max_tokens=24, temperature=0)

    plain = client.completions.create(prompt=list_prompt("[EMAIL_1]"), **common)
    clear = client.completions.create(prompt=list_prompt(args.email), **common)
    assert "[EMAIL_1]" in plain.choices[0].text, plain.choices[0].text

    raw = client.completions.with_raw_response.create(
        prompt=list_prompt(args.email), extra_headers=private, **common
    )
    assert raw.headers.get("x-hearth-anonymized") == "3", dict(raw.headers)
    anonymized = raw.parse()
    assert anonymized.usage.prompt_tokens == plain.usage.prompt_tokens
    assert anonymized.usage.prompt_tokens != clear.usage.prompt_tokens
    text = anonymized.choices[0].text
    assert text == restored(plain.choices[0].text, args.email), (text, plain.choices[0].text)
    assert args.email in text and "EMAIL_" not in text, text

    stream = client.completions.create(
        prompt=list_prompt(args.email), stream=True, extra_headers=private, **common
    )
    chunks = [c.choices[0].text for c in stream if c.choices]
    assert "".join(chunks) == text, chunks
    assert not any("EMAIL" in c for c in chunks), chunks

    chat = client.chat.completions.create(
        messages=[{"role": "user", "content": f"My e-mail is {args.email}. Repeat my e-mail."}],
        extra_headers=private,
        **common,
    )
    plain_chat = client.chat.completions.create(
        messages=[{"role": "user", "content": "My e-mail is [EMAIL_1]. Repeat my e-mail."}], **common
    )
    assert chat.usage.prompt_tokens == plain_chat.usage.prompt_tokens
    assert chat.choices[0].message.content == restored(plain_chat.choices[0].message.content, args.email)
    print("openai client: completions, stream and chat with extra_headers anonymized and restored:", repr(text))


if __name__ == "__main__":
    main()
