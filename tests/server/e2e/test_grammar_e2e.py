#!/usr/bin/env python3
"""End-to-end tests of the grammar extension through `cellm serve` (SmolLM2-135M,
CPU backend) with the official openai client (the extension fields go in
extra_body).

Group `grammar` (one ctest, server_e2e_grammar):
  - regex (guided_regex and {"grammar": {"type": "regex"}}) on chat and
    completions, greedy and sampled, streamed and not: each reply matches the
    regex by Python's re.fullmatch and ends with finish_reason "stop"
  - EBNF ({"grammar": {"type": "ebnf"}}, the llama-server string form and
    guided_grammar): a small arithmetic grammar with nested parentheses; each
    reply is checked by a recursive-descent recognizer written here from the
    grammar, streamed and not
  - refusals: a regex and a grammar that do not compile are 400s naming the
    field, the line and column and what was wrong (a left-recursive rule
    named); two grammar fields, a grammar beside a JSON response_format or a
    forced tool_choice are 400s naming the fields; the server stays healthy
    and serves the fixed request

A missing virtual environment, package or model is a failure that says what
to run, never a skip.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server_e2e import MODEL_NAME, Server, check, e2e_main, run_test  # noqa: E402

try:
    import openai  # noqa: F401  (Server.client needs it)
    import requests
except ImportError as e:  # pragma: no cover - environment problem
    print(f"FAIL: {e}: run scripts/setup (installs scripts/requirements-test.txt into .venv)")
    sys.exit(1)

# Bounded patterns keep the replies short on the CPU.
REGEXES = [
    r"(yes|no), [0-9]{1,3} (apples|pears)",
    r"\d{3}-\d{4}",
    r"[A-Z][a-z]{1,8}( [a-z]{1,8}){0,3}\.",
    r"\[(\"[a-z]{1,6}\"(, )?){1,3}\]",
]

# Sums and products of one- or two-digit numbers, parenthesised at most two
# levels deep (so every reply ends well within max_tokens).
ARITHMETIC = r"""
# An expression in parentheses.
root  ::= "(" expr ")"
expr  ::= term (op term){0,2}
op    ::= " + " | " * "
term  ::= num | "(" inner ")"
inner ::= num (op num){0,2}
num   ::= [1-9] [0-9]?
"""


def arithmetic_ok(text):
    """A recognizer of ARITHMETIC's language, written from the grammar."""
    pos = 0

    def lit(s):
        nonlocal pos
        if text.startswith(s, pos):
            pos += len(s)
            return True
        return False

    def num():
        nonlocal pos
        m = re.compile(r"[1-9][0-9]?").match(text, pos)
        if not m:
            return False
        pos = m.end()
        return True

    def op():
        return lit(" + ") or lit(" * ")

    def seq(item):
        if not item():
            return False
        for _ in range(2):
            save = pos
            if not (op() and item()):
                restore(save)
                break
        return True

    def restore(p):
        nonlocal pos
        pos = p

    def term():
        if num():
            return True
        return lit("(") and seq(num) and lit(")")

    return lit("(") and seq(term) and lit(")") and pos == len(text)


def chat(srv, extra, content, **kw):
    args = dict(model=MODEL_NAME, max_tokens=48, temperature=0)
    args.update(kw)
    return srv.client().chat.completions.create(
        messages=[{"role": "user", "content": content}], extra_body=extra, **args)


def streamed_chat(srv, extra, content, **kw):
    stream = chat(srv, extra, content, stream=True, **kw)
    text, finish, chunks = "", None, 0
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
            chunks += 1
    return text, finish, chunks


def t_regex(srv):
    prompts = ["Do you like fruit? Answer like: yes, 3 apples", "Give a phone number.",
               "Describe the sky in a short sentence.", "List some colors as a JSON array."]
    for i, (pattern, prompt) in enumerate(zip(REGEXES, prompts)):
        sampled = i % 2 == 1
        extra = {"guided_regex": pattern} if i % 2 == 0 else {
            "grammar": {"type": "regex", "value": pattern}}
        r = chat(srv, extra, prompt, temperature=0.8 if sampled else 0, seed=11 + i)
        text = r.choices[0].message.content
        print(f"    regex {pattern!r}{' (sampled)' if sampled else ''}: {text!r} "
              f"({r.choices[0].finish_reason})")
        check(re.fullmatch(pattern, text or "", re.ASCII) is not None,
              f"regex {i}: the reply matches the regex")
        check(r.choices[0].finish_reason == "stop", f"regex {i}: finish_reason stop")
    # Streamed chat: the deltas together match.
    pattern = REGEXES[0]
    text, finish, chunks = streamed_chat(srv, {"guided_regex": pattern}, prompts[0])
    print(f"    streamed regex: {text!r} ({finish}, {chunks} chunks)")
    check(re.fullmatch(pattern, text, re.ASCII) is not None, "streamed regex: the reply matches")
    check(finish == "stop", "streamed regex: finish_reason stop")
    check(chunks > 2, "streamed regex: the reply came in several chunks")
    # Completions, not streamed and streamed.
    pattern = REGEXES[1]
    c = srv.client()
    r = c.completions.create(model=MODEL_NAME, prompt="Call me at", max_tokens=24, temperature=0,
                             extra_body={"grammar": {"type": "regex", "value": pattern}})
    print(f"    completions regex: {r.choices[0].text!r}")
    check(re.fullmatch(pattern, r.choices[0].text, re.ASCII) is not None,
          "completions regex: the text matches")
    check(r.choices[0].finish_reason == "stop", "completions regex: finish_reason stop")
    stream = c.completions.create(model=MODEL_NAME, prompt="My number is", max_tokens=24,
                                  temperature=0.7, seed=3, stream=True,
                                  extra_body={"guided_regex": pattern})
    text, finish = "", None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].text or ""
            finish = chunk.choices[0].finish_reason or finish
    print(f"    streamed completions regex: {text!r} ({finish})")
    check(re.fullmatch(pattern, text, re.ASCII) is not None,
          "streamed completions regex: the text matches")
    check(finish == "stop", "streamed completions regex: finish_reason stop")


def t_ebnf(srv):
    # The recognizer itself tells the language apart (so a pass means something).
    for good in ["(1)", "(12 + 3)", "((1 * 2) + 40 * (7))"]:
        check(arithmetic_ok(good), f"recognizer accepts {good!r}")
    for bad in ["1", "(1 +)", "(01)", "(((1)))", "(1 + 2 + 3 + 4)", "(1) "]:
        check(not arithmetic_ok(bad), f"recognizer refuses {bad!r}")
    prompt = "Write an arithmetic expression."
    shapes = [
        ("grammar object", {"grammar": {"type": "ebnf", "value": ARITHMETIC}}, 0),
        ("grammar string", {"grammar": ARITHMETIC}, 0.9),
        ("guided_grammar", {"guided_grammar": ARITHMETIC}, 0.9),
    ]
    for i, (what, extra, temperature) in enumerate(shapes):
        r = chat(srv, extra, prompt, max_tokens=64, temperature=temperature, seed=5 + i)
        text = r.choices[0].message.content
        print(f"    ebnf {what}: {text!r} ({r.choices[0].finish_reason})")
        check(arithmetic_ok(text or ""), f"ebnf {what}: the reply is in the grammar's language")
        check(r.choices[0].finish_reason == "stop", f"ebnf {what}: finish_reason stop")
    text, finish, _ = streamed_chat(srv, {"grammar": {"type": "ebnf", "value": ARITHMETIC}},
                                    prompt, max_tokens=64, temperature=0.9, seed=21)
    print(f"    streamed ebnf: {text!r} ({finish})")
    check(arithmetic_ok(text), "streamed ebnf: the reply is in the grammar's language")
    check(finish == "stop", "streamed ebnf: finish_reason stop")
    r = srv.client().completions.create(
        model=MODEL_NAME, prompt="2 + 2 =", max_tokens=64, temperature=0,
        extra_body={"guided_grammar": ARITHMETIC})
    print(f"    completions ebnf: {r.choices[0].text!r}")
    check(arithmetic_ok(r.choices[0].text), "completions ebnf: the text is in the language")


def t_refusals(srv):
    def expect(what, body, param, words, path="/v1/chat/completions"):
        base = {"model": MODEL_NAME, "max_tokens": 8}
        if path.endswith("chat/completions"):
            base["messages"] = [{"role": "user", "content": "hi"}]
        else:
            base["prompt"] = "hi"
        r = requests.post(srv.url + path, timeout=120, json={**base, **body})
        err = r.json().get("error", {}) if r.headers.get("content-type", "").startswith(
            "application/json") else {}
        print(f"    {what}: {r.status_code} {err.get('param')}: {err.get('message')}")
        check(r.status_code == 400 and err.get("param") == param, f"{what}: 400 naming {param}")
        for w in words:
            check(w in (err.get("message") or ""), f"{what}: the message names {w}")

    expect("bad regex", {"guided_regex": "(yes|no"}, "guided_regex",
           ["line 1, column 1", "never closed"])
    expect("bad regex object", {"grammar": {"type": "regex", "value": "a{3,1}"}}, "grammar.value",
           ["line 1, column 2", "maximum below its minimum"], path="/v1/completions")
    expect("left recursion", {"grammar": {"type": "ebnf", "value":
                                          'root ::= list\nlist ::= list "," "x" | "x"'}},
           "grammar.value", ["line 2, column 1", "'list' is left-recursive"])
    expect("undefined rule", {"guided_grammar": 'root ::= "a" b'}, "guided_grammar",
           ["line 1, column 14", "'b'"], path="/v1/completions")
    expect("bad type", {"grammar": {"type": "lark", "value": "x"}}, "grammar.type", ["ebnf"])
    expect("two grammars", {"guided_regex": "a", "grammar": 'root ::= "a"'}, "guided_regex",
           ["'grammar'", "'guided_regex'"])
    expect("grammar and json", {"guided_regex": "a", "response_format": {"type": "json_object"}},
           "guided_regex", ["'response_format'"])
    expect("grammar and forced tool", {
        "grammar": 'root ::= "a"', "tool_choice": "required", "tools": [{
            "type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]},
        "grammar", ["'tool_choice'"])
    check(requests.get(srv.url + "/health", timeout=30).status_code == 200,
          "the server is healthy after the refusals")
    # The refused regex, fixed, is served.
    r = chat(srv, {"guided_regex": "(yes|no)"}, "Is the sky blue?", max_tokens=8)
    text = r.choices[0].message.content
    print(f"    fixed regex: {text!r}")
    check(text in ("yes", "no"), "the fixed regex is served")


def group_grammar(binary, model):
    srv = Server(binary, model, "--max-sessions", "4", "--max-session-tokens", "1024")
    try:
        srv.wait_ready()
        for t in (t_regex, t_ebnf, t_refusals):
            run_test(t, srv)
    finally:
        srv.kill()


def main():
    e2e_main({"grammar": group_grammar})


if __name__ == "__main__":
    main()
