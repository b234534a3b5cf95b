#!/usr/bin/env python3
"""End-to-end tests of structured outputs through `cellm serve` (SmolLM2-135M,
CPU backend) with the official openai client; every reply is parsed with
json.loads and validated with the `jsonschema` package.

Group `structured` (one ctest, server_e2e_structured):
  - response_format json_object: the reply is a JSON object (chat, greedy)
  - response_format json_schema: a set of schemas (nested objects, arrays
    with bounds, enums, anyOf, $ref, nullable types, formats, integer
    bounds) on chat and
    completions, greedy and sampled, streamed and not: each reply parses,
    validates and ends with finish_reason "stop"
  - tool_choice "required" with two tools and a named function: the reply
    carries tool_calls (finish_reason "tool_calls") whose arguments parse and
    validate against the chosen tool's parameters
  - refusals: an unsupported keyword is a 400 naming response_format's schema
    and the keyword; a malformed response_format and an unknown tool name are
    400s; the server stays healthy

A missing virtual environment, package or model is a failure that says what
to run, never a skip.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server_e2e import MODEL_NAME, Server, check, e2e_main, run_test  # noqa: E402

try:
    import jsonschema
    import openai
    import requests
except ImportError as e:  # pragma: no cover - environment problem
    print(f"FAIL: {e}: run scripts/setup (installs scripts/requirements-test.txt into .venv)")
    sys.exit(1)

# Bounded strings and arrays keep the 135M model's replies short on the CPU.
NAME = {"type": "string", "maxLength": 12}
SCHEMAS = [
    ("person", {"type": "object", "properties": {
        "name": NAME, "age": {"type": "integer"},
        "color": {"enum": ["red", "green", "blue"]}},
        "required": ["name", "age", "color"], "additionalProperties": False}),
    ("nested", {"type": "object", "properties": {
        "user": {"type": "object", "properties": {"first": NAME, "last": NAME},
                 "required": ["first", "last"], "additionalProperties": False},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 1,
                 "maxItems": 3}},
        "required": ["user", "tags"], "additionalProperties": False}),
    ("numbers", {"type": "object", "properties": {
        "values": {"type": "array", "items": {"type": "number"}, "maxItems": 4},
        "ok": {"type": "boolean"}}, "required": ["values", "ok"],
        "additionalProperties": False}),
    ("any_of", {"type": "object", "properties": {
        "shape": {"anyOf": [
            {"type": "object", "properties": {"radius": {"type": "number"}},
             "required": ["radius"], "additionalProperties": False},
            {"type": "object", "properties": {"w": {"type": "integer"}, "h": {"type": "integer"}},
             "required": ["w", "h"], "additionalProperties": False}]}},
        "required": ["shape"], "additionalProperties": False}),
    ("refs", {"$defs": {"city": {"type": "object", "properties": {
        "name": NAME, "pop": {"type": ["integer", "null"]}},
        "required": ["name", "pop"], "additionalProperties": False}},
        "type": "object", "properties": {"from": {"$ref": "#/$defs/city"},
                                         "to": {"$ref": "#/$defs/city"}},
        "required": ["from", "to"], "additionalProperties": False}),
    ("formats", {"type": "object", "properties": {
        "day": {"type": "string", "format": "date"},
        "id": {"type": "string", "format": "uuid"}},
        "required": ["day", "id"], "additionalProperties": False}),
    ("const_and_optional", {"type": "object", "properties": {
        "version": {"const": 2}, "note": {"type": "string", "maxLength": 8},
        "level": {"type": "integer", "nullable": True}},
        "required": ["version", "level"], "additionalProperties": False}),
    ("rating", {"type": "object", "properties": {
        "stars": {"type": "integer", "minimum": 1, "maximum": 5},
        "votes": {"type": "integer", "exclusiveMinimum": 0, "maximum": 100000}},
        "required": ["stars", "votes"], "additionalProperties": False}),
    ("top_array", {"type": "array", "items": {"type": "object", "properties": {
        "k": {"enum": ["x", "y"]}, "v": {"type": "boolean"}}, "required": ["k", "v"],
        "additionalProperties": False}, "minItems": 1, "maxItems": 2}),
]

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 16},
            "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "add", "description": "Adds two integers",
        "parameters": {"type": "object", "properties": {
            "a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"], "additionalProperties": False}}},
]


def validate(value, schema, what):
    try:
        jsonschema.validate(value, schema, format_checker=jsonschema.FormatChecker())
        check(True, f"{what}: validates against its schema")
    except jsonschema.ValidationError as e:
        check(False, f"{what}: validates against its schema ({e.message})")


def parse(text, what):
    try:
        return json.loads(text)
    except (TypeError, json.JSONDecodeError) as e:
        check(False, f"{what}: the reply parses as JSON ({e}: {text!r})")
        return None


def schema_format(name, schema, strict=True):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema,
                                                   "strict": strict}}


def t_json_object(srv):
    c = srv.client()
    r = c.chat.completions.create(
        model=MODEL_NAME, max_tokens=120, temperature=0,
        response_format={"type": "json_object"},
        messages=[{"role": "user", "content": "Give a JSON object with the key city set to Paris."}])
    text = r.choices[0].message.content
    print(f"    json_object: {text!r} ({r.choices[0].finish_reason})")
    check(r.choices[0].finish_reason == "stop", "json_object: finish_reason stop")
    v = parse(text, "json_object")
    check(isinstance(v, dict), "json_object: the reply is an object")


def t_json_schemas(srv):
    c = srv.client()
    for i, (name, schema) in enumerate(SCHEMAS):
        # Alternate greedy and seeded sampling, strict and not.
        sampled = i % 2 == 1
        r = c.chat.completions.create(
            model=MODEL_NAME, max_tokens=160, temperature=0.8 if sampled else 0, seed=7 + i,
            response_format=schema_format(name, schema, strict=i % 3 != 2),
            messages=[{"role": "user", "content": f"Reply with a {name.replace('_', ' ')} "
                                                  "record as JSON."}])
        text = r.choices[0].message.content
        print(f"    {name}{' (sampled)' if sampled else ''}: {text!r}")
        check(r.choices[0].finish_reason == "stop", f"{name}: finish_reason stop")
        v = parse(text, name)
        if v is not None:
            validate(v, schema, name)


def t_streamed_and_completions(srv):
    c = srv.client()
    name, schema = SCHEMAS[1]
    stream = c.chat.completions.create(
        model=MODEL_NAME, max_tokens=160, temperature=0, stream=True,
        response_format=schema_format(name, schema),
        messages=[{"role": "user", "content": "A user and tags as JSON."}])
    text, finish = "", None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    print(f"    streamed: {text!r}")
    check(finish == "stop", "streamed json_schema: finish_reason stop")
    v = parse(text, "streamed json_schema")
    if v is not None:
        validate(v, schema, "streamed json_schema")
    name, schema = SCHEMAS[0]
    r = c.completions.create(model=MODEL_NAME, prompt="A person record in JSON:", max_tokens=120,
                             temperature=0, extra_body={"response_format": schema_format(name, schema)})
    print(f"    completions: {r.choices[0].text!r}")
    check(r.choices[0].finish_reason == "stop", "completions json_schema: finish_reason stop")
    v = parse(r.choices[0].text, "completions json_schema")
    if v is not None:
        validate(v, schema, "completions json_schema")


def check_calls(r, names, what):
    msg = r.choices[0].message
    calls = msg.tool_calls or []
    print(f"    {what}: {[(c.function.name, c.function.arguments) for c in calls]} "
          f"({r.choices[0].finish_reason})")
    check(len(calls) == 1, f"{what}: the reply carries one tool call")
    check(r.choices[0].finish_reason == "tool_calls", f"{what}: finish_reason tool_calls")
    for call in calls:
        check(call.function.name in names, f"{what}: the call names {names}")
        params = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
        args = parse(call.function.arguments, f"{what} arguments")
        if args is not None and call.function.name in params:
            validate(args, params[call.function.name], f"{what} arguments")


def t_tool_choice(srv):
    c = srv.client()
    base = dict(model=MODEL_NAME, max_tokens=120, temperature=0, tools=TOOLS)
    r = c.chat.completions.create(
        tool_choice="required",
        messages=[{"role": "user", "content": "What is the weather in Oslo?"}], **base)
    check_calls(r, {"get_weather", "add"}, "tool_choice required")
    r = c.chat.completions.create(
        tool_choice={"type": "function", "function": {"name": "add"}},
        messages=[{"role": "user", "content": "Add 2 and 40."}], **base)
    check_calls(r, {"add"}, "tool_choice named")
    stream = c.chat.completions.create(
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, stream=True,
        messages=[{"role": "user", "content": "Weather in Rome?"}], **base)
    name, args, finish = "", "", None
    for chunk in stream:
        if not chunk.choices:
            continue
        for tc in chunk.choices[0].delta.tool_calls or []:
            name += tc.function.name or "" if tc.function else ""
            args += tc.function.arguments or "" if tc.function else ""
        finish = chunk.choices[0].finish_reason or finish
    print(f"    streamed named call: {name} {args!r} ({finish})")
    check(name == "get_weather" and finish == "tool_calls",
          "streamed named tool_choice: delta.tool_calls name the function")
    v = parse(args, "streamed named call arguments")
    if v is not None:
        validate(v, TOOLS[0]["function"]["parameters"], "streamed named call arguments")


def t_refusals(srv):
    def expect(what, body, param, words):
        r = requests.post(srv.url + "/v1/chat/completions", timeout=120, json={
            "model": MODEL_NAME, "max_tokens": 8,
            "messages": [{"role": "user", "content": "hi"}], **body})
        err = r.json().get("error", {}) if r.headers.get("content-type", "").startswith(
            "application/json") else {}
        print(f"    {what}: {r.status_code} {err.get('param')}: {err.get('message')}")
        check(r.status_code == 400 and err.get("param") == param,
              f"{what}: 400 naming {param}")
        for w in words:
            check(w in (err.get("message") or ""), f"{what}: the message names {w}")

    schema = "response_format.json_schema.schema"
    expect("pattern", {"response_format": schema_format("s", {"type": "string", "pattern": "^a"})},
           schema, ["'pattern'"])
    expect("minimum", {"response_format": schema_format("s", {
        "type": "object", "properties": {"n": {"type": "number", "minimum": 1}}})},
        schema, ["'minimum'", "#/properties/n"])
    expect("allOf", {"response_format": schema_format("s", {"allOf": [{"type": "string"}]})},
           schema, ["'allOf'"])
    expect("unknown type", {"response_format": {"type": "yaml"}}, "response_format.type",
           ["yaml"])
    expect("no schema", {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
           "response_format.json_schema.schema", [])
    expect("unknown function", {"tools": TOOLS, "tool_choice": {
        "type": "function", "function": {"name": "nope"}}}, "tool_choice", ["nope"])
    expect("bad tool parameters", {"tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {
            "x": {"type": "string", "pattern": "a+"}}}}}], "tool_choice": "required"},
        "tools[0].function.parameters", ["'pattern'"])
    check(requests.get(srv.url + "/health", timeout=30).status_code == 200,
          "the server is healthy after the refusals")
    # The same refused schema, fixed, is served.
    c = srv.client()
    r = c.chat.completions.create(
        model=MODEL_NAME, max_tokens=40, temperature=0,
        response_format=schema_format("s", {"type": "string", "maxLength": 6}),
        messages=[{"role": "user", "content": "Say hi."}])
    v = parse(r.choices[0].message.content, "a string schema")
    check(isinstance(v, str) and len(v) <= 6, "a string schema gives a short JSON string")


def group_structured(binary, model):
    srv = Server(binary, model, "--max-sessions", "4", "--max-session-tokens", "1024")
    try:
        srv.wait_ready()
        for t in (t_json_object, t_json_schemas, t_streamed_and_completions, t_tool_choice,
                  t_refusals):
            run_test(t, srv)
    finally:
        srv.kill()


def main():
    e2e_main({"structured": group_structured})


if __name__ == "__main__":
    main()
