#!/usr/bin/env python3
"""Writes the expected outputs of the chat interpreter's conformance tests from
the real thing: Jinja2 configured exactly as transformers configures it, and
transformers' own render_jinja_template for whole conversations.

  python3 -m venv /tmp/chat-venv && /tmp/chat-venv/bin/pip install transformers jinja2
  /tmp/chat-venv/bin/python tests/chat/make_reference.py

Inputs are written here by hand; the outputs in conformance.jsonl and
conversations.jsonl come only from Jinja2/transformers (never from cellm).
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TESTDATA = os.environ.get("CELLM_TESTDATA", os.path.join(HERE, "..", "..", "..", "shared", "testdata"))

# ---- single constructs: (template, context) --------------------------------
CASES = [
    # output, literals, whitespace control
    ("{{ 'a' }}{{ \"b\" }}{{ 1 }}{{ 1.5 }}{{ true }}{{ none }}{{ [1, 'x', none] }}{{ {'k': [true]} }}", {}),
    ("{{ (1, 2) }}{{ (1,) }}{{ () }}{{ 1e20 }} {{ 1.5e-7 }} {{ 100.0 }} {{ 0.1 + 0.2 }} {{ 1_000 }} {{ 0x1F }}", {}),
    ("{{ 'esc: \\n\\t\\\\ \\' \\x41 \\u00e9 \\101 \\d' }}", {}),
    ("{{ 'it\\'s' }} {{ ['it\\'s', 'say \"hi\"', 'a\\nb'] }}", {}),
    ("a\n  {% if true %}\n    b\n  {% endif %}\nc\n", {}),
    ("a  {%- if true -%}  b  {%- endif -%}  c", {}),
    ("a  {%+ if true +%}\n  b\n{% endif %}", {}),
    ("x {{- ' y ' -}} z\n{# comment #}\n  {#- c2 -#}  w", {}),
    ("{% for i in [1,2] %}\n  {{ i }}\n{% endfor %}\n", {}),
    ("  {{ 'v' }}\n  {% set x = 1 %}  after\n", {}),
    ("{% raw %}{{ not parsed }}{% endraw %}|{%- raw -%}  x  {%- endraw -%}|", {}),
    ("line1\r\nline2\r\n{% if true %}\r\nyes\r\n{% endif %}", {}),
    ("trailing newline kept once\n\n", {}),
    ("a\n  {# c #}\nb\n  {{ 'v' }} x  {% if true %}y{% endif %}\n{{ 'a' }}   {% if true %}b{% endif %}", {}),
    ("   {% if true %}\n   {% if true %}x{% endif %}\n{% endif %}\t{% if true %}z{% endif %}", {}),
    ("{% for m in ms %}\n    {%- if m %}\n        {{- m }}\n    {% endif %}\n{% endfor %}", {"ms": ["a", "", "b"]}),
    # operators
    ("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7 / 2 }} {{ 6 / 3 }}", {}),
    ("{{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 1 + 2.0 }} {{ true + 1 }} {{ 'ab' * 2 }} {{ [1] * 3 }} {{ 3 * 'x' }}", {}),
    ("{{ 'a' ~ 1 ~ none ~ true ~ 1.0 ~ [1] }}{{ 'a' + 'b' }}{{ [1] + [2] }}{{ -3 }}{{ - -3 }}{{ +3 }}", {}),
    ("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 1 == true }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 != 2 }}", {}),
    ("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ 1 in [1.0] }}", {}),
    ("{{ 1 and 2 }} {{ 0 and 2 }} {{ 0 or 'x' }} {{ '' or [] }} {{ not 0 }} {{ not not 'a' }} {{ none or none }}", {}),
    ("{{ 'y' if 1 else 'n' }} {{ 'y' if 0 else 'n' }} [{{ 'y' if 0 }}] {{ 1 if 0 else 2 if 0 else 3 }}", {}),
    ("{{ -2 ** 2 }} {{ (-2) ** 2 }} {{ 2 + 3 * 4 }} {{ (2 + 3) * 4 }} {{ 10 - 2 - 3 }} {{ 2 ** 3 ** 2 }}", {}),
    ("{{ -x|abs }} {{ 'a' ~ 'b'|upper }} {{ l|length - 1 }} {{ not l is defined }}", {"x": 3, "l": [1, 2]}),
    # subscripts and slices
    ("{{ l[0] }} {{ l[-1] }} {{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ l[::2] }} {{ l[5:] }} {{ l[-10:2] }} {{ l[3:0:-1] }}",
     {"l": [1, 2, 3, 4]}),
    ("{{ s[0] }}{{ s[-1] }} {{ s[1:3] }} {{ s[::-1] }} {{ s|length }} [{{ l[10] }}]", {"s": "héllo", "l": [1]}),
    ("{{ d.a }} {{ d['a'] }} {{ d.b.c }} {{ d['b']['c'] }} [{{ d.missing }}] {{ l.0 }} [{{ n.x }}]",
     {"d": {"a": 1, "b": {"c": 2}}, "l": ["z"], "n": None}),
    ("{{ d.items is callable }}|{{ d['items'] }}|{{ d.keys()|list }}|{{ d.values()|list }}|{{ d.get('a') }} {{ d.get('q', 5) }} {{ d.get('q') }}",
     {"d": {"a": 1, "items": 2}}),
    # control flow and loops
    ("{% if 0 %}a{% elif '' %}b{% elif [1] %}c{% else %}d{% endif %}{% if none %}e{% else %}f{% endif %}", {}),
    ("{% for x in l %}{{ loop.index0 }}{{ loop.index }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
     {"l": ["a", "b", "c"]}),
    ("{% for x in l %}[{{ loop.previtem }}|{{ loop.nextitem }}|{{ loop.cycle('o', 'e') }}]{% endfor %}", {"l": [1, 2, 3]}),
    ("{% for x in l if x > 1 %}{{ x }}{{ loop.index }}{{ loop.length }} {% else %}empty{% endfor %}|{% for x in [] %}x{% else %}none{% endfor %}",
     {"l": [1, 2, 3]}),
    ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}{% for a, b in [(1, 2), [3, 4]] %}{{ a + b }}{% endfor %}",
     {"d": {"z": 1, "a": 2}}),
    ("{% for c in 'héy' %}{{ c }}.{% endfor %}{% for x in undefined_thing %}never{% endfor %}", {}),
    ("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("{% for row in [[1, 2], [3]] %}{% for x in row %}{{ loop.index }}/{{ x }} {% endfor %}{{ loop.index }}|{% endfor %}", {}),
    ("{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }}", {}),
    # scoping, set, namespace
    ("{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 10 %}{{ x }} {% endfor %}{{ x }}", {}),
    ("{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}", {}),
    ("{% set ns = namespace(n=0, s='') %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }} {{ ns }}", {}),
    ("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}{% set blk %}in {{ a }} block{% endset %}[{{ blk }}]", {}),
    ("{% with y = 5 %}{{ y }}{% endwith %}[{{ y }}]", {}),
    # macros
    ("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }} [{{ greet() }}]", {}),
    ("{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k=4) }}", {}),
    ("{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}", {}),
    ("{% filter upper %}shout {{ 'this' }}{% endfilter %}", {}),
    # filters
    ("{{ '  x  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'Ab'|upper }}{{ 'Ab'|lower }}|{{ 'hello wORLD-foo(bar'|title }}|{{ 'hELLO'|capitalize }}", {}),
    ("{{ x|default('d') }} {{ none|default('d') }} {{ ''|default('d', true) }} {{ 0|d('z', boolean=true) }} {{ 'v'|default('d') }}", {}),
    ("{{ l|join(', ') }} {{ l|join }} {{ [1, 2]|join('-') }} {{ us|join(',', attribute='n') }}", {"l": ["a", "b"], "us": [{"n": 1}, {"n": 2}]}),
    ("{{ l|first }} {{ l|last }} {{ 'abc'|first }} {{ 'abc'|last }} {{ l|length }} {{ d|length }} {{ 'héé'|length }} {{ d|count }}",
     {"l": [1, 2, 3], "d": {"a": 1}}),
    ("{{ 'abc'|list }} {{ d|list }} {{ d|items|list }} {{ l|reverse|list }} {{ 'abc'|reverse }}", {"d": {"b": 1, "a": 2}, "l": [1, 2]}),
    ("{{ 'a-b-a'|replace('a', 'x') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 1|string ~ 'x' }} {{ [1]|string }} {{ none|string }}", {}),
    ("{{ '42'|int + 1 }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ true|int }} {{ '0x1A'|int(0, 16) }} {{ ' 12 '|int }}", {}),
    ("{{ '1.5'|float }} {{ 2|float }} {{ 'x'|float }} {{ '1e3'|float }} {{ -2.5|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 2.1|round(0, 'ceil') }}", {}),
    ("{{ us|map(attribute='n')|list }} {{ ['a', 'b']|map('upper')|list }} {{ us|map(attribute='q', default='z')|list }} {{ [1, 2]|map('string')|join }}",
     {"us": [{"n": 1}, {"n": 2}]}),
    ("{{ us|selectattr('role', 'equalto', 'user')|map(attribute='c')|list }} {{ us|rejectattr('role', '==', 'user')|list|length }} {{ us|selectattr('c')|list|length }}",
     {"us": [{"role": "user", "c": "a"}, {"role": "bot", "c": ""}, {"role": "user", "c": "b"}]}),
    ("{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('even')|list }} {{ [0, 1, '', 'a']|select|list }} {{ [3, 6, 7]|select('divisibleby', 3)|list }}", {}),
    ("{{ [3, 1, 2]|sort }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A']|sort(case_sensitive=true) }} {{ [1, 3, 2]|sort(reverse=true) }} {{ us|sort(attribute='n')|map(attribute='n')|list }}",
     {"us": [{"n": 2}, {"n": 1}]}),
    ("{{ [1, 2, 1, 3]|unique|list }} {{ ['a', 'A']|unique|list }} {{ [1, 5, 3]|max }} {{ [1, 5, 3]|min }} {{ [1, 2, 3]|sum }} {{ us|sum(attribute='n') }}",
     {"us": [{"n": 2}, {"n": 1}]}),
    ("{{ {'b': 1, 'a': 2}|dictsort }} {{ {'b': 1, 'a': 2}|dictsort(by='value', reverse=true) }} {{ [1, 2, 3, 4, 5]|batch(2)|list }}", {}),
    ("{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, first=true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ '<a href=\"x\">&\\''|escape }}|{{ 'x'|safe }}", {}),
    ("{{ 'x'|center(6) }}|{{ 'xy'|center(7) }}|{{ 'one two  three'|wordcount }}|{{ d|attr('items') is callable }}", {"d": {}}),
    ("{{ v|tojson }}", {"v": {"s": "é\"\\\n\t\u0001/<>&'", "n": None, "b": [True, False], "f": 1.0, "i": -3, "e": [], "o": {}, "big": 1e100}}),
    ("{{ v|tojson(indent=2) }}|{{ v|tojson(indent=0) }}|{{ [1, [2]]|tojson(indent=1) }}|{{ v|tojson(sort_keys=true) }}|{{ v|tojson(separators=(',', ':')) }}|{{ 'é'|tojson(ensure_ascii=true) }}",
     {"v": {"z": [1, {"y": None}], "a": "x"}}),
    ("{{ (1, 'a')|tojson }} {{ 'x'|tojson }} {{ 3.14|tojson }} {{ 1e-7|tojson }}", {}),
    # tests
    ("{{ x is defined }}{{ x is undefined }}{{ none is none }}{{ 1 is none }}{{ 'a' is string }}{{ 1 is string }}{{ {} is mapping }}{{ [] is mapping }}", {}),
    ("{{ [] is iterable }}{{ 'a' is iterable }}{{ 1 is iterable }}{{ x is iterable }}{{ [] is sequence }}{{ {} is sequence }}{{ 1 is sequence }}", {}),
    ("{{ 1 is number }}{{ 1.5 is number }}{{ true is number }}{{ 'a' is number }}{{ 1 is integer }}{{ true is integer }}{{ 1.0 is float }}{{ true is boolean }}{{ 1 is boolean }}", {}),
    ("{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 0 is false }}{{ 3 is odd }}{{ 3 is even }}{{ 9 is divisibleby 3 }}{{ 2 is divisibleby(3) }}", {}),
    ("{{ 1 is eq 1 }}{{ 1 is ne 1 }}{{ 1 is lt 2 }}{{ 2 is ge 2 }}{{ 'a' is in 'abc' }}{{ 'ab' is lower }}{{ 'AB' is upper }}{{ x is not defined }}{{ none is not none }}", {}),
    # string methods
    ("{{ s.startswith('he') }}{{ s.endswith('lo') }}{{ s.startswith(('x', 'h')) }}{{ s.upper() }}{{ s.lower() }}{{ s.title() }}{{ 'ab cD'.capitalize() }}", {"s": "hello"}),
    ("{{ 'a,b,,c'.split(',') }} {{ '  a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ ' a b c '.rsplit(None, 1) }} {{ 'abc'.split('x') }}", {}),
    ("[{{ '  x \\n'.strip() }}][{{ '\\nx\\n'.lstrip('\\n') }}][{{ 'xxyxx'.rstrip('x') }}][{{ 'aXbXc'.replace('X', '-') }}][{{ 'aaa'.replace('a', 'b', 1) }}]", {}),
    ("{{ '{} and {}'.format(1, 'b') }} {{ '{1}{0}'.format('a', 'b') }} {{ '{x}!'.format(x=3) }} {{ '{{}}'.format() }} {{ 'héllo'.find('l') }} {{ 'abab'.count('ab') }} {{ ', '.join(['a', 'b']) }}", {}),
    ("{{ m.content.split('</think>')[-1].lstrip('\\n') }}|{{ m.content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}",
     {"m": {"content": "<think>\nreason\n</think>\n\nanswer"}}),
    # globals
    ("{{ dict(a=1, b=2) }} {{ dict({'x': 1}, y=2) }} {{ namespace(a=1).a }} {{ namespace({'k': 2}).k }}", {}),
    ("{{ raise_exception('Roles must alternate!') }}", {}),
    ("before{% if true %}{{ raise_exception('Bad role: ' ~ role) }}{% endif %}", {"role": "x"}),
    # errors that Jinja raises too
    ("{{ x.y }}", {}),
    ("{{ x + 1 }}", {}),
    ("{{ x() }}", {}),
    ("{{ d.b.c }}", {"d": {}}),
    ("{{ l.append(1) }}", {"l": []}),
    ("{{ 1 / 0 }}", {}),
    ("{{ 'a' < 1 }}", {}),
    ("{{ 'a' + 1 }}", {}),
    ("{{ x|tojson }}", {}),
    ("{{ x|int }}", {}),
    ("{% for x in 1 %}{% endfor %}", {}),
    ("{% set a, b = [1] %}", {}),
    ("{% set d = {} %}{% set d.x = 1 %}", {}),
]

# ---- whole conversations through transformers ------------------------------
SMOLLM2 = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
           "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
           "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
           "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

# A Llama-3.1-style template with macros, strftime-free date and tool calls.
TOOLS_MACRO = """{%- macro render_tool(tool) -%}
{{ tool.function.name }}({{ tool.function.parameters.properties | list | join(', ') }})
{%- endmacro -%}
{{- bos_token }}
{%- if tools is not none %}
    {{- '<|tools|>' }}
    {%- for t in tools %}{{ render_tool(t) }}{% if not loop.last %}; {% endif %}{% endfor %}
    {{- '\n' }}
{%- endif %}
{%- for m in messages %}
    {%- if m.role not in ['user', 'assistant', 'system', 'tool'] %}
        {{- raise_exception('Unknown role: ' ~ m.role) }}
    {%- endif %}
    {{- '<|' ~ m.role ~ '|>' }}
    {%- if m.tool_calls is defined %}
        {%- for call in m.tool_calls %}{{ call.function | tojson }}{% endfor %}
    {%- else %}
        {{- m.content | trim }}
    {%- endif %}
    {{- '\n' }}
{%- endfor %}
{%- if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"""

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
                   "required": ["city"]}}}

QWEN_TOOL_CHAT = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "reasoning_content": "Need the tool.",
     "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}]},
    {"role": "tool", "content": "{\"temp\": 21}"},
    {"role": "tool", "content": "second result"},
    {"role": "assistant", "content": "<think>\nIt is mild.\n</think>\n\nIt is 21°C in Paris."},
    {"role": "user", "content": "Thanks!"},
]

CONVERSATIONS = [
    # (template name or inline template, messages, add_generation_prompt, extra, special_tokens)
    ("qwen3", QWEN_TOOL_CHAT, True, {"tools": [WEATHER_TOOL]}, {"eos_token": "<|im_end|>"}),
    ("qwen3", QWEN_TOOL_CHAT[:4], False, {}, {"eos_token": "<|im_end|>"}),
    ("qwen3", [{"role": "user", "content": "Hi"},
               {"role": "assistant", "content": "Hello", "reasoning_content": "greet back"}], False,
     {"enable_thinking": True}, {}),
    ("qwen3", [{"role": "user", "content": "Hi"},
               {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": "{\"a\": 1}"}}]}],
     True, {"enable_thinking": False}, {}),
    ("gemma3", [{"role": "system", "content": [{"type": "text", "text": "Sys."}]},
                {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": " Describe. "}]}],
     True, {}, {"bos_token": "<bos>"}),
    ("gemma3", [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], True, {}, {"bos_token": "<bos>"}),
    ("llama3", [{"role": "user", "content": "Ünïcödé ✓ 🎉"}], True, {}, {"bos_token": "<|begin_of_text|>"}),
    ("inline:smollm2", [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}], True, {}, {}),
    ("inline:smollm2", [{"role": "system", "content": "Custom."}, {"role": "user", "content": "Q"}], False, {}, {}),
    ("inline:tools_macro", [{"role": "user", "content": " weather? "},
                            {"role": "assistant", "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
                            {"role": "tool", "content": "cold"}],
     True, {"tools": [WEATHER_TOOL]}, {"bos_token": "<s>"}),
    ("inline:tools_macro", [{"role": "narrator", "content": "x"}], False, {}, {"bos_token": "<s>"}),
    # how transformers hands messages over: null keys dropped, reasoning aliased
    ("inline:dump", [{"role": "assistant", "content": "a", "tool_calls": None, "reasoning": "r"},
                     {"role": "assistant", "thinking": "t", "content": "b", "reasoning_content": "rc"},
                     {"role": "user", "content": None}],
     True, {"custom": [1, {"x": None}], "eos_token": "<override>"}, {"eos_token": "</s>", "pad_token": "<pad>"}),
]

DUMP = ("{% for m in messages %}{{ m|tojson }}\n{% endfor %}{{ tools is none }} {{ documents is none }} "
        "{{ add_generation_prompt }} {{ custom|tojson }} {{ eos_token }} {{ pad_token }} {{ bos_token is defined }}")

INLINE = {"smollm2": SMOLLM2, "tools_macro": TOOLS_MACRO, "dump": DUMP}


def jinja_env():
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def render_case(env, template, context):
    try:
        return {"out": env.from_string(template).render(**context)}
    except Exception as e:  # noqa: BLE001 - every failure is an expected outcome here
        return {"error_type": type(e).__name__, "error": str(e)}


def render_conversation(template, messages, add_generation_prompt, extra, special_tokens):
    from transformers.utils.chat_template_utils import _normalize_chat_messages, render_jinja_template
    extra = dict(extra)
    tools = extra.pop("tools", None)
    try:
        rendered, _ = render_jinja_template(
            conversations=[_normalize_chat_messages(messages)], tools=tools, chat_template=template,
            add_generation_prompt=add_generation_prompt, **{**special_tokens, **extra})
        return rendered[0]
    except Exception as e:  # noqa: BLE001
        return {"error": str(e)}


def main():
    env = jinja_env()
    with open(os.path.join(HERE, "conformance.jsonl"), "w", encoding="utf-8") as f:
        for template, context in CASES:
            row = {"template": template, "context": context, **render_case(env, template, context)}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    with open(os.path.join(HERE, "conversations.jsonl"), "w", encoding="utf-8") as f:
        for name, messages, agp, extra, special in CONVERSATIONS:
            if name.startswith("inline:"):
                template = INLINE[name[len("inline:"):]]
                row = {"template": template}
            else:
                with open(os.path.join(TESTDATA, "tokenizers", name, "tokenizer_config.json"), encoding="utf-8") as cf:
                    template = json.load(cf)["chat_template"]
                row = {"template_name": name}
            row.update({"messages": messages, "add_generation_prompt": agp, "extra": extra,
                        "special_tokens": special,
                        "rendered": render_conversation(template, messages, agp, extra, special)})
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
