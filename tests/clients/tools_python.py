"""Tool calls through the official `openai` Python client (tests/server_tools.rs).

    python tools_python.py --base-url http://127.0.0.1:PORT/v1

Against the real default model (SmolLM2-135M-Instruct, greedy). A named
`tool_choice` makes the server write the opening of the call into the
prompt, so the model's greedy continuation is a call to that function; the
checks are on what the client sees: `tool_calls` with ids, JSON arguments,
`finish_reason: tool_calls`, no markup in `content`, the streamed deltas
accumulating to the same call, and a `tool` result message in the history.
"""

import argparse
import json
import sys

import openai

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]},
    },
}]
ASK = [{"role": "user", "content": "Weather in Paris?"}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    args = parser.parse_args()
    client = openai.OpenAI(base_url=args.base_url, api_key="unused")

    # Whole response.
    r = client.chat.completions.create(model="default", messages=ASK, tools=TOOLS,
                                       tool_choice=NAMED, temperature=0, max_tokens=120)
    choice = r.choices[0]
    print("whole:", choice.finish_reason, choice.message.content, choice.message.tool_calls)
    assert choice.finish_reason == "tool_calls", choice
    calls = choice.message.tool_calls
    assert calls and len(calls) == 1, calls
    call = calls[0]
    assert call.type == "function" and call.id.startswith("call_"), call
    assert call.function.name == "get_weather", call
    arguments = json.loads(call.function.arguments)
    assert isinstance(arguments, dict), arguments
    assert choice.message.content is None, choice.message.content

    # Streamed: the deltas accumulate to the same call; no markup in content.
    stream = client.chat.completions.create(model="default", messages=ASK, tools=TOOLS,
                                            tool_choice=NAMED, temperature=0, max_tokens=120,
                                            stream=True)
    content, finish, acc = "", None, {}
    for chunk in stream:
        for c in chunk.choices:
            content += c.delta.content or ""
            for d in c.delta.tool_calls or []:
                slot = acc.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
                slot["id"] = d.id or slot["id"]
                if d.function:
                    slot["name"] += d.function.name or ""
                    slot["arguments"] += d.function.arguments or ""
            finish = c.finish_reason or finish
    print("stream:", finish, repr(content), acc)
    assert finish == "tool_calls", finish
    assert "<" not in content, content
    assert list(acc) == [0], acc
    assert acc[0]["name"] == "get_weather" and acc[0]["id"].startswith("call_"), acc
    assert json.loads(acc[0]["arguments"]) == arguments, (acc, arguments)

    # The call and its result go back into the conversation.
    history = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function",
             "function": {"name": "get_weather", "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 24 C"},
    ]
    r2 = client.chat.completions.create(model="default", messages=history, tools=TOOLS,
                                        tool_choice="none", temperature=0, max_tokens=16)
    print("after the result:", r2.choices[0].message.content, r2.usage)
    assert r2.choices[0].message.tool_calls is None
    assert r2.usage.prompt_tokens > r.usage.prompt_tokens - 200

    # Bad tool_choice: a 400 the client raises.
    try:
        client.chat.completions.create(model="default", messages=ASK, tools=TOOLS,
                                       tool_choice={"type": "function",
                                                    "function": {"name": "nope"}})
        raise AssertionError("unknown tool name accepted")
    except openai.BadRequestError as e:
        assert e.body["param"] == "tool_choice", e.body
    print("ok")


if __name__ == "__main__":
    sys.exit(main())
