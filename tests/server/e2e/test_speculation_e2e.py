#!/usr/bin/env python3
"""End-to-end tests of speculative decoding in `cellm serve`, with SmolLM2-135M on 127.0.0.1.

Group `speculation` (one ctest, server_e2e_speculation):
  - `--speculate draft --draft-model` with the model as its own draft, and `--speculate ngram`:
    the official openai client gets, greedy, the very text a server without speculation
    answers (completions and chat, two requests at once), while /metrics counts drafts verified
    and accepted (every one, for the model drafting for itself)
  - start-up refusals: a draft model of another vocabulary (gemma-3) names both sizes, a
    missing draft file is named, --draft-model without --speculate draft and --speculate draft
    without --draft-model exit non-zero with the flag to use

A missing virtual environment, package or model is a failure that says what to run, never a
skip.
"""
import os
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server_e2e import MODEL_NAME, Server, check, e2e_main, run_test  # noqa: E402

try:
    import openai  # noqa: F401  (Server.client needs it)
except ImportError as e:  # pragma: no cover - environment problem
    print(f"FAIL: {e}: run scripts/setup (installs scripts/requirements-test.txt into .venv)")
    sys.exit(1)

PROMPTS = [
    "Repeat exactly: the red fox runs past the old mill, the red fox runs past the old mill.",
    "List the numbers from one to ten in words, separated by commas.",
]
DRAFTED = "cellm:spec_decode_num_draft_tokens_total"
ACCEPTED = "cellm:spec_decode_num_accepted_tokens_total"


def answers(srv):
    """Greedy chat answers to PROMPTS sent at once, then a greedy completion of the first."""
    c = srv.client()
    out = [None] * len(PROMPTS)

    def one(i):
        r = c.chat.completions.create(model=MODEL_NAME, max_tokens=24, temperature=0,
                                      messages=[{"role": "user", "content": PROMPTS[i]}])
        out[i] = r.choices[0].message.content

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(900)
    r = c.completions.create(model=MODEL_NAME, prompt=PROMPTS[0], max_tokens=16, temperature=0)
    out.append(r.choices[0].text)
    return out


def start(binary, model, *extra):
    srv = Server(binary, model, "--max-sessions", "4", "--max-session-tokens", "512",
                 "--prefix-cache", "0", *extra)
    srv.wait_ready()
    return srv


def t_speculation_serves_plain_text(binary, model):
    plain = start(binary, model)
    try:
        want = answers(plain)
        check(DRAFTED not in plain.metrics() or plain.metrics()[DRAFTED] <= 0,
              "a server without --speculate verifies no drafts")
    finally:
        plain.terminate()
    check(all(isinstance(w, str) and w for w in want), f"plain answers have text ({want!r})")
    for extra, own in ((("--speculate", "draft", "--draft-model", model), True),
                       (("--speculate", "ngram"), False)):
        name = " ".join(extra[:2])
        srv = start(binary, model, *extra)
        try:
            got = answers(srv)
            m = srv.metrics()
        finally:
            srv.terminate()
        check(got == want, f"{name}: greedy text equals the plain server's ({got!r} vs {want!r})")
        if own:
            check(m.get(DRAFTED, 0) > 0, f"{name}: drafts were verified ({m.get(DRAFTED)})")
            check(m.get(ACCEPTED, -1) == m.get(DRAFTED, 0),
                  f"{name}: the model drafting for itself has every draft kept "
                  f"({m.get(ACCEPTED)} of {m.get(DRAFTED)})")
        else:
            check(m.get(DRAFTED, -1) >= 0, f"{name}: /metrics reports drafts ({m.get(DRAFTED)})")


def refused(binary, *args):
    """Runs `serve` expected to stop on its own; returns (exit code, stderr)."""
    cmd = [binary, "serve", *args, "--host", "127.0.0.1", "--port", "0"]
    print("running:", " ".join(cmd))
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300,
                       text=True, errors="replace")
    return p.returncode, p.stderr


def t_bad_draft_set_ups_are_refused(binary, model):
    root = os.path.dirname(os.path.dirname(model))
    gemma = os.path.join(root, "models", "gemma-3-270m-q4_k_m.gguf")
    check(os.path.exists(gemma), f"{gemma} exists (run scripts/fetch-model gemma3)")
    code, err = refused(binary, model, "--speculate", "draft", "--draft-model", gemma)
    check(code != 0, f"a draft of another vocabulary stops the server (exit {code})")
    check("262144" in err and "49152" in err, f"both vocabulary sizes are named:\n{err[-2000:]}")
    missing = os.path.join(root, "models", "no-such-draft.gguf")
    code, err = refused(binary, model, "--speculate", "draft", "--draft-model", missing)
    check(code != 0 and missing in err, f"a missing draft file is named (exit {code}):\n{err[-800:]}")
    code, err = refused(binary, model, "--draft-model", model)
    check(code != 0 and "--speculate draft" in err,
          f"--draft-model alone is refused (exit {code}):\n{err[-800:]}")
    code, err = refused(binary, model, "--speculate", "draft")
    check(code != 0 and "--draft-model" in err,
          f"--speculate draft alone is refused (exit {code}):\n{err[-800:]}")


def group_speculation(binary, model):
    run_test(t_speculation_serves_plain_text, binary, model)
    run_test(t_bad_draft_set_ups_are_refused, binary, model)


def main():
    e2e_main({"speculation": group_speculation})


if __name__ == "__main__":
    main()
