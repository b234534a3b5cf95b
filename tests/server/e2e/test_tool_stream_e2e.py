#!/usr/bin/env python3
"""End-to-end tests of streamed tool calls (delta.tool_calls with incremental
function.arguments) in `cellm serve` with SmolLM2-135M on 127.0.0.1, the
official `openai` and `anthropic` clients.

Group `tool_stream` (one ctest, server_e2e_tool_stream), on copies of the
SmolLM2 weights with test_tools_e2e.py's templates:
  - llama3_json (bare JSON calls): response_format json_schema with a `const`
    reply makes the model write exactly a call with long arguments. Streamed
    with stream=True, the call's first delta carries index, id, type, name
    and empty arguments, and more than one later chunk carries a piece of
    the arguments; the pieces concatenate to the non-streamed reply's
    arguments string byte for byte, and finish_reason is "tool_calls" both
    ways. The same reply cut by max_tokens inside the arguments ends with
    "length", no content, and the call as far as it got, streamed and not
    (the same string).
  - hermes: the greedy model's own <tool_call> (few-shot, real output):
    streamed arguments in more than one chunk, equal to the non-streamed
    arguments byte for byte; then /v1/messages streamed through the
    anthropic client: the tool_use block's input arrives as more than one
    input_json_delta, whose concatenation is the chat path's arguments text
    and parses to the non-streamed tool_use input.

A missing virtual environment, package or model is a failure that says what
to run, never a skip.
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server_e2e import MODEL_NAME, check, e2e_main, run_test  # noqa: E402
from test_tools_e2e import (FAMILIES, FORCED_TOOLS, TOOLS, few_shot,  # noqa: E402
                            make_family_model, make_hermes_model, start)

try:
    import anthropic
    import openai  # noqa: F401  (srv.client() is an openai.OpenAI)
except ImportError as e:  # pragma: no cover - environment problem
    print(f"FAIL: {e}: run scripts/setup (installs scripts/requirements-test.txt into .venv)")
    sys.exit(1)

# A call with arguments long enough to take many tokens, strings holding
# braces, brackets and escaped quotes.
LONG_CALL = {"name": "get_weather", "parameters": {
    "city": "Paris", "unit": "celsius",
    "note": "say \"hi\" to {everyone} in [the] office, then report back",
    "days": [1, 2, 3], "options": {"hourly": True, "alerts": {"rain": False}}}}


def streamed(c, **req):
    """Streams a chat request; per call index: id, name, arguments pieces;
    and the first delta of each call as sent."""
    content, finish, calls, firsts = "", None, {}, {}
    for chunk in c.chat.completions.create(stream=True, **req):
        if not chunk.choices:
            continue
        ch = chunk.choices[0]
        finish = ch.finish_reason or finish
        content += ch.delta.content or ""
        for t in ch.delta.tool_calls or []:
            if t.index not in calls:
                firsts[t.index] = t
                calls[t.index] = {"id": t.id, "name": t.function.name if t.function else None,
                                  "pieces": []}
                if t.function and t.function.arguments:
                    calls[t.index]["pieces"].append(t.function.arguments)
                continue
            if t.function and t.function.arguments:
                calls[t.index]["pieces"].append(t.function.arguments)
    return [calls[i] for i in sorted(calls)], [firsts[i] for i in sorted(firsts)], content, finish


def check_first_deltas(firsts, what):
    check(all(f.id and f.id.startswith("call_") and f.type == "function" and f.function.name
              and f.function.arguments == "" for f in firsts),
          f"{what}: each call's first delta has index, id, type, name and empty arguments "
          f"({[(f.index, f.id, f.type, f.function.name, f.function.arguments) for f in firsts]})")


def const_request(reply, max_tokens):
    return dict(model=MODEL_NAME, max_tokens=max_tokens, temperature=0, tools=FORCED_TOOLS,
                messages=[{"role": "user", "content": "Weather in Paris, with details?"}],
                response_format={"type": "json_schema", "json_schema": {
                    "name": "reply", "schema": {"const": reply}}})


def t_llama3_long_arguments(srv):
    c = srv.client()
    req = const_request(LONG_CALL, 160)
    ref = c.chat.completions.create(**req).choices[0]
    calls = ref.message.tool_calls or []
    print(f"  non-streamed: {[(t.function.name, t.function.arguments) for t in calls]} "
          f"({ref.finish_reason})")
    check(ref.finish_reason == "tool_calls" and len(calls) == 1 and
          calls[0].function.name == "get_weather" and
          json.loads(calls[0].function.arguments) == LONG_CALL["parameters"],
          "non-streamed: the exact call, finish_reason tool_calls")
    got, firsts, content, finish = streamed(c, **req)
    print(f"  streamed: {[(g['name'], g['pieces']) for g in got]} ({finish})")
    check(finish == "tool_calls" and not content,
          f"streamed: finish_reason tool_calls, no content ({finish}, {content!r})")
    check_first_deltas(firsts, "streamed")
    if not check(len(got) == 1 and bool(calls), "streamed: one call"):
        return
    check(len(got[0]["pieces"]) > 1,
          f"the arguments arrive in more than one chunk ({len(got[0]['pieces'])})")
    check("".join(got[0]["pieces"]) == calls[0].function.arguments,
          "the pieces concatenate to the non-streamed arguments byte for byte")
    check(got[0]["name"] == "get_weather" and got[0]["id"] != calls[0].id,
          "the streamed call is named, with an id of its own")


def t_llama3_cut_by_max_tokens(srv):
    c = srv.client()
    # Enough tokens for the name and part of the arguments, not all of them.
    req = const_request(LONG_CALL, 24)
    ref = c.chat.completions.create(**req).choices[0]
    calls = ref.message.tool_calls or []
    partial = calls[0].function.arguments if calls else None
    print(f"  non-streamed cut: {[(t.function.name, t.function.arguments) for t in calls]} "
          f"({ref.finish_reason}, content {ref.message.content!r})")
    check(ref.finish_reason == "length", f"cut: finish_reason length ({ref.finish_reason})")
    check(len(calls) == 1 and calls[0].function.name == "get_weather" and not ref.message.content,
          "cut: the started call is kept, nothing becomes content")
    full = json.dumps(LONG_CALL["parameters"])
    check(partial is not None and partial[:1] == "{" and not _parses(partial),
          f"cut: the arguments are a cut JSON text ({partial!r}, of {full!r})")
    got, firsts, content, finish = streamed(c, **req)
    check(finish == "length" and not content,
          f"cut streamed: finish_reason length, no content ({finish}, {content!r})")
    check(len(got) == 1 and "".join(got[0]["pieces"]) == partial,
          "cut streamed: the pieces make the same partial arguments")


def _parses(text):
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


def t_hermes_real_call(srv):
    c = srv.client()
    req = dict(model=MODEL_NAME, messages=few_shot("Paris"), max_tokens=40, temperature=0,
               tools=TOOLS)
    ref = c.chat.completions.create(**req).choices[0]
    calls = ref.message.tool_calls or []
    print(f"  non-streamed: {[(t.function.name, t.function.arguments) for t in calls]}")
    if not check(ref.finish_reason == "tool_calls" and len(calls) >= 1,
                 "the greedy model calls a tool"):
        return
    got, firsts, content, finish = streamed(c, **req)
    print(f"  streamed: {[(g['name'], g['pieces']) for g in got]} ({finish})")
    check(finish == "tool_calls" and "<tool_call" not in content,
          f"streamed: finish_reason tool_calls, no markup as content ({content!r})")
    check_first_deltas(firsts, "hermes streamed")
    check(len(got) == len(calls) and all(
        g["name"] == t.function.name and "".join(g["pieces"]) == t.function.arguments
        for g, t in zip(got, calls)),
        "the streamed pieces concatenate to the non-streamed arguments byte for byte")
    check(len(got) >= 1 and len(got[0]["pieces"]) > 1,
          f"the model's arguments arrive in more than one chunk "
          f"({got[0]['pieces'] if got else None})")


ANTHROPIC_TOOL = {"name": "get_weather", "description": "Current weather in a city",
                  "input_schema": TOOLS[0]["function"]["parameters"]}


def anthropic_few_shot(city):
    """few_shot() in Anthropic's form."""
    out = []
    for turn in few_shot(city)[1:]:
        if turn["role"] == "assistant" and turn.get("tool_calls"):
            out.append({"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_" + t["id"], "name": t["function"]["name"],
                 "input": json.loads(t["function"]["arguments"])} for t in turn["tool_calls"]]})
        elif turn["role"] == "tool":
            out.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_" + turn["tool_call_id"],
                 "content": turn["content"]}]})
        else:
            out.append({"role": turn["role"], "content": turn["content"]})
    return out


def t_anthropic_input_json_deltas(srv):
    c = anthropic.Anthropic(base_url=srv.url, api_key="unused", max_retries=0, timeout=600)
    system = few_shot("Paris")[0]["content"]
    chat = srv.client().chat.completions.create(
        model=MODEL_NAME, messages=few_shot("Paris"), max_tokens=40, temperature=0,
        tools=TOOLS).choices[0].message.tool_calls or []
    req = dict(model=MODEL_NAME, max_tokens=40, system=system, tools=[ANTHROPIC_TOOL],
               messages=anthropic_few_shot("Paris"), extra_body={"temperature": 0})
    m = c.messages.create(**req)
    uses = [b for b in m.content if b.type == "tool_use"]
    print(f"  non-streamed tool_use: {[(b.name, b.input) for b in uses]} ({m.stop_reason})")
    if not check(m.stop_reason == "tool_use" and len(uses) >= 1 and len(chat) >= 1,
                 "the greedy model calls a tool through /v1/messages too"):
        return
    pieces = {}
    with c.messages.stream(**req) as stream:
        for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                pieces.setdefault(event.index, []).append(event.delta.partial_json)
        final = stream.get_final_message()
    blocks = [pieces[i] for i in sorted(pieces)]
    print(f"  input_json_delta pieces: {blocks}")
    check(len(blocks) == len(uses) and len(blocks[0]) > 1,
          f"the tool input arrives as more than one input_json_delta ({blocks})")
    check(bool(blocks) and "".join(blocks[0]) == chat[0].function.arguments,
          "the pieces concatenate to the chat path's arguments text")
    check(bool(blocks) and json.loads("".join(blocks[0])) == uses[0].input,
          "and parse to the non-streamed tool_use input")
    finals = [b for b in final.content if b.type == "tool_use"]
    check(final.stop_reason == "tool_use" and [b.input for b in finals] == [b.input for b in uses],
          f"the client's assembled stream equals the non-streamed message ({final.stop_reason})")


def group_tool_stream(binary, model):
    with tempfile.TemporaryDirectory() as tmp:
        template = FAMILIES["llama3_json"][0]
        srv = start(binary, make_family_model(model, tmp, "llama3_json", template))
        try:
            srv.wait_ready()
            for fn in (t_llama3_long_arguments, t_llama3_cut_by_max_tokens):
                run_test(fn, srv)
        finally:
            srv.terminate()
        srv = start(binary, make_hermes_model(model, tmp))
        try:
            srv.wait_ready()
            for fn in (t_hermes_real_call, t_anthropic_input_json_deltas):
                run_test(fn, srv)
        finally:
            srv.terminate()


def main():
    e2e_main({"tool_stream": group_tool_stream})


if __name__ == "__main__":
    main()
