#!/usr/bin/env python3
"""End-to-end tests of structured outputs through `cellm serve` (SmolLM2-135M,
CPU backend) with the official openai client; every reply is parsed with
json.loads and validated with the `jsonschema` package.

Group `structured` (one ctest, server_e2e_structured):
  - response_format json_object: the reply is a JSON object (chat, greedy)
  - response_format json_schema: 60 schemas over the whole subset the
    compiler accepts (grammar/json_schema.h): every root type, type lists
    and nullable, properties / required / additionalProperties (false and
    true), items / prefixItems, minItems / maxItems, enum / const
    (scalars, null, objects), anyOf / oneOf, $ref to $defs, definitions,
    recursion and chains, minLength / maxLength, formats date, time,
    date-time, uuid and email, integer minimum / maximum / exclusive bounds,
    annotations; on chat and completions, greedy and sampled, streamed and
    not: each reply parses, validates with jsonschema's FormatChecker and
    ends with finish_reason "stop"
  - open maps (additionalProperties a schema): greedy SmolLM2 may add keys
    until max_tokens, so a cut reply is checked entry by entry up to the cut
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

# The 2020-12 draft's checkers (a bare FormatChecker() mixes in draft 3's
# "time", which refuses RFC 3339 offsets). Without its optional helpers a
# checker passes formats it cannot check (date-time needs rfc3339-validator):
# every format the schemas use must be checked for real.
FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER
_UNCHECKED = {"date", "time", "date-time", "uuid", "email"} - set(FORMATS.checkers)
if _UNCHECKED:
    print(f"FAIL: jsonschema's FormatChecker cannot check {sorted(_UNCHECKED)}: run scripts/setup "
          "(installs rfc3339-validator from scripts/requirements-test.txt into .venv)")
    sys.exit(1)

# Bounded strings and arrays keep the 135M model's replies short on the CPU.
NAME = {"type": "string", "maxLength": 12}
SHORT = {"type": "string", "maxLength": 6}


def obj(props, required=None, extra=False):
    """An object schema with the given properties (all required by default)."""
    s = {"type": "object", "properties": props,
         "required": list(props) if required is None else required}
    if extra is not None:
        s["additionalProperties"] = extra
    return s


SCHEMAS = [
    # --- the nine of the first version ---
    ("person", obj({"name": NAME, "age": {"type": "integer"},
                    "color": {"enum": ["red", "green", "blue"]}})),
    ("nested", obj({"user": obj({"first": NAME, "last": NAME}),
                    "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]},
                             "minItems": 1, "maxItems": 3}})),
    ("numbers", obj({"values": {"type": "array", "items": {"type": "number"}, "maxItems": 4},
                     "ok": {"type": "boolean"}})),
    ("any_of", obj({"shape": {"anyOf": [obj({"radius": {"type": "number"}}),
                                        obj({"w": {"type": "integer"}, "h": {"type": "integer"}})]}})),
    ("refs", {"$defs": {"city": obj({"name": NAME, "pop": {"type": ["integer", "null"]}})},
              **obj({"from": {"$ref": "#/$defs/city"}, "to": {"$ref": "#/$defs/city"}})}),
    ("formats", obj({"day": {"type": "string", "format": "date"},
                     "id": {"type": "string", "format": "uuid"}})),
    ("const_and_optional", obj({"version": {"const": 2}, "note": {"type": "string", "maxLength": 8},
                                "level": {"type": "integer", "nullable": True}},
                               required=["version", "level"])),
    ("rating", obj({"stars": {"type": "integer", "minimum": 1, "maximum": 5},
                    "votes": {"type": "integer", "exclusiveMinimum": 0, "maximum": 100000}})),
    ("top_array", {"type": "array", "items": obj({"k": {"enum": ["x", "y"]}, "v": {"type": "boolean"}}),
                   "minItems": 1, "maxItems": 2}),
    # --- root values of every type ---
    ("root_string", {"type": "string", "maxLength": 10}),
    ("root_integer", {"type": "integer", "minimum": 0, "maximum": 999}),
    ("root_number", {"type": "number"}),
    ("root_boolean", {"type": "boolean"}),
    ("root_null", {"type": "null"}),
    ("root_enum_mixed", {"enum": ["on", 1, True, None, 2.5]}),
    ("root_const_object", {"const": {"a": [1, 2], "b": "x"}}),
    ("root_type_list", {"type": ["boolean", "null"]}),
    # --- objects ---
    ("empty_object", {"type": "object", "properties": {}, "additionalProperties": False}),
    ("optional_only", obj({"a": {"type": "boolean"}, "b": {"type": "integer", "maximum": 9}},
                          required=[])),
    ("some_required", obj({"id": {"type": "integer", "minimum": 1, "maximum": 99},
                           "label": SHORT, "flag": {"type": "boolean"}}, required=["id"])),
    ("open_object", obj({"kind": {"const": "open"}}, extra=True)),
    ("no_additional_keyword", obj({"x": {"type": "integer", "maximum": 50}}, extra=None)),
    ("deep_nesting", obj({"a": obj({"b": obj({"c": obj({"d": {"type": "boolean"}})})})})),
    ("object_in_array_in_object", obj({"rows": {"type": "array", "maxItems": 2, "items":
                                                obj({"n": {"type": "integer", "minimum": 0,
                                                           "maximum": 9}})}})),
    # --- arrays ---
    ("array_exact_count", {"type": "array", "items": {"type": "boolean"}, "minItems": 3,
                           "maxItems": 3}),
    ("array_of_short_strings", {"type": "array", "items": SHORT, "minItems": 1, "maxItems": 3}),
    ("array_of_nullable", {"type": "array", "items": {"type": ["integer", "null"], "maximum": 99,
                                                      "minimum": -99},
                           "maxItems": 3}),
    ("prefix_items", {"type": "array", "prefixItems": [NAME, {"type": "integer", "maximum": 120,
                                                              "minimum": 0},
                                                       {"type": "boolean"}],
                      "items": False}),
    ("prefix_then_items", {"type": "array", "prefixItems": [{"const": "head"}],
                           "items": {"type": "integer", "minimum": 0, "maximum": 9},
                           "maxItems": 3}),
    ("nested_arrays", {"type": "array", "maxItems": 2, "items": {
        "type": "array", "maxItems": 2, "items": {"enum": [0, 1]}}}),
    ("empty_array_allowed", obj({"list": {"type": "array", "items": {"type": "integer"},
                                          "maxItems": 0}})),
    # --- enums and consts ---
    ("enum_strings", obj({"size": {"enum": ["small", "medium", "large"]}})),
    ("enum_numbers", obj({"level": {"enum": [1, 2, 3, 10]}})),
    ("enum_with_null", obj({"mode": {"enum": ["fast", None]}})),
    ("const_string", obj({"kind": {"const": "event"}, "n": {"type": "integer", "minimum": 0,
                                                            "maximum": 5}})),
    ("const_null", obj({"nothing": {"const": None}})),
    ("typed_enum", obj({"answer": {"type": "string", "enum": ["yes", "no"]}})),
    # --- anyOf / oneOf ---
    ("any_of_scalars", obj({"v": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9},
                                            {"type": "boolean"}]}})),
    ("one_of_tagged", obj({"item": {"oneOf": [
        obj({"type": {"const": "book"}, "pages": {"type": "integer", "minimum": 1,
                                                   "maximum": 999}}),
        obj({"type": {"const": "film"}, "minutes": {"type": "integer", "minimum": 1,
                                                     "maximum": 300}})]}})),
    ("any_of_null", obj({"v": {"anyOf": [SHORT, {"type": "null"}]}})),
    ("one_of_root", {"oneOf": [{"type": "integer", "minimum": 0, "maximum": 5},
                               {"enum": ["none"]}]}),
    # --- $ref / $defs / definitions / recursion ---
    ("definitions_ref", {"definitions": {"pt": obj({"x": {"type": "integer", "minimum": -9,
                                                          "maximum": 9},
                                                    "y": {"type": "integer", "minimum": -9,
                                                          "maximum": 9}})},
                         **obj({"a": {"$ref": "#/definitions/pt"},
                                "b": {"$ref": "#/definitions/pt"}})}),
    ("recursive_tree", {"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer", "minimum": 0, "maximum": 9},
        "kids": {"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/node"}}},
        "required": ["v", "kids"], "additionalProperties": False}},
        "$ref": "#/$defs/node"}),
    ("ref_in_items", {"$defs": {"tag": {"enum": ["x", "y", "z"]}},
                      "type": "array", "items": {"$ref": "#/$defs/tag"}, "minItems": 1,
                      "maxItems": 3}),
    ("ref_to_ref", {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"type": "boolean"}},
                    **obj({"flag": {"$ref": "#/$defs/a"}})}),
    # --- strings ---
    ("string_lengths", obj({"code": {"type": "string", "minLength": 2, "maxLength": 4},
                            "word": {"type": "string", "minLength": 1, "maxLength": 8}})),
    ("string_exact_length", obj({"pin": {"type": "string", "minLength": 4, "maxLength": 4}})),
    ("format_date_time", obj({"at": {"type": "string", "format": "date-time"}})),
    ("format_time", obj({"t": {"type": "string", "format": "time"}})),
    ("format_email", obj({"mail": {"type": "string", "format": "email"}})),
    ("format_uuid_list", {"type": "array", "items": {"type": "string", "format": "uuid"},
                          "minItems": 1, "maxItems": 2}),
    ("format_date_nullable", obj({"due": {"type": ["string", "null"], "format": "date"}})),
    # --- numbers and integers ---
    ("integer_negative_range", obj({"t": {"type": "integer", "minimum": -40, "maximum": -1}})),
    ("integer_exclusive_bounds", obj({"p": {"type": "integer", "exclusiveMinimum": 10,
                                            "exclusiveMaximum": 20}})),
    ("integer_large_bounds", obj({"year": {"type": "integer", "minimum": 1900, "maximum": 2100}})),
    ("integer_only_minimum", obj({"count": {"type": "integer", "minimum": 5}})),
    ("integer_only_maximum", obj({"debt": {"type": "integer", "maximum": -3}})),
    ("number_and_integer", obj({"price": {"type": "number"}, "qty": {"type": "integer",
                                                                     "minimum": 1,
                                                                     "maximum": 10}})),
    # --- annotations are ignored ---
    ("annotated", {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "T",
                   "description": "annotated", "$comment": "ignored",
                   **obj({"ok": {"type": "boolean", "description": "flag", "default": True,
                                 "examples": [True]}})}),
    # --- recursion through the root ---
    ("recursive_root", {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9},
                                  {"type": "array", "maxItems": 3, "items": {"$ref": "#"}}]}),
]

# The request's words, where the generic one lets the small greedy model
# loop until max_tokens (a map's keys, a tree's depth): the grammar allows
# such replies, the prompt makes them end.
PROMPTS = {
    "recursive_tree": 'Reply with this JSON: {"v": 1, "kids": [{"v": 2, "kids": []}]}',
    "recursive_root": "Reply with the JSON array [1, [2, 3]].",
}

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
        jsonschema.Draft202012Validator(schema, format_checker=FORMATS).validate(value)
        check(True, f"{what}: validates against its schema")
    except jsonschema.ValidationError as e:
        check(False, f"{what}: validates against its schema ({e.message})")


# What parse() returns for a reply that is not JSON (None is JSON's null).
BAD = object()


def parse(text, what):
    try:
        return json.loads(text)
    except (TypeError, json.JSONDecodeError) as e:
        check(False, f"{what}: the reply parses as JSON ({e}: {text!r})")
        return BAD


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


# Open maps: nothing bounds their keys, and greedy SmolLM2 may add keys until
# max_tokens. A reply cut by max_tokens is still checked: every complete
# entry before the cut must follow the value schema.
MAPS = [
    ("map_of_integers", {"type": "object", "additionalProperties":
                         {"type": "integer", "minimum": 0, "maximum": 9}}),
    ("map_of_enums", {"type": "object", "additionalProperties": {"enum": ["yes", "no"]}}),
]


def complete_entries(text):
    """The entries of a map cut short: everything up to its last comma, closed."""
    cut = text.rfind(",")
    return text[:cut] + "}" if cut > 0 else "{}"


def t_open_maps(srv):
    c = srv.client()
    for name, schema in MAPS:
        r = c.chat.completions.create(
            model=MODEL_NAME, max_tokens=120, temperature=0,
            response_format=schema_format(name, schema),
            messages=[{"role": "user", "content": "Reply with a JSON object that maps the words "
                       "cat and dog to values."}])
        text = r.choices[0].message.content
        finish = r.choices[0].finish_reason
        print(f"    {name} ({finish}): {text!r}")
        check(finish in ("stop", "length"), f"{name}: finish_reason stop or length ({finish})")
        v = parse(text if finish == "stop" else complete_entries(text), name)
        if v is not BAD:
            check(isinstance(v, dict), f"{name}: an object")
            validate(v, schema, name)


def t_json_schemas(srv):
    c = srv.client()
    for i, (name, schema) in enumerate(SCHEMAS):
        # Mostly greedy; every fourth seeded sampling (not where a prompt
        # guides the greedy model); every third not strict.
        sampled = i % 4 == 1 and name not in PROMPTS
        r = c.chat.completions.create(
            model=MODEL_NAME, max_tokens=120, temperature=0.8 if sampled else 0, seed=7 + i,
            response_format=schema_format(name, schema, strict=i % 3 != 2),
            messages=[{"role": "user", "content": PROMPTS.get(
                name, f"Reply with a {name.replace('_', ' ')} record as JSON.")}])
        text = r.choices[0].message.content
        print(f"    {name}{' (sampled)' if sampled else ''}: {text!r}")
        check(r.choices[0].finish_reason == "stop",
              f"{name}: finish_reason stop ({r.choices[0].finish_reason})")
        v = parse(text, name)
        if v is not BAD:
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
    if v is not BAD:
        validate(v, schema, "streamed json_schema")
    name, schema = SCHEMAS[0]
    r = c.completions.create(model=MODEL_NAME, prompt="A person record in JSON:", max_tokens=120,
                             temperature=0, extra_body={"response_format": schema_format(name, schema)})
    print(f"    completions: {r.choices[0].text!r}")
    check(r.choices[0].finish_reason == "stop", "completions json_schema: finish_reason stop")
    v = parse(r.choices[0].text, "completions json_schema")
    if v is not BAD:
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
        if args is not BAD and call.function.name in params:
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
    if v is not BAD:
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
        for t in (t_json_object, t_json_schemas, t_open_maps, t_streamed_and_completions,
                  t_tool_choice, t_refusals):
            run_test(t, srv)
    finally:
        srv.kill()


def main():
    e2e_main({"structured": group_structured})


if __name__ == "__main__":
    main()
