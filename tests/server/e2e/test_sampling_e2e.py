#!/usr/bin/env python3
"""End-to-end tests of the sampling set through `cellm serve` (SmolLM2-135M,
CPU backend) with the official openai client.

Groups (one ctest each):
  sampling  repetition_penalty changes a greedy continuation and leaves
            fewer repeated tokens; logit_bias -100 removes the greedy token
            and +100 forces one; stop_token_ids ends a choice with
            finish_reason "stop" (also with ignore_eos) on both endpoints;
            seeded draws with penalties and min_p are reproducible; bad
            values are 400s naming their field.

A missing virtual environment, package or model is a failure that says what
to run, never a skip.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server_e2e import (MODEL_NAME, Server, check,  # noqa: E402
                             e2e_main, run_test)

try:
    import openai
    import requests
except ImportError as e:  # pragma: no cover - environment problem
    print(f"FAIL: {e}: run scripts/setup (installs scripts/requirements-test.txt into .venv)")
    sys.exit(1)

# A prompt the 135M model continues with many repeats when greedy.
REPEATING = "The list of colors: red, blue, green, red, blue, green, red, blue,"


def token_ids(srv, text):
    return requests.post(srv.url + "/tokenize", json={"prompt": text}, timeout=60).json()["tokens"]


def repeats(ids):
    """Tokens that occurred earlier in the same list."""
    return len(ids) - len(set(ids))


def t_repetition_penalty(srv):
    c = srv.client()

    def greedy(**extra):
        r = c.completions.create(model=MODEL_NAME, prompt=REPEATING, max_tokens=24, temperature=0,
                                 extra_body=extra)
        return r.choices[0].text

    plain = greedy()
    penalised = greedy(repetition_penalty=1.3)
    print(f"    plain:     {plain!r}\n    penalised: {penalised!r}")
    check(plain != penalised, "repetition_penalty 1.3 changes the greedy continuation")
    check(repeats(token_ids(srv, penalised)) < repeats(token_ids(srv, plain)),
          "the penalised continuation repeats fewer tokens")
    check(greedy(repetition_penalty=1.0) == plain, "repetition_penalty 1 is neutral")


def t_logit_bias(srv):
    c = srv.client()
    prompt = "The capital of France is"
    first = c.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=1, temperature=0)
    greedy_ids = token_ids(srv, prompt + first.choices[0].text)[len(token_ids(srv, prompt)):]
    check(len(greedy_ids) == 1, f"the greedy token re-tokenizes to one id ({greedy_ids})")
    banned = greedy_ids[-1]
    second = c.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=1, temperature=0,
                                  logit_bias={str(banned): -100})
    check(second.choices[0].text != first.choices[0].text,
          f"logit_bias -100 removes the greedy token ({first.choices[0].text!r} -> "
          f"{second.choices[0].text!r})")


def t_stop_token_ids(srv):
    c = srv.client()
    forced = token_ids(srv, " banana")[-1]
    for ignore_eos in (False, True):
        r = c.completions.create(model=MODEL_NAME, prompt="Fruit:", max_tokens=8, temperature=0,
                                 logit_bias={str(forced): 100},
                                 extra_body={"stop_token_ids": [forced], "ignore_eos": ignore_eos})
        ch = r.choices[0]
        check(ch.finish_reason == "stop" and r.usage.completion_tokens == 1,
              f"a stop token id forced by logit_bias ends the completion at once "
              f"(ignore_eos {ignore_eos}; {ch.finish_reason}, {r.usage.completion_tokens} tokens)")
    chat = c.chat.completions.create(model=MODEL_NAME, max_tokens=8, temperature=0,
                                     messages=[{"role": "user", "content": "Name a fruit."}],
                                     logit_bias={str(forced): 100},
                                     extra_body={"stop_token_ids": [forced]})
    check(chat.choices[0].finish_reason == "stop" and chat.usage.completion_tokens == 1,
          f"chat: a stop token id ends the choice ({chat.choices[0].finish_reason}, "
          f"{chat.usage.completion_tokens} tokens)")
    # Without the stop id the forced token repeats until the length limit.
    r = c.completions.create(model=MODEL_NAME, prompt="Fruit:", max_tokens=4, temperature=0,
                             logit_bias={str(forced): 100}, extra_body={"ignore_eos": True})
    check(r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 4,
          "without stop_token_ids the same request runs to max_tokens")


def t_seeded_penalties(srv):
    c = srv.client()

    def sampled():
        r = c.chat.completions.create(model=MODEL_NAME, max_tokens=12, temperature=1.0, seed=7,
                                      presence_penalty=0.5, frequency_penalty=0.8,
                                      messages=[{"role": "user", "content": "Say something."}],
                                      extra_body={"min_p": 0.05, "repetition_penalty": 1.1})
        return r.choices[0].message.content, r.choices[0].finish_reason

    a = sampled()
    b = sampled()
    check(a == b and a[1] in ("stop", "length"),
          f"a seeded draw with every penalty and min_p is reproducible ({a[1]})")


def t_errors(srv):
    c = srv.client()

    def expect(param, what, **kw):
        try:
            c.completions.create(model=MODEL_NAME, prompt="hi", max_tokens=2, **kw)
            check(False, f"{what}: expected HTTP 400")
        except openai.BadRequestError as e:
            body = e.body if isinstance(e.body, dict) else {}
            err = body.get("error", body)
            check(e.status_code == 400 and err.get("param") == param and bool(err.get("message")),
                  f"{what}: HTTP {e.status_code}, param {err.get('param')!r}: {err.get('message')}")

    expect("presence_penalty", "presence_penalty 3", presence_penalty=3)
    expect("frequency_penalty", "frequency_penalty -2.5", frequency_penalty=-2.5)
    expect("repetition_penalty", "repetition_penalty 0", extra_body={"repetition_penalty": 0})
    expect("min_p", "min_p 2", extra_body={"min_p": 2})
    expect("logit_bias", "a logit_bias above 100", logit_bias={"5": 150})
    expect("logit_bias", "a logit_bias id outside the vocabulary", logit_bias={"10000000": 1})
    expect("stop_token_ids", "a stop token id outside the vocabulary",
           extra_body={"stop_token_ids": [10000000]})
    check(requests.get(srv.url + "/health", timeout=30).status_code == 200,
          "the server is healthy after the refusals")


def group_sampling(binary, model):
    srv = Server(binary, model, "--max-sessions", "8", "--max-session-tokens", "512",
                 "--prefix-cache", "4")
    try:
        srv.wait_ready()
        for t in (t_repetition_penalty, t_logit_bias, t_stop_token_ids, t_seeded_penalties,
                  t_errors):
            run_test(t, srv)
    finally:
        srv.kill()


def main():
    e2e_main({"sampling": group_sampling})


if __name__ == "__main__":
    main()
