#!/usr/bin/env python3
"""End-to-end tests of logprobs through `cellm serve` (SmolLM2-135M, CPU
backend) with the official openai client.

Groups (one ctest each):
  logprobs  /v1/completions `logprobs: k` and /v1/chat/completions
            `logprobs: true` + `top_logprobs: k`, streamed and not: one entry
            per generated token, every value <= 0, the top lists sorted with
            k entries whose probabilities sum to at most 1, a greedy token
            equal to the first of its top list, streamed values equal to the
            non-streamed ones, chat `bytes` what the token's text shows, no logprobs
            unless asked; bad counts are 400s naming the field.
            `echo: true`: the prompt starts the choice text, streamed and not;
            with logprobs the prompt's tokens lead the entries (the first
            null), each prompt entry equal to the generated-token logprobs of
            a greedy request whose prompt is the tokens before it (computed
            independently, by another forward); a prompt the prefix cache
            holds is still scored in full; `max_tokens: 0` is the prompt alone.

A missing virtual environment, package or model is a failure that says what
to run, never a skip.
"""
import math
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

PROMPT = "The three primary colors are"
MESSAGES = [{"role": "user", "content": "Name three colors."}]
EPS = 1e-4


def mass(values):
    return sum(math.exp(v) for v in values)


def check_sorted(values, what):
    check(all(a >= b for a, b in zip(values, values[1:])), f"{what}: top logprobs are sorted")


def completion_logprobs(c, k, stream, **kw):
    """(text, logprobs dict, completion tokens) of one completion, streamed or not."""
    args = dict(model=MODEL_NAME, prompt=PROMPT, max_tokens=6, temperature=0, logprobs=k)
    args.update(kw)
    if not stream:
        r = c.completions.create(**args)
        lp = r.choices[0].logprobs
        return r.choices[0].text, {
            "tokens": lp.tokens, "token_logprobs": lp.token_logprobs,
            "top_logprobs": lp.top_logprobs, "text_offset": lp.text_offset,
        }, r.usage.completion_tokens
    text = ""
    got = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    usage = None
    for chunk in c.completions.create(stream=True, stream_options={"include_usage": True},
                                      **args):
        if chunk.usage is not None:
            usage = chunk.usage.completion_tokens
        for ch in chunk.choices:
            text += ch.text
            if ch.logprobs is not None:
                for key in got:
                    got[key] += getattr(ch.logprobs, key)
    return text, got, usage


def same_prompt_tolerance(srv):
    """How far two requests of the same prompt may differ in logprob.

    On the CPU the forward is float32 and a repeat differs only in the last
    bits. On CUDA the forward is bf16 and a repeat that hits the prefix cache
    runs the last prompt token through the decode kernels instead of the
    prefill GEMM: logits near 20 have a bf16 step of 0.125, so log-softmax
    values move by a few hundredths (the parity group bounds CUDA against the
    CPU program)."""
    return 0.15 if srv.on_cuda() else 1e-5


def same_tops(best, mine_best, top, tol):
    """Two top-k lists of one position agree: exactly (ids in order, values
    within tol) on the CPU; on CUDA, where bf16 rounding can swap near-equal
    entries, every entry of ours is the other's within tol, or below its
    least entry (it fell out of the other's list)."""
    if tol < 1e-3:
        return [t for t, _ in best] == [t for t, _ in mine_best] and all(
            abs(a[1] - b[1]) < tol for a, b in zip(best, mine_best))
    return all(abs(top[t] - v) < tol if t in top else v <= min(top.values()) + tol
               for t, v in mine_best)


def t_completions(srv):
    c = srv.client()
    k = 5
    text, lp, n = completion_logprobs(c, k, stream=False)
    print(f"    text {text!r}, tokens {lp['tokens']}")
    check(n >= 1 and len(lp["tokens"]) == n and len(lp["token_logprobs"]) == n and
          len(lp["top_logprobs"]) == n and len(lp["text_offset"]) == n,
          f"completions: one entry per generated token ({n} tokens)")
    check("".join(lp["tokens"]) == text, "completions: the tokens spell the text")
    check(lp["text_offset"][0] == 0 and all(
        lp["text_offset"][i + 1] == lp["text_offset"][i] + len(lp["tokens"][i])
        for i in range(n - 1)), "completions: text_offset is where each token starts")
    for i, (tok, value, top) in enumerate(zip(lp["tokens"], lp["token_logprobs"],
                                              lp["top_logprobs"])):
        check(value <= 0.0, f"token {i}: logprob {value} <= 0")
        check(k <= len(top) <= k + 1, f"token {i}: {len(top)} top entries for logprobs={k}")
        check(all(v <= 0.0 for v in top.values()), f"token {i}: top logprobs <= 0")
        check(mass(top.values()) <= 1.0 + EPS, f"token {i}: top probabilities sum to <= 1")
        best = max(top, key=top.get)
        check(best == tok and abs(top[best] - value) < 1e-6,
              f"token {i}: the greedy token {tok!r} is the argmax of its top list ({best!r})")

    # Streamed: the same tokens and values, chunk by chunk.
    s_text, s_lp, s_n = completion_logprobs(c, k, stream=True)
    check(s_text == text and s_lp["tokens"] == lp["tokens"] and s_n == n,
          "completions stream: the same tokens as without streaming")
    tol = same_prompt_tolerance(srv)
    check(all(abs(a - b) < tol for a, b in zip(s_lp["token_logprobs"], lp["token_logprobs"])) and
          s_lp["text_offset"] == lp["text_offset"],
          "completions stream: the same logprobs and offsets")

    # logprobs 0: only the chosen token's entry; none unless asked.
    _, zero, _ = completion_logprobs(c, 0, stream=False)
    # (A prefix-cache hit may reorder the forward's float sums.)
    check(zero["tokens"] == lp["tokens"] and
          all(len(top) == 1 and list(top) == [tok]
              for top, tok in zip(zero["top_logprobs"], zero["tokens"])) and
          all(abs(a - b) < max(tol, 1e-4)
              for a, b in zip(zero["token_logprobs"], lp["token_logprobs"])),
          f"completions logprobs=0: just the chosen token, same values "
          f"({zero['token_logprobs']} vs {lp['token_logprobs']})")
    plain = c.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=3, temperature=0)
    check(plain.choices[0].logprobs is None, "completions without logprobs: logprobs is null")


def chat_logprobs(c, stream, **kw):
    args = dict(model=MODEL_NAME, messages=MESSAGES, max_tokens=6, temperature=0, logprobs=True)
    args.update(kw)
    if not stream:
        r = c.chat.completions.create(**args)
        return r.choices[0].message.content or "", r.choices[0].logprobs.content, \
            r.usage.completion_tokens
    text, content, usage = "", [], None
    for chunk in c.chat.completions.create(stream=True, stream_options={"include_usage": True},
                                           **args):
        if chunk.usage is not None:
            usage = chunk.usage.completion_tokens
        for ch in chunk.choices:
            text += ch.delta.content or ""
            if ch.logprobs is not None and ch.logprobs.content:
                content += ch.logprobs.content
    return text, content, usage


def t_chat(srv):
    c = srv.client()
    k = 3
    text, content, n = chat_logprobs(c, False, top_logprobs=k)
    print(f"    text {text!r}, tokens {[e.token for e in content]}")
    check(n >= 1 and len(content) == n, f"chat: one entry per generated token ({n} tokens)")
    for i, e in enumerate(content):
        check(e.logprob <= 0.0, f"token {i}: logprob {e.logprob} <= 0")
        check(bytes(e.bytes).decode("utf-8", "replace") == e.token,
              f"token {i}: bytes are what its text shows")
        check(len(e.top_logprobs) == k, f"token {i}: {len(e.top_logprobs)} top entries, {k} asked")
        values = [t.logprob for t in e.top_logprobs]
        check_sorted(values, f"token {i}")
        check(all(v <= 0.0 for v in values) and mass(values) <= 1.0 + EPS,
              f"token {i}: top logprobs <= 0 summing to <= 1")
        check(all(bytes(t.bytes).decode("utf-8", "replace") == t.token for t in e.top_logprobs),
              f"token {i}: top entries' bytes are what their text shows")
        check(e.top_logprobs[0].token == e.token and abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6,
              f"token {i}: the greedy token {e.token!r} heads its top list")

    s_text, s_content, s_n = chat_logprobs(c, True, top_logprobs=k)
    check(s_text == text and s_n == n and [e.token for e in s_content] == [e.token for e in content],
          "chat stream: the same tokens as without streaming")
    tol = same_prompt_tolerance(srv)
    check(all(abs(a.logprob - b.logprob) < tol and len(a.top_logprobs) == k
              for a, b in zip(s_content, content)),
          "chat stream: the same logprobs, each with its top list")

    _, bare, _ = chat_logprobs(c, False)
    check(len(bare) == n and all(e.top_logprobs == [] for e in bare),
          "chat logprobs without top_logprobs: entries with empty top lists")
    _, wide, _ = chat_logprobs(c, False, top_logprobs=20)
    check(all(len(e.top_logprobs) == 20 and mass(t.logprob for t in e.top_logprobs) <= 1.0 + EPS
              for e in wide), "chat top_logprobs=20: twenty entries, at most all the mass")
    plain = c.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=3,
                                      temperature=0)
    check(plain.choices[0].logprobs is None, "chat without logprobs: logprobs is null")


def t_sampled(srv):
    c = srv.client()
    r = c.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=8,
                                  temperature=0.8, seed=11, n=2, logprobs=True, top_logprobs=5)
    for ch in r.choices:
        entries = ch.logprobs.content
        check(len(entries) >= 1, f"choice {ch.index}: has entries")
        for i, e in enumerate(entries):
            values = [t.logprob for t in e.top_logprobs]
            check(e.logprob <= 0.0 and all(v <= 0.0 for v in values),
                  f"choice {ch.index} token {i}: values <= 0")
            check_sorted(values, f"choice {ch.index} token {i}")
            same = [t for t in e.top_logprobs if t.token == e.token]
            check(not same or abs(same[0].logprob - e.logprob) < 1e-6,
                  f"choice {ch.index} token {i}: the drawn token's entry matches its logprob")
            check(e.logprob <= values[0] + 1e-6,
                  f"choice {ch.index} token {i}: no token beats the top one")
    total = sum(len(ch.logprobs.content) for ch in r.choices)
    check(total == r.usage.completion_tokens, f"n=2: every token of both choices has an entry")


def tokenize(srv, text):
    r = requests.post(srv.url + "/tokenize", json={"prompt": text}, timeout=60)
    check(r.status_code == 200, f"/tokenize answers 200 (got {r.status_code})")
    return r.json()["tokens"]


def echo_entries(lp):
    return {"tokens": lp.tokens, "token_logprobs": lp.token_logprobs,
            "top_logprobs": lp.top_logprobs, "text_offset": lp.text_offset}


def t_echo(srv):
    c = srv.client()
    # The widest top lists: most prompt tokens are then among their
    # prefix's, so their values are compared directly.
    k = 20
    ids = tokenize(srv, PROMPT)
    p = len(ids)
    check(p >= 3, f"the prompt has several tokens ({p})")
    # Fill the prefix cache with this prompt first: the echo must still score
    # every prompt token.
    plain = c.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=4, temperature=0)
    plain_text = plain.choices[0].text
    r = c.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=4, temperature=0,
                             echo=True, logprobs=k)
    ch = r.choices[0]
    print(f"    echo text {ch.text!r}")
    check(ch.text == PROMPT + plain_text,
          f"echo: the prompt then the same completion ({ch.text!r} vs {PROMPT + plain_text!r})")
    check(r.usage.prompt_tokens == p and r.usage.completion_tokens == plain.usage.completion_tokens,
          f"echo: usage counts the prompt ({r.usage.prompt_tokens}) and the generated tokens")
    check(r.usage.prompt_tokens_details is None or
          not r.usage.prompt_tokens_details.cached_tokens,
          "echo with logprobs: the prompt is prefilled, not taken from the prefix cache")
    lp = echo_entries(ch.logprobs)
    n = r.usage.completion_tokens
    check(len(lp["tokens"]) == p + n and len(lp["token_logprobs"]) == p + n and
          len(lp["top_logprobs"]) == p + n and len(lp["text_offset"]) == p + n,
          f"echo: {p} prompt entries then {n} generated ones ({len(lp['tokens'])})")
    check("".join(lp["tokens"]) == ch.text, "echo: the tokens spell the echoed text")
    check(lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None,
          "echo: the first prompt token has no logprob (nothing predicts it)")
    check(lp["text_offset"][0] == 0 and all(
        lp["text_offset"][i + 1] == lp["text_offset"][i] + len(lp["tokens"][i])
        for i in range(p + n - 1)), "echo: text_offset is where each token starts")
    check(lp["text_offset"][p] == len(PROMPT), "echo: the generated text starts after the prompt")

    # The generated part equals what a request without echo reports.
    tol = max(same_prompt_tolerance(srv), 1e-4)
    _, gen_lp, _ = completion_logprobs(c, k, stream=False, max_tokens=4)
    check(lp["tokens"][p:] == gen_lp["tokens"] and
          all(abs(a - b) < tol for a, b in zip(lp["token_logprobs"][p:], gen_lp["token_logprobs"])),
          "echo: the generated tokens' logprobs are those without echo")

    # Each prompt entry, independently: greedy requests whose prompt is the
    # tokens before it report the same distribution for their next token.
    present = 0
    for i in range(1, p):
        prefix = c.completions.create(model=MODEL_NAME, prompt=ids[:i], max_tokens=1,
                                      temperature=0, logprobs=k)
        top = prefix.choices[0].logprobs.top_logprobs[0]
        mine = lp["top_logprobs"][i]
        value = lp["token_logprobs"][i]
        check(value <= 0.0, f"prompt token {i} {lp['tokens'][i]!r}: logprob {value} <= 0")
        # Its k alternatives are the prefix request's (which adds its own draw,
        # the first of them when greedy).
        best = sorted(top.items(), key=lambda kv: -kv[1])[:k]
        mine_best = sorted(((t, v) for t, v in mine.items()), key=lambda kv: -kv[1])[:k]
        check(same_tops(best, mine_best, top, tol),
              f"prompt token {i}: top {k} {mine_best} equal the prefix request's {best}")
        if lp["tokens"][i] in top:
            present += 1
            check(abs(top[lp["tokens"][i]] - value) < tol,
                  f"prompt token {i}: logprob {value} equals the prefix request's "
                  f"{top[lp['tokens'][i]]}")
        else:
            check(value <= min(top.values()) + tol,
                  f"prompt token {i}: outside the prefix request's top {k}, so no likelier "
                  f"than its least ({value} vs {min(top.values())})")
    print(f"    {present} of {p - 1} prompt tokens among their prefix's top {k}")

    # Streamed: the same text and entries, the prompt in the first chunk.
    text, s_lp, _ = completion_logprobs(c, k, stream=True, max_tokens=4, echo=True)
    check(text == ch.text, f"echo stream: the same text ({text!r})")
    check(s_lp["tokens"] == lp["tokens"] and s_lp["text_offset"] == lp["text_offset"] and
          s_lp["token_logprobs"][0] is None and
          all(abs(a - b) < tol for a, b in zip(s_lp["token_logprobs"][1:], lp["token_logprobs"][1:])),
          "echo stream: the same entries")
    chunks = [ch2.text for chunk in c.completions.create(model=MODEL_NAME, prompt=PROMPT,
                                                          max_tokens=3, temperature=0, echo=True,
                                                          stream=True)
              for ch2 in chunk.choices]
    check(bool(chunks) and chunks[0].startswith(PROMPT),
          f"echo stream without logprobs: the first chunk carries the prompt ({chunks[:2]})")

    # max_tokens 0: the prompt alone, scored.
    zero = c.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=0, echo=True,
                                logprobs=1)
    z = zero.choices[0]
    check(z.text == PROMPT and zero.usage.completion_tokens == 0 and z.finish_reason == "length",
          f"max_tokens 0 with echo: the prompt alone ({z.text!r}, {zero.usage.completion_tokens} "
          f"tokens, {z.finish_reason})")
    check(z.logprobs.tokens == lp["tokens"][:p] and
          all(abs(a - b) < tol for a, b in zip(z.logprobs.token_logprobs[1:],
                                                lp["token_logprobs"][1:p])),
          "max_tokens 0: the prompt's entries")
    bare = c.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=0, echo=True)
    check(bare.choices[0].text == PROMPT and bare.choices[0].logprobs is None,
          "max_tokens 0 without logprobs: the prompt, logprobs null")


def t_errors(srv):
    c = srv.client()

    def expect(param, what, fn):
        try:
            fn()
            check(False, f"{what}: expected HTTP 400")
        except openai.BadRequestError as e:
            body = e.body if isinstance(e.body, dict) else {}
            err = body.get("error", body)
            check(e.status_code == 400 and err.get("param") == param and bool(err.get("message")),
                  f"{what}: HTTP {e.status_code}, param {err.get('param')!r}: {err.get('message')}")

    def comp(**kw):
        return lambda: c.completions.create(model=MODEL_NAME, prompt="hi", max_tokens=2, **kw)

    def comp_zero():
        return lambda: c.completions.create(model=MODEL_NAME, prompt="hi", max_tokens=0)

    def chat(**kw):
        return lambda: c.chat.completions.create(model=MODEL_NAME, messages=MESSAGES,
                                                 max_tokens=2, **kw)

    expect("logprobs", "completions logprobs 21", comp(logprobs=21))
    expect("logprobs", "completions logprobs -1", comp(logprobs=-1))
    expect("logprobs", "completions logprobs true", comp(extra_body={"logprobs": True}))
    expect("top_logprobs", "chat top_logprobs 21", chat(logprobs=True, top_logprobs=21))
    expect("top_logprobs", "chat top_logprobs without logprobs", chat(top_logprobs=2))
    expect("logprobs", "chat logprobs 'yes'", chat(extra_body={"logprobs": "yes"}))
    expect("max_tokens", "completions max_tokens 0 without echo", comp_zero())
    expect("echo", "chat echo", chat(extra_body={"echo": True}))
    check(requests.get(srv.url + "/health", timeout=30).status_code == 200,
          "the server is healthy after the refusals")


def group_logprobs(binary, model):
    # Info logs: the executor's line tells a CUDA server (same_prompt_tolerance).
    srv = Server(binary, model,
                 cmd=[binary, "--log-level", "info", "serve", model, "--host", "127.0.0.1",
                      "--port", "0", "--served-model-name", MODEL_NAME, "--max-sessions", "8",
                      "--max-session-tokens", "512"])
    try:
        srv.wait_ready()
        for t in (t_completions, t_chat, t_sampled, t_echo, t_errors):
            run_test(t, srv)
    finally:
        srv.kill()


def main():
    e2e_main({"logprobs": group_logprobs})


if __name__ == "__main__":
    main()
