#!/usr/bin/env python3
"""End-to-end tests of POST /v1/messages with the official `anthropic` client
against `cellm serve` and SmolLM2-135M on 127.0.0.1.

Group `anthropic`: a plain message, a system prompt, stop_sequences
(stop_reason stop_sequence), max_tokens (stop_reason max_tokens), a stream
through client.messages.stream() whose text equals the non-streamed greedy
answer, usage consistent with /tokenize, Anthropic-shaped refusals
(BadRequestError, NotFoundError), a server started with --api-key that
takes the key as x-api-key, and tools on SmolLM2 given a Hermes-style
template (test_tools_e2e.py's copy): tool_use blocks equal to the calls
/v1/chat/completions parses, the same streamed, and a tool_result answered.

A missing virtual environment, package or model is a failure that says what
to run, never a skip.
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server_e2e import (MODEL_NAME, Server, check,  # noqa: E402
                             e2e_main, run_test)

from test_tools_e2e import make_hermes_model  # noqa: E402

try:
    import anthropic
    import requests
except ImportError as e:  # pragma: no cover - environment problem
    print(f"FAIL: {e}: run scripts/setup (installs scripts/requirements-test.txt into .venv)")
    sys.exit(1)

KEY = "anthropic-e2e-key"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
# Recent clients dropped temperature/top_p/top_k from their signatures (the
# API still takes them), so greedy decoding is asked for in the body.
GREEDY = {"extra_body": {"temperature": 0}}


def client(srv, key="unused"):
    return anthropic.Anthropic(base_url=srv.url, api_key=key, max_retries=0, timeout=600)


def n_tokens(srv, messages):
    r = requests.post(srv.url + "/tokenize", json={"messages": messages}, timeout=60)
    return r.json()["count"]


def text_of(msg):
    return "".join(b.text for b in msg.content if b.type == "text")


def t_plain_message(srv):
    c = client(srv)
    m = c.messages.create(model=MODEL_NAME, max_tokens=12, **GREEDY, messages=QUESTION)
    check(m.type == "message" and m.role == "assistant", "a message answers as assistant")
    check(m.id.startswith("msg_"), f"the id starts with msg_ ({m.id})")
    check(m.model == MODEL_NAME, "the message names the served model")
    check(len(m.content) == 1 and m.content[0].type == "text" and m.content[0].text,
          f"the content is one non-empty text block ({m.content!r})")
    check(m.stop_reason in ("end_turn", "max_tokens"), f"stop_reason ({m.stop_reason})")
    check(m.stop_sequence is None, "no stop_sequence without stop_sequences")
    check(m.usage.input_tokens == n_tokens(srv, QUESTION),
          "usage.input_tokens equals /tokenize of the messages")
    check(1 <= m.usage.output_tokens <= 12, f"output_tokens within max_tokens "
          f"({m.usage.output_tokens})")
    # The same conversation through /v1/chat/completions: the same greedy text.
    chat = requests.post(srv.url + "/v1/chat/completions", timeout=600, json={
        "model": MODEL_NAME, "messages": QUESTION, "max_tokens": 12, "temperature": 0}).json()
    check(chat["choices"][0]["message"]["content"] == m.content[0].text,
          "the message's text equals the chat completion's")
    check(chat["usage"]["completion_tokens"] == m.usage.output_tokens,
          "output_tokens equals the chat completion's completion_tokens")


def t_system_prompt(srv):
    c = client(srv)
    system = "You are a pirate. Answer in one short sentence."
    m = c.messages.create(model=MODEL_NAME, max_tokens=8, **GREEDY, system=system,
                          messages=QUESTION)
    with_system = [{"role": "system", "content": system}] + QUESTION
    check(m.usage.input_tokens == n_tokens(srv, with_system),
          "the system prompt is rendered as the leading system message")
    blocks = c.messages.create(model=MODEL_NAME, max_tokens=8, **GREEDY,
                               system=[{"type": "text", "text": system}], messages=QUESTION)
    check(text_of(blocks) == text_of(m), "system as text blocks gives the same answer")


def t_stop_and_max_tokens(srv):
    c = client(srv)
    full = c.messages.create(model=MODEL_NAME, max_tokens=16, **GREEDY, messages=QUESTION)
    text = text_of(full)
    words = text.split()
    if not check(len(words) >= 3, f"the answer has words to stop at ({text!r})"):
        return
    stop = " " + words[2]
    m = c.messages.create(model=MODEL_NAME, max_tokens=16, **GREEDY, messages=QUESTION,
                          stop_sequences=["@@never@@", stop])
    check(m.stop_reason == "stop_sequence", f"stop_reason is stop_sequence ({m.stop_reason})")
    check(m.stop_sequence == stop,
          f"stop_sequence names the one that matched ({m.stop_sequence!r})")
    check(text_of(m) == text[:text.index(stop)], "the text ends before the stop sequence")

    short = c.messages.create(model=MODEL_NAME, max_tokens=2, **GREEDY, messages=QUESTION)
    check(short.stop_reason == "max_tokens", f"max_tokens 2 ends with max_tokens "
          f"({short.stop_reason})")
    check(short.usage.output_tokens == 2, "output_tokens is the budget")


def t_stream(srv):
    c = client(srv)
    m = c.messages.create(model=MODEL_NAME, max_tokens=12, **GREEDY, messages=QUESTION)
    seen = []
    pieces = []
    with c.messages.stream(model=MODEL_NAME, max_tokens=12, **GREEDY,
                           messages=QUESTION) as stream:
        for event in stream:
            seen.append(event.type)
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                pieces.append(event.delta.text)
        final = stream.get_final_message()
    check("".join(pieces) == text_of(m), "the streamed text equals the non-streamed greedy answer")
    check(text_of(final) == text_of(m), "the accumulated final message has the same text")
    check(final.stop_reason == m.stop_reason, f"the stream's stop_reason ({final.stop_reason})")
    check(final.usage.input_tokens == m.usage.input_tokens, "streamed input_tokens match")
    check(final.usage.output_tokens == m.usage.output_tokens, "streamed output_tokens match")
    check(seen[0] == "message_start", f"the stream starts with message_start ({seen[:3]})")
    check("content_block_start" in seen and "content_block_stop" in seen,
          "a content block is started and stopped")
    check(seen[-1] == "message_stop", f"the stream ends with message_stop ({seen[-3:]})")

    # The raw stream: Anthropic's event names, including ping and message_delta.
    r = requests.post(srv.url + "/v1/messages", stream=True, timeout=600, json={
        "model": MODEL_NAME, "max_tokens": 4, "messages": QUESTION, "stream": True,
        "stop_sequences": ["@@never@@"]})
    names = [line[len("event: "):] for line in r.iter_lines(decode_unicode=True)
             if line.startswith("event: ")]
    check(names[:2] == ["message_start", "ping"], f"message_start then ping ({names[:2]})")
    check(names[-2:] == ["message_delta", "message_stop"],
          f"message_delta then message_stop end it ({names[-2:]})")


def t_errors(srv):
    c = client(srv)
    r = requests.post(srv.url + "/v1/messages", timeout=60,
                      json={"model": MODEL_NAME, "messages": QUESTION})
    body = r.json()
    check(r.status_code == 400 and body.get("type") == "error"
          and body["error"]["type"] == "invalid_request_error"
          and "max_tokens" in body["error"]["message"],
          f"a missing max_tokens is a 400 naming it ({r.status_code} {body})")
    try:
        c.messages.create(model=MODEL_NAME, max_tokens=4, extra_body={"temperature": 1.5},
                          messages=QUESTION)
        check(False, "temperature 1.5 is refused")
    except anthropic.BadRequestError as e:
        check("temperature" in str(e), f"temperature 1.5 is a BadRequestError naming it ({e})")
    image = [{"role": "user", "content": [
        {"type": "image",
         "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}]
    try:
        c.messages.create(model=MODEL_NAME, max_tokens=4, messages=image)
        check(False, "an image block is refused")
    except anthropic.BadRequestError as e:
        check("image" in str(e), f"an image block is a BadRequestError ({e})")
    try:
        c.messages.create(model="claude-nonexistent", max_tokens=4, messages=QUESTION)
        check(False, "an unknown model is refused")
    except anthropic.NotFoundError as e:
        check(MODEL_NAME in str(e), f"an unknown model is a NotFoundError naming ours ({e})")
    try:
        c.messages.create(model=MODEL_NAME, max_tokens=100000, messages=QUESTION)
        check(False, "max_tokens beyond the context is refused")
    except anthropic.BadRequestError as e:
        check("max_tokens" in str(e), f"max_tokens beyond the context is a BadRequestError ({e})")


def t_api_key(srv):
    m = client(srv, KEY).messages.create(model=MODEL_NAME, max_tokens=2, messages=QUESTION)
    check(m.type == "message", "the key sent as x-api-key is accepted")
    try:
        client(srv, "wrong-key").messages.create(model=MODEL_NAME, max_tokens=2, messages=QUESTION)
        check(False, "a wrong key is refused")
    except anthropic.AuthenticationError as e:
        check(e.status_code == 401, f"a wrong key is an AuthenticationError (401) ({e})")
    r = requests.post(srv.url + "/v1/messages", timeout=60,
                      json={"model": MODEL_NAME, "max_tokens": 2, "messages": QUESTION})
    body = r.json()
    check(r.status_code == 401 and body.get("type") == "error"
          and body["error"]["type"] == "authentication_error",
          f"no key is a 401 authentication_error in Anthropic's shape ({body})")


# ------------------------------------------------ tools (Hermes template)

TOOL = {"name": "get_weather", "description": "Current weather in a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"]}}
OPENAI_TOOL = {"type": "function", "function": {
    "name": TOOL["name"], "description": TOOL["description"], "parameters": TOOL["input_schema"]}}
SYSTEM = "You answer weather questions by calling get_weather."


def call_turn(call_id, city):
    """One worked example in Anthropic's form: question, tool_use, tool_result, answer."""
    return [
        {"role": "user", "content": f"What is the weather in {city}?"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": call_id, "name": "get_weather", "input": {"city": city}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call_id, "content": f"{city}: 20 C, sunny"}]},
        {"role": "assistant", "content": f"It is 20 C and sunny in {city}."},
    ]


def few_shot(city):
    return (call_turn("toolu_1", "Rome") + call_turn("toolu_2", "Berlin")
            + call_turn("toolu_3", "Madrid")
            + [{"role": "user", "content": f"What is the weather in {city}?"}])


def openai_few_shot(city):
    """The same conversation as /v1/chat/completions messages."""
    out = [{"role": "system", "content": SYSTEM}]
    for turn in few_shot(city):
        content = turn["content"]
        if isinstance(content, str):
            out.append(turn)
        elif content[0]["type"] == "tool_use":
            out.append({"role": "assistant", "content": None, "tool_calls": [{
                "id": b["id"], "type": "function",
                "function": {"name": b["name"], "arguments": json.dumps(b["input"])}}
                for b in content]})
        else:
            out += [{"role": "tool", "tool_call_id": b["tool_use_id"], "content": b["content"]}
                    for b in content]
    return out


def tool_uses(msg):
    return [(b.name, b.input) for b in msg.content if b.type == "tool_use"]


def t_tool_use(srv):
    chat = requests.post(srv.url + "/v1/chat/completions", timeout=600, json={
        "model": MODEL_NAME, "messages": openai_few_shot("Paris"), "tools": [OPENAI_TOOL],
        "max_tokens": 40, "temperature": 0}).json()
    ref = [(t["function"]["name"], json.loads(t["function"]["arguments"]))
           for t in chat["choices"][0]["message"].get("tool_calls") or []]
    check(len(ref) >= 1, f"the chat path parses a call to compare with ({chat})")
    c = client(srv)
    req = dict(model=MODEL_NAME, max_tokens=40, system=SYSTEM, tools=[TOOL],
               messages=few_shot("Paris"), **GREEDY)
    m = c.messages.create(**req)
    print(f"  tool_use blocks: {tool_uses(m)}")
    check(m.stop_reason == "tool_use", f"stop_reason tool_use ({m.stop_reason})")
    check(tool_uses(m) == ref, "the tool_use blocks equal the chat path's parsed calls")
    check(all(b.id.startswith("toolu_") for b in m.content if b.type == "tool_use"),
          "tool_use ids start with toolu_")
    check(m.usage.output_tokens == chat["usage"]["completion_tokens"],
          "output_tokens equal the chat path's completion_tokens")

    text = []
    with c.messages.stream(**req) as stream:
        for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                text.append(event.delta.text)
        final = stream.get_final_message()
    check("<tool_call" not in "".join(text), "no call markup streamed as text")
    check(final.stop_reason == "tool_use", f"streamed stop_reason tool_use ({final.stop_reason})")
    check(tool_uses(final) == tool_uses(m), "the streamed tool_use blocks equal the non-streamed")

    # The call answered with a tool_result.
    msgs = few_shot("Paris") + [
        {"role": "assistant", "content": m.content},  # the response's blocks, as clients do
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b.id, "content": "Paris: 18 C, cloudy"}
            for b in m.content if b.type == "tool_use"]}]
    answer = c.messages.create(model=MODEL_NAME, max_tokens=12, system=SYSTEM, tools=[TOOL],
                               messages=msgs, **GREEDY)
    check(answer.stop_reason in ("end_turn", "max_tokens", "tool_use"),
          f"the tool result is answered ({answer.content!r})")


def group_anthropic(binary, model):
    srv = Server(binary, model)
    try:
        srv.wait_ready()
        for t in (t_plain_message, t_system_prompt, t_stop_and_max_tokens, t_stream, t_errors):
            run_test(t, srv)
    finally:
        srv.kill()
    keyed = Server(binary, model, "--api-key", KEY)
    try:
        keyed.wait_ready()
        run_test(t_api_key, keyed)
    finally:
        keyed.kill()
    with tempfile.TemporaryDirectory() as tmp:
        hermes = Server(binary, make_hermes_model(model, tmp))
        try:
            hermes.wait_ready()
            run_test(t_tool_use, hermes)
        finally:
            hermes.kill()


def main():
    e2e_main({"anthropic": group_anthropic})


if __name__ == "__main__":
    main()
