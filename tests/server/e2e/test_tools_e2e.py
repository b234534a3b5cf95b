#!/usr/bin/env python3
"""End-to-end tests of tool calling in `cellm serve` with SmolLM2-135M on
127.0.0.1 and the official openai client.

Group `tools` (one ctest, server_e2e_tools):
  - the stock SmolLM2 file: its ChatML template has no tool support, so the
    server reports tool format "none" and never parses replies for calls;
    tools, assistant tool_calls (content null) and tool results are still
    accepted and rendered; an unknown tool_choice value or function name is a
    400 naming tool_choice (the message lists the supported values)
  - a copy of the same weights whose GGUF chat template (written here with
    gguf's gguf_new_metadata) renders assistant tool_calls as Hermes-style
    <tool_call> blocks and tool results as <tool_response>: the server
    detects "hermes". A few-shot conversation of earlier calls makes the
    greedy (temperature 0) model emit a call itself; what it emits is the
    real model's output, not recorded text. The test checks that
      * the non-streamed reply carries it as message.tool_calls (content
        null, finish_reason "tool_calls"),
      * the same request with tool_choice "none" (same prompt: this template
        does not print the tool list) returns the raw text, which holds the
        <tool_call> block, and parsing that text here gives the same call,
      * streaming with the client accumulates the same call from
        delta.tool_calls and never shows the markup as content,
      * sending the call and a tool result back is answered.

A missing virtual environment, package or model is a failure that says what
to run, never a skip.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_ops_e2e import CmdServer  # noqa: E402
from test_server_e2e import MODEL_NAME, check, e2e_main, run_test  # noqa: E402

try:
    import openai
    import requests
except ImportError as e:  # pragma: no cover - environment problem
    print(f"FAIL: {e}: run scripts/setup (installs scripts/requirements-test.txt into .venv)")
    sys.exit(1)

# Hermes-style tool calls on SmolLM2's ChatML. The tool list is not printed,
# so a request renders the same prompt with or without tools.
HERMES_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' and message.tool_calls %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- for tc in message.tool_calls %}"
    "{{- '<tool_call>\\n{\"name\": \"' + tc.function.name + '\", \"arguments\": ' + "
    "(tc.function.arguments | tojson) + '}\\n</tool_call>' }}"
    "{%- if not loop.last %}{{- '\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + "
    "'\\n</tool_response><|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]},
    },
}]


def call_turn(call_id, city):
    return [
        {"role": "user", "content": f"What is the weather in {city}?"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": call_id, "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}]},
        {"role": "tool", "tool_call_id": call_id, "content": f"{city}: 20 C, sunny"},
        {"role": "assistant", "content": f"It is 20 C and sunny in {city}."},
    ]


def few_shot(city):
    return ([{"role": "system", "content": "You answer weather questions by calling get_weather."}]
            + call_turn("call_1", "Rome") + call_turn("call_2", "Berlin")
            + call_turn("call_3", "Madrid")
            + [{"role": "user", "content": f"What is the weather in {city}?"}])


def hermes_calls(text):
    """The <tool_call> blocks of raw text, parsed here independently."""
    out = []
    for body in re.findall(r"<tool_call>(.*?)(?:</tool_call>|$)", text, re.S):
        try:
            v = json.loads(body)
        except ValueError:
            continue
        if isinstance(v, dict) and isinstance(v.get("name"), str):
            out.append((v["name"], v.get("arguments", {})))
    return out


def tool_format_logged(srv):
    for line in srv.log:
        m = re.search(r"tool calls in replies are parsed as: (\S+)", line)
        if m:
            return m.group(1)
    return None


# ------------------------------------------------ stock SmolLM2 (no tool format)

def t_stock_template_has_no_tool_format(srv):
    check(tool_format_logged(srv) == "none",
          f"SmolLM2's own template gives tool format none (log: {tool_format_logged(srv)})")
    c = srv.client()
    r = c.chat.completions.create(model=MODEL_NAME, messages=few_shot("Paris"), tools=TOOLS,
                                  max_tokens=8, temperature=0)
    msg = r.choices[0].message
    check(not msg.tool_calls, "no tool_calls without a tool format")
    check(isinstance(msg.content, str) and r.choices[0].finish_reason in ("stop", "length"),
          f"plain content, finish {r.choices[0].finish_reason}")


def t_tool_choice_refusals(srv):
    c = srv.client()
    base = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}],
            "tools": TOOLS, "max_tokens": 4}
    # "required" and a named function are served (group structured covers them).
    for choice, what in (("sometimes", "unknown value"),
                         ({"type": "function", "function": {"name": "launch"}}, "unknown name")):
        try:
            c.chat.completions.create(tool_choice=choice, **base)
            check(False, f"tool_choice {what} is refused")
        except openai.BadRequestError as e:
            err = e.body if isinstance(e.body, dict) else {}
            err = err.get("error", err)
            check(e.status_code == 400 and err.get("param") == "tool_choice",
                  f"tool_choice {what}: 400 naming tool_choice ({err.get('message')})")
            if what == "unknown name":
                check("launch" in err.get("message", ""), "the unknown function is named")
            else:
                check('"auto"' in err.get("message", "") and '"none"' in err.get("message", ""),
                      f"tool_choice {what}: the message lists the supported values")
    r = c.chat.completions.create(tool_choice="none", **base)
    check(r.choices[0].message.tool_calls is None, "tool_choice none is served")


def t_tool_results_accepted(srv):
    c = srv.client()
    r = c.chat.completions.create(model=MODEL_NAME, messages=call_turn("call_9", "Oslo")[:3],
                                  tools=TOOLS, max_tokens=4, temperature=0)
    check(r.choices[0].finish_reason in ("stop", "length"),
          "assistant tool_calls (content null) and a tool result are accepted")


# ------------------------------------------------ Hermes template (real calls)

def t_hermes_format_detected(srv):
    check(tool_format_logged(srv) == "hermes",
          f"a template with <tool_call> gives tool format hermes (log: {tool_format_logged(srv)})")


def t_real_call_non_streamed_and_raw(srv):
    c = srv.client()
    req = {"model": MODEL_NAME, "messages": few_shot("Paris"), "max_tokens": 40,
           "temperature": 0}
    raw = c.chat.completions.create(tool_choice="none", tools=TOOLS, **req)
    raw_text = raw.choices[0].message.content or ""
    print(f"  raw model output (tool_choice none): {raw_text!r}")
    check("<tool_call>" in raw_text, "the greedy model writes a <tool_call> block")
    expected = hermes_calls(raw_text)
    check(len(expected) >= 1, f"the raw block parses here: {expected}")

    r = c.chat.completions.create(tools=TOOLS, **req)
    choice = r.choices[0]
    calls = choice.message.tool_calls or []
    print(f"  parsed: {[(t.function.name, t.function.arguments) for t in calls]}")
    check(choice.finish_reason == "tool_calls", f"finish_reason tool_calls ({choice.finish_reason})")
    check(choice.message.content is None, f"content null ({choice.message.content!r})")
    check(len(calls) == len(expected) and all(
        t.type == "function" and t.id.startswith("call_") and t.function.name == name
        and json.loads(t.function.arguments) == args
        for t, (name, args) in zip(calls, expected)),
        "the server's tool_calls equal the calls parsed from the raw text")
    check(len(calls) >= 1 and calls[0].function.name == "get_weather",
          "the call is get_weather")
    return calls


def t_real_call_streamed(srv):
    c = srv.client()
    req = {"model": MODEL_NAME, "messages": few_shot("Paris"), "max_tokens": 40,
           "temperature": 0, "tools": TOOLS}
    ref = c.chat.completions.create(**req).choices[0].message.tool_calls or []
    content, finish, acc = "", None, {}
    for chunk in c.chat.completions.create(stream=True, **req):
        if not chunk.choices:
            continue
        ch = chunk.choices[0]
        if ch.finish_reason:
            finish = ch.finish_reason
        if ch.delta.content:
            content += ch.delta.content
        for t in ch.delta.tool_calls or []:
            slot = acc.setdefault(t.index, {"id": None, "name": None, "arguments": ""})
            if t.id:
                slot["id"] = t.id
            if t.function and t.function.name:
                slot["name"] = t.function.name
            if t.function and t.function.arguments:
                slot["arguments"] += t.function.arguments
    got = [acc[i] for i in sorted(acc)]
    print(f"  streamed: {got}, content {content!r}")
    check("<tool_call" not in content and "</tool_call>" not in content,
          "no call markup streamed as content")
    check(finish == "tool_calls", f"streamed finish_reason tool_calls ({finish})")
    check(len(got) == len(ref) >= 1 and all(
        g["id"] and g["id"].startswith("call_") and g["name"] == r.function.name
        and json.loads(g["arguments"]) == json.loads(r.function.arguments)
        for g, r in zip(got, ref)),
        "the accumulated streamed calls equal the non-streamed ones")


def t_round_trip(srv):
    c = srv.client()
    msgs = few_shot("Paris")
    first = c.chat.completions.create(model=MODEL_NAME, messages=msgs, tools=TOOLS,
                                      max_tokens=40, temperature=0).choices[0].message
    if not check(bool(first.tool_calls), "a call to answer"):
        return
    msgs.append({"role": "assistant", "content": None,
                 "tool_calls": [t.model_dump() for t in first.tool_calls]})
    for t in first.tool_calls:
        msgs.append({"role": "tool", "tool_call_id": t.id, "content": "Paris: 18 C, cloudy"})
    r = c.chat.completions.create(model=MODEL_NAME, messages=msgs, tools=TOOLS, max_tokens=12,
                                  temperature=0)
    check(r.choices[0].finish_reason in ("stop", "length", "tool_calls"),
          f"the tool result is answered ({r.choices[0].message.content!r})")


def make_hermes_model(model, folder):
    out = os.path.join(folder, "smollm2-hermes.gguf")
    cmd = [sys.executable, "-m", "gguf.scripts.gguf_new_metadata", model, out,
           "--chat-template", HERMES_TEMPLATE, "--force"]
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if p.returncode != 0 or not os.path.exists(out):
        print(f"FAIL: writing {out} with gguf_new_metadata failed (is gguf in .venv? run "
              f"scripts/setup):\n{p.stderr[-2000:]}")
        sys.exit(1)
    return out


def start(binary, model):
    # --log-level info: the server logs which tool format it detected.
    return CmdServer([binary, "--log-level", "info", "serve", model, "--host", "127.0.0.1",
                      "--port", "0", "--served-model-name", MODEL_NAME])


def group_tools(binary, model):
    srv = start(binary, model)
    try:
        srv.wait_ready()
        for fn in (t_stock_template_has_no_tool_format, t_tool_choice_refusals,
                   t_tool_results_accepted):
            run_test(fn, srv)
    finally:
        srv.terminate()
    with tempfile.TemporaryDirectory() as tmp:
        srv = start(binary, make_hermes_model(model, tmp))
        try:
            srv.wait_ready()
            for fn in (t_hermes_format_detected, t_real_call_non_streamed_and_raw,
                       t_real_call_streamed, t_round_trip):
                run_test(fn, srv)
        finally:
            srv.terminate()


def main():
    e2e_main({"tools": group_tools})


if __name__ == "__main__":
    main()
