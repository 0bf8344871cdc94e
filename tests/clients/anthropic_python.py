"""The official `anthropic` Python client against a live `hearth serve`
(tests/server_anthropic.rs).

    python anthropic_python.py --base-url http://127.0.0.1:PORT --kind real|dummy [--api-key K]

`real`: SmolLM2-135M-Instruct (answers "Paris"); `dummy`: a tiny random Qwen3
(thinking tags in its tokenizer). Checks the Messages API shapes, streaming
events, count_tokens, tool use and errors as the client parses them.
"""

import argparse
import json
import sys

import anthropic

WEATHER = {"name": "get_weather", "description": "Current weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--base-url", required=True)
    p.add_argument("--kind", required=True)
    p.add_argument("--api-key", default="unused")
    a = p.parse_args()
    client = anthropic.Anthropic(base_url=a.base_url, api_key=a.api_key, max_retries=0)
    ask = [{"role": "user", "content": "What is the capital of France?"}]

    # Whole message, system as a string.
    m = client.messages.create(model="default", max_tokens=24, messages=ask,
                               system="You are a helpful assistant.", extra_body={"temperature": 0})
    print("message:", m.model_dump_json())
    assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_")
    assert m.stop_reason in ("end_turn", "max_tokens"), m.stop_reason
    assert m.usage.input_tokens > 0 and 0 < m.usage.output_tokens <= 24
    text = "".join(b.text for b in m.content if b.type == "text")
    if a.kind == "real":
        assert "Paris" in text, text

    # count_tokens agrees with the message's input tokens.
    c = client.messages.count_tokens(model="default", messages=ask,
                                     system="You are a helpful assistant.")
    assert c.input_tokens == m.usage.input_tokens, (c, m.usage)

    # System as blocks; max_tokens reached.
    m2 = client.messages.create(model="default", max_tokens=3, messages=ask, extra_body={"temperature": 0},
                                system=[{"type": "text", "text": "Be brief."}])
    assert m2.stop_reason == "max_tokens" and m2.usage.output_tokens == 3, m2

    # Streaming: the client's own event parser and final-message assembly.
    with client.messages.stream(model="default", max_tokens=24, messages=ask,
                                system="You are a helpful assistant.", extra_body={"temperature": 0}) as s:
        kinds = [e.type for e in s]
        final = s.get_final_message()
    print("stream events:", kinds)
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop", kinds
    assert "message_delta" in kinds and "content_block_start" in kinds, kinds
    stext = "".join(b.text for b in final.content if b.type == "text")
    assert stext == text, (stext, text)
    assert final.usage.output_tokens == m.usage.output_tokens, final.usage

    # A stop sequence that ends the message is named, whole and streamed.
    if a.kind == "real":
        stop = "Paris"
        m3 = client.messages.create(model="default", max_tokens=24, messages=ask, stop_sequences=[stop],
                                    system="You are a helpful assistant.", extra_body={"temperature": 0})
        assert m3.stop_reason == "stop_sequence" and m3.stop_sequence == stop, m3
        t3 = "".join(b.text for b in m3.content if b.type == "text")
        assert stop not in t3 and text.startswith(t3), (t3, text)
        with client.messages.stream(model="default", max_tokens=24, messages=ask, stop_sequences=[stop],
                                    system="You are a helpful assistant.", extra_body={"temperature": 0}) as s:
            final3 = s.get_final_message()
        assert final3.stop_reason == "stop_sequence" and final3.stop_sequence == stop, final3
        # Ended by end-of-sequence or length: no stop sequence named.
        assert m.stop_sequence is None and final.stop_sequence is None, (m, final)

    # Errors in Anthropic's shape.
    try:
        client.messages.create(model="default", max_tokens=0, messages=ask)
        raise AssertionError("max_tokens 0 accepted")
    except anthropic.BadRequestError as e:
        assert e.body["type"] == "error", e.body
        assert e.body["error"]["type"] == "invalid_request_error", e.body
    try:
        client.messages.create(model="no-such-model", max_tokens=4, messages=ask)
        raise AssertionError("unknown model accepted")
    except anthropic.NotFoundError as e:
        assert e.body["error"]["type"] == "not_found_error", e.body
    # Thinking (the dummy Qwen3 has think tags): blocks are typed.
    if a.kind == "dummy":
        th = client.messages.create(model="default", max_tokens=8, messages=ask,
                                    thinking={"type": "enabled", "budget_tokens": 1024})
        assert all(b.type in ("thinking", "text") for b in th.content), th

    # Tool use forced by name, then the result back in the conversation.
    t = client.messages.create(model="default", max_tokens=100, extra_body={"temperature": 0},
                               messages=[{"role": "user", "content": "Weather in Paris?"}],
                               tools=[WEATHER], tool_choice={"type": "tool", "name": "get_weather"})
    print("tool:", t.model_dump_json())
    if a.kind == "dummy":
        # Random weights never close the call: the forced call is committed
        # (its name came from the server), cut by max_tokens; no markup as text.
        assert t.stop_reason == "max_tokens", t.stop_reason
        assert [b.type for b in t.content] == ["tool_use"], t.content
        assert t.content[0].name == "get_weather", t.content
        print("ok")
        return 0
    assert t.stop_reason == "tool_use", t.stop_reason
    uses = [b for b in t.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "get_weather" and uses[0].id.startswith("toolu_")
    assert isinstance(uses[0].input, dict)
    with client.messages.stream(model="default", max_tokens=100, extra_body={"temperature": 0},
                                messages=[{"role": "user", "content": "Weather in Paris?"}],
                                tools=[WEATHER],
                                tool_choice={"type": "tool", "name": "get_weather"}) as s:
        pieces = [e.delta.partial_json for e in s
                  if e.type == "content_block_delta" and e.delta.type == "input_json_delta"]
        tfinal = s.get_final_message()
    suses = [b for b in tfinal.content if b.type == "tool_use"]
    assert len(suses) == 1 and suses[0].input == uses[0].input, (suses, uses)
    # The input is streamed in pieces as the model writes it; they add up to it.
    print("input_json_delta pieces:", pieces)
    assert len(pieces) >= 2 and json.loads("".join(pieces)) == uses[0].input, pieces
    follow = client.messages.create(model="default", max_tokens=8, extra_body={"temperature": 0}, tools=[WEATHER],
                                    messages=[
                                        {"role": "user", "content": "Weather in Paris?"},
                                        {"role": "assistant", "content": t.content},
                                        {"role": "user", "content": [
                                            {"type": "tool_result", "tool_use_id": uses[0].id,
                                             "content": "Sunny, 24 C"}]}])
    assert follow.usage.input_tokens > t.usage.input_tokens, (follow.usage, t.usage)

    print("ok")


if __name__ == "__main__":
    sys.exit(main())
