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
  - one copy per other family, with a short ChatML-based template of ours
    that renders tool calls and tool results the way the family does and
    carries the markers the server's format detector looks for:
      llama3_tag   <|python_tag|>{"name": ..., "parameters": {...}}, results
                   as an `ipython` turn (Llama 3.1-3.3)
      llama3_json  the same without <|python_tag|> (bare JSON calls)
      mistral      [TOOL_CALLS][{"name": ..., "arguments": {...}}], results
                   in a turn of their own, [TOOL_RESULTS]...[/TOOL_RESULTS]
      gemma        ```tool_code\nname(arg="v")\n``` blocks, results in
                   ```tool_output blocks (Gemma 3)
    For each: the server logs the expected format; tool_choice "required"
    and a named function (grammar-forced, so the small model writes a call in
    the family's own convention) give tool_calls whose arguments parse and
    validate against the tool's parameters with finish_reason "tool_calls",
    streamed and not, the streamed delta.tool_calls assembling to the
    non-streamed call; a second turn sending the call and a `role: "tool"`
    result back is answered, and a longer result grows usage.prompt_tokens by
    its extra tokens (the template rendered it); the "auto" path with a
    few-shot conversation in the family's convention parses the greedy
    model's own call as tool_calls, equal to what a parser here reads from
    the raw text (tool_choice "none"). There is no way to feed recorded text
    to a live server, so the JSON families' "auto" parsing of exact,
    recorded-style replies goes through response_format json_schema with a
    `const` reply (the grammar makes the model write exactly it): two
    parallel calls for mistral, one bare call for llama3_json.

A missing virtual environment, package or model is a failure that says what
to run, never a skip.
"""
import ast
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
    import jsonschema
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
        for family in FAMILIES:
            run_family(binary, model, tmp, family)


# ------------------------------------------------ the other families

# Each template keeps SmolLM2's ChatML turns (the model knows <|im_end|>) and
# renders calls and results the family's way. {CALL} renders one call `tc`
# (arguments are an object once the server has checked them).
FAMILY_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' and message.tool_calls %}"
    "{{- '<|im_start|>assistant\\n' }}{CALLS}{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}{RESULT}"
    "{%- else %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")

LLAMA3_CALL = ("{%- for tc in message.tool_calls %}{TAG}"
               "{{- '{\"name\": \"' + tc.function.name + '\", \"parameters\": ' + "
               "(tc.function.arguments | tojson) + '}' }}"
               "{%- if not loop.last %}{{- '; ' }}{%- endif %}{%- endfor %}")
LLAMA3_RESULT = ("{{- '<|im_start|>ipython\\n' + message.content + '<|im_end|>\\n' }}")
MISTRAL_CALL = ("{{- '[TOOL_CALLS][' }}{%- for tc in message.tool_calls %}"
                "{{- '{\"name\": \"' + tc.function.name + '\", \"arguments\": ' + "
                "(tc.function.arguments | tojson) + '}' }}"
                "{%- if not loop.last %}{{- ', ' }}{%- endif %}{%- endfor %}{{- ']' }}")
# Results in a turn of their own (as Mistral's template puts them outside
# [INST]): in a user turn the small model answers with a result, not a call.
MISTRAL_RESULT = ("{{- '<|im_start|>tool\\n[TOOL_RESULTS]{\"content\": ' + "
                  "(message.content | tojson) + '}[/TOOL_RESULTS]<|im_end|>\\n' }}")
GEMMA_CALL = ("{{- '```tool_code\\n' }}{%- for tc in message.tool_calls %}"
              "{{- tc.function.name + '(' }}"
              "{%- for k, v in tc.function.arguments.items() %}"
              "{{- k + '=' + (v | tojson) }}{%- if not loop.last %}{{- ', ' }}{%- endif %}"
              "{%- endfor %}{{- ')\\n' }}{%- endfor %}{{- '```' }}")
GEMMA_RESULT = ("{{- '<|im_start|>user\\n```tool_output\\n' + message.content + "
                "'\\n```<|im_end|>\\n' }}")


def family_template(calls, result):
    return FAMILY_TEMPLATE.replace("{CALLS}", calls).replace("{RESULT}", result)


# name -> (template, the format the server must detect, the raw-text parser)
def parse_llama3_text(text):
    out = []
    body = text.strip()
    if body.startswith("<|python_tag|>"):
        body = body[len("<|python_tag|>"):]
    dec = json.JSONDecoder()
    i = 0
    while i < len(body):
        while i < len(body) and body[i] in " \n\t;":
            i += 1
        if i >= len(body):
            break
        try:
            v, i = dec.raw_decode(body, i)
        except ValueError:
            break
        if isinstance(v, dict) and "name" in v:
            out.append((v["name"], v.get("parameters", v.get("arguments", {}))))
    return out


def parse_mistral_text(text):
    body = text.strip()
    if body.startswith("[TOOL_CALLS]"):
        body = body[len("[TOOL_CALLS]"):].strip()
    try:
        v, _ = json.JSONDecoder().raw_decode(body)
    except ValueError:
        return []
    v = v if isinstance(v, list) else [v]
    return [(c["name"], c.get("arguments", {})) for c in v if isinstance(c, dict) and "name" in c]


def parse_gemma_text(text):
    out = []
    for block in re.findall(r"```tool_code\s*(.*?)```", text, re.S):
        for line in block.strip().splitlines():
            try:
                node = ast.parse(line.strip(), mode="eval").body
            except SyntaxError:
                continue
            calls = node.elts if isinstance(node, ast.List) else [node]
            for c in calls:
                if isinstance(c, ast.Call) and isinstance(c.func, ast.Name):
                    out.append((c.func.id, {k.arg: ast.literal_eval(k.value) for k in c.keywords}))
    return out


FAMILIES = {
    "llama3_tag": (family_template(LLAMA3_CALL.replace("{TAG}", "{{- '<|python_tag|>' }}"),
                                   LLAMA3_RESULT), "llama3_json", parse_llama3_text),
    "llama3_json": (family_template(LLAMA3_CALL.replace("{TAG}", ""), LLAMA3_RESULT),
                    "llama3_json", parse_llama3_text),
    "mistral": (family_template(MISTRAL_CALL, MISTRAL_RESULT), "mistral", parse_mistral_text),
    "gemma": (family_template(GEMMA_CALL, GEMMA_RESULT), "gemma_tool_code", parse_gemma_text),
}

FORCED_TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 16},
            "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "add", "description": "Adds two integers",
        "parameters": {"type": "object", "properties": {
            "a": {"type": "integer", "minimum": -1000, "maximum": 1000},
            "b": {"type": "integer", "minimum": -1000, "maximum": 1000}},
            "required": ["a", "b"], "additionalProperties": False}}},
]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in FORCED_TOOLS}


def valid_args(call, what):
    try:
        args = json.loads(call.function.arguments)
    except (TypeError, ValueError) as e:
        check(False, f"{what}: arguments parse as JSON ({e}: {call.function.arguments!r})")
        return None
    try:
        jsonschema.validate(args, PARAMS[call.function.name])
        check(True, f"{what}: arguments {args} match {call.function.name}'s parameters")
    except (jsonschema.ValidationError, KeyError) as e:
        check(False, f"{what}: arguments {args} match the tool's parameters ({e})")
    return args


def streamed_calls(c, **req):
    content, finish, acc, pieces = "", None, {}, 0
    for chunk in c.chat.completions.create(stream=True, **req):
        if not chunk.choices:
            continue
        ch = chunk.choices[0]
        finish = ch.finish_reason or finish
        content += ch.delta.content or ""
        for t in ch.delta.tool_calls or []:
            slot = acc.setdefault(t.index, {"id": None, "name": None, "arguments": ""})
            slot["id"] = t.id or slot["id"]
            if t.function and t.function.name:
                slot["name"] = t.function.name
            if t.function and t.function.arguments:
                slot["arguments"] += t.function.arguments
                pieces += 1
    return [acc[i] for i in sorted(acc)], content, finish, pieces


def t_family_forced(srv, family):
    c = srv.client()
    # The grammar allows some whitespace between the call's pieces, which the
    # small model uses: room for it.
    base = dict(model=MODEL_NAME, max_tokens=160, temperature=0, tools=FORCED_TOOLS)
    msgs = [{"role": "user", "content": "What is the weather in Oslo?"}]
    r = c.chat.completions.create(tool_choice="required", messages=msgs, **base)
    ch = r.choices[0]
    calls = ch.message.tool_calls or []
    print(f"    {family} required: {[(t.function.name, t.function.arguments) for t in calls]} "
          f"({ch.finish_reason})")
    check(len(calls) == 1 and calls[0].function.name in PARAMS and calls[0].type == "function"
          and calls[0].id.startswith("call_"), f"{family} required: one call of a given tool")
    check(ch.finish_reason == "tool_calls", f"{family} required: finish_reason tool_calls")
    check(not ch.message.content, f"{family} required: no content ({ch.message.content!r})")
    for t in calls:
        valid_args(t, f"{family} required")

    named = dict(tool_choice={"type": "function", "function": {"name": "add"}},
                 messages=[{"role": "user", "content": "Add 2 and 40."}], **base)
    ref = c.chat.completions.create(**named).choices[0]
    ref_calls = ref.message.tool_calls or []
    check(len(ref_calls) == 1 and ref_calls[0].function.name == "add" and
          ref.finish_reason == "tool_calls", f"{family} named: one call of add, tool_calls")
    ref_args = valid_args(ref_calls[0], f"{family} named") if ref_calls else None
    got, content, finish, pieces = streamed_calls(c, **named)
    print(f"    {family} named streamed: {got} ({finish}, {pieces} argument pieces)")
    check(finish == "tool_calls" and not content,
          f"{family} named streamed: finish_reason tool_calls, no content ({content!r})")
    check(len(got) == 1 and got[0]["name"] == "add" and got[0]["id"] and pieces >= 1 and
          ref_args is not None and json.loads(got[0]["arguments"] or "null") == ref_args,
          f"{family} named streamed: delta.tool_calls assemble to the non-streamed call")
    return calls


def t_family_second_turn(srv, family, calls):
    """The call and its result sent back: answered, and the result rendered."""
    c = srv.client()
    if not check(bool(calls), f"{family}: a call to answer"):
        return
    first = [{"role": "user", "content": "What is the weather in Oslo?"},
             {"role": "assistant", "content": None,
              "tool_calls": [t.model_dump() for t in calls]}]
    short, long = "18 C", "18 C, cloudy, a light wind from the west, rain later in the evening"
    used = []
    for result in (short, long):
        msgs = first + [{"role": "tool", "tool_call_id": t.id, "content": result} for t in calls]
        r = c.chat.completions.create(model=MODEL_NAME, messages=msgs, tools=FORCED_TOOLS,
                                      max_tokens=6, temperature=0)
        check(r.choices[0].finish_reason in ("stop", "length", "tool_calls"),
              f"{family}: the tool result is answered ({r.choices[0].message.content!r})")
        used.append(r.usage.prompt_tokens)
    extra = (len(requests.post(srv.url + "/tokenize", json={"prompt": long}, timeout=60)
                 .json()["tokens"]) -
             len(requests.post(srv.url + "/tokenize", json={"prompt": short}, timeout=60)
                 .json()["tokens"])) * len(calls)
    check(used[1] > used[0] and abs((used[1] - used[0]) - extra) <= 2 * len(calls),
          f"{family}: the longer result grows the prompt by its tokens ({used[0]} -> {used[1]}, "
          f"{extra} more expected): the template rendered it")


def family_few_shot(city):
    turns = [{"role": "system", "content": "You answer weather questions by calling get_weather."}]
    for i, (past, unit) in enumerate((("Rome", "celsius"), ("Berlin", "celsius"),
                                      ("Madrid", "celsius"))):
        turns += [
            {"role": "user", "content": f"What is the weather in {past}?"},
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{i}", "type": "function", "function": {
                    "name": "get_weather",
                    "arguments": json.dumps({"city": past, "unit": unit})}}]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": f"{past}: 20 C, sunny"},
            {"role": "assistant", "content": f"It is 20 C and sunny in {past}."}]
    return turns + [{"role": "user", "content": f"What is the weather in {city}?"}]


def t_family_auto(srv, family, parse_text):
    c = srv.client()
    req = dict(model=MODEL_NAME, messages=family_few_shot("Paris"), max_tokens=48, temperature=0,
               tools=FORCED_TOOLS)
    raw = c.chat.completions.create(tool_choice="none", **req).choices[0].message.content or ""
    expected = parse_text(raw)
    print(f"    {family} auto, raw model output: {raw!r} -> {expected}")
    check(len(expected) >= 1, f"{family} auto: the greedy model writes a call in the family's "
                              f"convention, parsed here")
    r = c.chat.completions.create(**req).choices[0]
    calls = r.message.tool_calls or []
    check(r.finish_reason == "tool_calls" and len(calls) == len(expected) and all(
        t.function.name == name and json.loads(t.function.arguments) == args
        for t, (name, args) in zip(calls, expected)),
        f"{family} auto: tool_calls equal the calls parsed from the raw text "
        f"({[(t.function.name, t.function.arguments) for t in calls]}, {r.finish_reason})")
    got, content, finish, _ = streamed_calls(c, **req)
    check(finish == "tool_calls" and len(got) == len(calls) and all(
        g["name"] == t.function.name and
        json.loads(g["arguments"]) == json.loads(t.function.arguments)
        for g, t in zip(got, calls)),
        f"{family} auto streamed: the same calls ({got}, {finish}, content {content!r})")


def t_family_exact_reply(srv, family):
    """A recorded-style reply, written exactly (response_format const), read
    back by the auto path: parallel calls where the format is a JSON list."""
    if family == "mistral":
        reply = [{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}},
                 {"name": "add", "arguments": {"a": 2, "b": 40}}]
    elif family == "llama3_json":
        reply = {"name": "add", "parameters": {"a": 7, "b": 8}}
    else:
        return
    c = srv.client()
    wanted = [(x["name"], x.get("arguments", x.get("parameters")))
              for x in (reply if isinstance(reply, list) else [reply])]
    req = dict(model=MODEL_NAME, max_tokens=80, temperature=0, tools=FORCED_TOOLS,
               messages=[{"role": "user", "content": "Weather in Paris, and 2 + 40?"}],
               response_format={"type": "json_schema", "json_schema": {
                   "name": "reply", "schema": {"const": reply}}})
    r = c.chat.completions.create(**req).choices[0]
    calls = r.message.tool_calls or []
    print(f"    {family} exact reply: {[(t.function.name, t.function.arguments) for t in calls]}")
    check(r.finish_reason == "tool_calls" and
          [(t.function.name, json.loads(t.function.arguments)) for t in calls] == wanted and
          len({t.id for t in calls}) == len(calls),
          f"{family} exact reply: {len(wanted)} call(s) parsed, in order, with their own ids")
    got, content, finish, _ = streamed_calls(c, **req)
    check(finish == "tool_calls" and not content and
          [(g["name"], json.loads(g["arguments"])) for g in got] == wanted and
          len({g["id"] for g in got}) == len(got),
          f"{family} exact reply streamed: delta.tool_calls by index ({got}, {finish})")


def make_family_model(model, folder, name, template):
    out = os.path.join(folder, f"smollm2-{name}.gguf")
    cmd = [sys.executable, "-m", "gguf.scripts.gguf_new_metadata", model, out,
           "--chat-template", template, "--force"]
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if p.returncode != 0 or not os.path.exists(out):
        print(f"FAIL: writing {out} with gguf_new_metadata failed (is gguf in .venv? run "
              f"scripts/setup):\n{p.stderr[-2000:]}")
        sys.exit(1)
    return out


def run_family(binary, model, tmp, family):
    template, fmt, parse_text = FAMILIES[family]
    path = make_family_model(model, tmp, family, template)
    srv = start(binary, path)
    try:
        srv.wait_ready()
        print(f"  family {family}")
        calls = []

        def t_format_detected(s):
            check(tool_format_logged(s) == fmt,
                  f"{family}: the server detects format {fmt} (log: {tool_format_logged(s)})")

        def t_forced(s):
            calls.extend(t_family_forced(s, family) or [])

        def t_second_turn(s):
            t_family_second_turn(s, family, calls)

        def t_auto(s):
            t_family_auto(s, family, parse_text)

        def t_exact_reply(s):
            t_family_exact_reply(s, family)

        for fn in (t_format_detected, t_forced, t_second_turn, t_auto, t_exact_reply):
            run_test(fn, srv)
    finally:
        os.remove(path)
        srv.terminate()


def main():
    e2e_main({"tools": group_tools})


if __name__ == "__main__":
    main()
