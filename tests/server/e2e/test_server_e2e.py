#!/usr/bin/env python3
"""End-to-end tests of `cellm serve` with SmolLM2-135M on 127.0.0.1.

Groups (one ctest each):
  api      the official openai client: completions, chat, streaming with
           usage, stop strings, n=2, seeded determinism, prefix-cache hits,
           tokenize/detokenize, every error case (400/404/413/429/503),
           client disconnects, SIGTERM drain
  load     64 concurrent streams x 3 rounds: zero failures, every stream well
           formed, /metrics consistent with what was sent

The chat page's browser tests are in test_page_e2e.py.

A missing virtual environment, package, browser or model is a failure that
says what to run, never a skip.
"""
import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

try:
    import openai
    import requests
except ImportError as e:  # pragma: no cover - environment problem
    print(f"FAIL: {e}: run scripts/setup (installs scripts/requirements-test.txt into .venv)")
    sys.exit(1)

MODEL_NAME = "smollm2"
FAILURES = []


def check(cond, what):
    if cond:
        print(f"  ok    {what}")
    else:
        print(f"  FAIL  {what}")
        FAILURES.append(what)
    return cond


def find_model(root):
    env = os.environ.get("CELLMDEV_E2E_MODEL")
    if env:
        return env
    path = os.path.join(root, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(path):
        print(f"FAIL: {path} is missing: run scripts/fetch-model smollm2")
        sys.exit(1)
    return path


class Server:
    """`<server> serve --model ... --port 0`; the port is read from stderr."""

    def __init__(self, binary, model, *extra, cmd=None):
        # cmd: a whole command line instead (global options before `serve`, other hosts).
        if cmd is None:
            cmd = [binary, "serve", model, "--host", "127.0.0.1", "--port", "0",
                   "--served-model-name", MODEL_NAME, *extra]
        print("starting:", " ".join(cmd))
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, errors="replace")
        self.port = None
        self.log = []
        self._port_seen = threading.Event()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        if not self._port_seen.wait(60):
            self.kill()
            raise RuntimeError("the server did not print its port:\n" + "".join(self.log))
        self.url = f"http://127.0.0.1:{self.port}"
        self.first_health = None

    def _read_stderr(self):
        for line in self.proc.stderr:
            self.log.append(line)
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m and self.port is None:
                self.port = int(m.group(1))
                self._port_seen.set()

    def wait_ready(self, timeout=600):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("the server exited while loading:\n" + "".join(self.log))
            try:
                r = requests.get(self.url + "/health", timeout=10)
            except requests.ConnectionError:
                # A failed load closes the listener just before the process exits.
                time.sleep(0.05)
                continue
            if self.first_health is None:
                self.first_health = (r.status_code, r.json())
            if r.status_code == 200:
                return
            time.sleep(0.05)
        raise RuntimeError("the server did not become ready")

    def on_cuda(self):
        """True when the server runs the CUDA backend (its executor says so in the
        log at --log-level info, which the server must have been started with)."""
        return any("forwards on cuda" in line for line in self.log)

    def client(self, **kw):
        return openai.OpenAI(base_url=self.url + "/v1", api_key="unused", max_retries=0,
                             timeout=600, **kw)

    def metrics(self):
        text = requests.get(self.url + "/metrics", timeout=30).text
        out = {}
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
        return out

    def terminate(self, timeout=120):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def run_test(fn, *args):
    print(f"- {fn.__name__}")
    try:
        fn(*args)
    except Exception:  # a crash in a test is a failure of that test
        traceback.print_exc()
        FAILURES.append(f"{fn.__name__} raised")


def error_of(resp):
    try:
        return resp.json().get("error", {})
    except ValueError:
        return {}


# ---------------------------------------------------------------- api group

def t_health_models_tokenize(srv):
    status, body = srv.first_health
    check(status in (200, 503), f"first /health while starting is 200 or 503 (got {status})")
    if status == 503:
        check(body.get("status") == "loading", "a 503 health says 'loading'")
    check(requests.get(srv.url + "/health").status_code == 200, "/health is 200 once loaded")
    models = srv.client().models.list()
    check([m.id for m in models.data] == [MODEL_NAME], "/v1/models lists the served name")
    tok = requests.post(srv.url + "/tokenize", json={"prompt": "Hello world"}).json()
    check(tok["count"] == len(tok["tokens"]) > 0, "/tokenize returns tokens and their count")
    text = requests.post(srv.url + "/detokenize", json={"tokens": tok["tokens"]}).json()["prompt"]
    check(text.strip() == "Hello world", f"/detokenize inverts /tokenize (got {text!r})")


def t_completion_and_chat(srv):
    c = srv.client()
    prompt = "The capital of France is"
    r = c.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=8, temperature=0)
    n_prompt = requests.post(srv.url + "/tokenize", json={"prompt": prompt}).json()["count"]
    check(r.object == "text_completion" and len(r.choices) == 1, "a completion has one choice")
    check(len(r.choices[0].text) > 0, f"the completion has text ({r.choices[0].text!r})")
    check(r.choices[0].finish_reason in ("stop", "length"), "finish_reason is stop or length")
    check(r.usage.prompt_tokens == n_prompt, "usage.prompt_tokens equals /tokenize's count")
    check(1 <= r.usage.completion_tokens <= 8, "completion_tokens within max_tokens")
    again = c.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=8, temperature=0)
    check(again.choices[0].text == r.choices[0].text, "greedy completions repeat exactly")

    messages = [{"role": "user", "content": "What is the capital of France?"}]
    chat = c.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=12,
                                     temperature=0)
    msg = chat.choices[0].message
    check(chat.object == "chat.completion" and msg.role == "assistant", "chat answers as assistant")
    check(len(msg.content) > 0, f"the chat answer has text ({msg.content!r})")
    n_chat = requests.post(srv.url + "/tokenize", json={"messages": messages}).json()["count"]
    check(chat.usage.prompt_tokens == n_chat, "chat prompt_tokens equals /tokenize of the messages")

    # Streaming with usage reproduces the non-streaming greedy answer.
    stream = c.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=12,
                                       temperature=0, stream=True,
                                       stream_options={"include_usage": True})
    chunks = list(stream)
    content = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    check(chunks[0].choices[0].delta.role == "assistant", "the first chunk carries the role")
    check(content == msg.content, "the streamed answer equals the non-streamed one")
    finals = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    check(finals == [chat.choices[0].finish_reason], "one chunk carries the finish reason")
    check(chunks[-1].choices == [] and chunks[-1].usage is not None, "the last chunk is usage only")
    check(chunks[-1].usage.completion_tokens == chat.usage.completion_tokens,
          "streamed usage equals non-streamed usage")
    check(len({ch.id for ch in chunks}) == 1, "one id for the whole stream")


def t_stop_strings(srv):
    c = srv.client()
    prompt = "Here is a list of fruits: apple, banana,"
    base = c.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=16, temperature=0,
                                extra_body={"ignore_eos": True}).choices[0].text
    check(len(base) >= 10, f"the baseline is long enough ({base!r})")
    # A 3-character stop from the middle of the baseline, most likely spanning
    # a token boundary; the answer must be the baseline cut before its first
    # occurrence.
    stop = base[len(base) // 2: len(base) // 2 + 3]
    expected = base[: base.find(stop)]
    r = c.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=16, temperature=0,
                             stop=[stop], extra_body={"ignore_eos": True})
    check(r.choices[0].text == expected, f"stop {stop!r} cuts the text ({r.choices[0].text!r})")
    check(r.choices[0].finish_reason == "stop", "a stop string finishes with 'stop'")
    s = c.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=16, temperature=0,
                             stop=[stop], stream=True, extra_body={"ignore_eos": True})
    parts = list(s)
    check("".join(p.choices[0].text for p in parts if p.choices) == expected,
          "a streamed stop string sends nothing from the stop on")


def t_n_and_seeds(srv):
    c = srv.client()
    prompt = "Once upon a time"
    greedy = c.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=6, temperature=0)
    two = c.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=6, temperature=0, n=2)
    check(sorted(ch.index for ch in two.choices) == [0, 1], "n=2 returns choices 0 and 1")
    check(all(ch.text == greedy.choices[0].text for ch in two.choices),
          "greedy clones continue exactly like the single request")
    check(two.usage.prompt_tokens == greedy.usage.prompt_tokens, "the prompt is counted once")
    check(two.usage.completion_tokens == 2 * greedy.usage.completion_tokens,
          "completion_tokens adds the choices")

    def sampled(seed, n=1):
        return [ch.text for ch in sorted(
            c.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=6, temperature=1.0,
                                 seed=seed, n=n).choices, key=lambda ch: ch.index)]

    a = sampled(1234, n=2)
    check(sampled(1234, n=2) == a, "the same seed reproduces both choices")
    distinct = {sampled(s)[0] for s in (1, 2, 3, 4)}
    check(len(distinct) >= 2, "different seeds give different samples")
    chat = [c.chat.completions.create(model=MODEL_NAME, n=2, seed=9, temperature=0.9, max_tokens=6,
                                      messages=[{"role": "user", "content": "Tell me a joke"}])
            for _ in range(2)]
    check([ch.message.content for ch in chat[0].choices] ==
          [ch.message.content for ch in chat[1].choices], "seeded chat with n=2 is reproducible")


def t_prefix_cache(srv):
    c = srv.client()
    system = ("You are a helpful assistant for a small bakery. You answer questions about "
              "opening hours, bread, cakes and pastries. Be friendly and brief. ") * 3
    before = srv.metrics()
    usage = []
    for q in ("Do you sell croissants?", "When do you open on Sunday?"):
        r = c.chat.completions.create(model=MODEL_NAME, max_tokens=4, temperature=0,
                                      messages=[{"role": "system", "content": system},
                                                {"role": "user", "content": q}])
        usage.append(r.usage)
    cached = usage[1].prompt_tokens_details.cached_tokens
    check(cached >= 60, f"the shared system prompt is served from the cache ({cached} tokens)")
    check(cached < usage[1].prompt_tokens, "the differing question is prefilled")
    after = srv.metrics()
    check(after["cellm:prefix_cache_hits_total"] - before["cellm:prefix_cache_hits_total"] >= 1,
          "metrics count the prefix-cache hit")
    check(after["cellm:prefix_cache_hit_tokens_total"] - before["cellm:prefix_cache_hit_tokens_total"]
          >= cached, "metrics count the cached tokens")


def t_min_tokens(srv):
    """A short greedy answer ends with EOS after k tokens; with min_tokens
    k + 6 the same answer continues instead (EOS is never sampled before)."""
    c = srv.client()
    messages = [{"role": "user", "content": "Is the sky blue? Answer yes or no."}]
    base = c.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=64,
                                     temperature=0)
    k = base.usage.completion_tokens
    check(base.choices[0].finish_reason == "stop" and k < 40,
          f"the baseline answer stops early ({k} tokens: {base.choices[0].message.content!r})")
    want = k + 6
    r = c.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=64,
                                  temperature=0, extra_body={"min_tokens": want})
    got = r.usage.completion_tokens
    check(got >= want, f"min_tokens {want} yields at least that many tokens (got {got})")
    check(r.choices[0].message.content.startswith(base.choices[0].message.content),
          "the tokens before the suppressed EOS are unchanged")
    # Every clone of n=2, streamed and sampled, honours it as well.
    s = c.completions.create(model=MODEL_NAME, prompt="Yes.", max_tokens=40, temperature=0.8,
                             seed=3, n=2, stream=True, stream_options={"include_usage": True},
                             extra_body={"min_tokens": 12})
    chunks = list(s)
    usage = chunks[-1].usage
    check(usage is not None and usage.completion_tokens >= 24,
          f"n=2 with min_tokens 12 yields at least 12 tokens per choice ({usage})")
    # min_tokens == max_tokens: exactly that many, finished by length.
    e = c.completions.create(model=MODEL_NAME, prompt="Yes.", max_tokens=9, temperature=0,
                             extra_body={"min_tokens": 9})
    check(e.usage.completion_tokens == 9 and e.choices[0].finish_reason == "length",
          "min_tokens equal to max_tokens gives exactly max_tokens")


def t_errors(srv):
    c = srv.client()

    def expect(exc_type, status, param, fn, what):
        try:
            fn()
            check(False, f"{what}: expected HTTP {status}")
        except exc_type as e:
            body = e.body if isinstance(e.body, dict) else {}
            err = body.get("error", body)
            ok = e.status_code == status and (param is None or err.get("param") == param)
            check(ok and bool(err.get("message")),
                  f"{what}: HTTP {e.status_code}, param {err.get('param')!r}: {err.get('message')}")

    long_prompt = "word " * 2000
    expect(openai.BadRequestError, 400, "prompt",
           lambda: c.completions.create(model=MODEL_NAME, prompt=long_prompt, max_tokens=4),
           "a prompt longer than the context")
    expect(openai.BadRequestError, 400, "max_tokens",
           lambda: c.completions.create(model=MODEL_NAME, prompt="hi", max_tokens=100000),
           "max_tokens beyond the context")
    expect(openai.NotFoundError, 404, "model",
           lambda: c.completions.create(model="gpt-4o", prompt="hi", max_tokens=4),
           "an unknown model")
    expect(openai.BadRequestError, 400, "min_tokens",
           lambda: c.completions.create(model=MODEL_NAME, prompt="hi", max_tokens=4,
                                        extra_body={"min_tokens": 5}),
           "min_tokens above max_tokens")
    expect(openai.BadRequestError, 400, "logprobs",
           lambda: c.completions.create(model=MODEL_NAME, prompt="hi", max_tokens=4, logprobs=21),
           "logprobs above 20")
    expect(openai.BadRequestError, 400, "best_of",
           lambda: c.completions.create(model=MODEL_NAME, prompt="hi", max_tokens=4, best_of=3),
           "an unsupported field")
    expect(openai.BadRequestError, 400, "temperature",
           lambda: c.chat.completions.create(model=MODEL_NAME, temperature=5, max_tokens=4,
                                             messages=[{"role": "user", "content": "hi"}]),
           "temperature out of range")

    r = requests.post(srv.url + "/v1/completions", json={"prompt": "hi", "max_tokens": "5"})
    check(r.status_code == 400 and error_of(r).get("param") == "max_tokens", "a mistyped field")
    r = requests.post(srv.url + "/v1/completions", data="{\"prompt\": ",
                      headers={"Content-Type": "application/json"})
    check(r.status_code == 400 and "JSON" in error_of(r).get("message", ""), "malformed JSON")
    r = requests.get(srv.url + "/v1/nothing")
    check(r.status_code == 404 and error_of(r).get("message"), "an unknown route")
    # Announce a body over the default 8 MiB limit; the server answers 413 from
    # the headers alone, so only a little of it needs sending.
    with socket.create_connection(("127.0.0.1", srv.port), timeout=60) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 9000000\r\n\r\n{\"prompt\": \"xxxx")
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
    status_line = reply.split(b"\r\n", 1)[0]
    check(b" 413 " in status_line and b'"error"' in reply,
          f"a body over the limit is 413 with an error body ({status_line!r})")


def t_capacity_disconnect(srv):
    """--max-sessions 4 --prefix-cache 0 --max-queue 0: four long streams fill
    the server, a fifth request is 429; dropping the streams cancels them."""
    before = srv.metrics()
    streams = []
    for i in range(4):
        r = requests.post(srv.url + "/v1/completions", stream=True, timeout=600,
                          json={"model": MODEL_NAME, "prompt": f"Story {i}:", "max_tokens": 400,
                                "ignore_eos": True, "stream": True})
        streams.append(r)
    # Keep the line iterators: dropping one closes its connection (urllib3).
    lines = []
    for r in streams:
        check(r.status_code == 200, "a long stream is admitted")
        lines.append(r.iter_lines())
        next(lines[-1])  # the first event: generation is running
    m = srv.metrics()
    check(m["cellm:num_requests_running"] == 4, "four requests are running")
    total = before.get("cellm:kv_cells_total", 0)
    check(total > 0 and m.get("cellm:kv_cells_total") == total, f"/metrics reports the KV pool ({total} cells)")
    check(m.get("cellm:kv_cells_used", 0) >= before.get("cellm:kv_cells_used", 0) + 4 * 3,
          f"KV cells rise while four prompts generate ({before.get('cellm:kv_cells_used')} -> "
          f"{m.get('cellm:kv_cells_used')})")
    try:
        srv.client().completions.create(model=MODEL_NAME, prompt="one more", max_tokens=2)
        check(False, "a fifth request at capacity with no queue is refused")
    except openai.RateLimitError as e:
        check(e.status_code == 429, "a fifth request at capacity with no queue is 429")
    for r in streams:
        r.close()  # the client goes away mid-stream
    deadline = time.time() + 60
    while time.time() < deadline and srv.metrics()["cellm:num_requests_running"] > 0:
        time.sleep(0.1)
    after = srv.metrics()
    check(after["cellm:num_requests_running"] == 0, "disconnected streams stop running")
    while time.time() < deadline and srv.metrics()["cellm:kv_cells_used"] > before["cellm:kv_cells_used"]:
        time.sleep(0.1)
    check(srv.metrics()["cellm:kv_cells_used"] == before["cellm:kv_cells_used"],
          "the cancelled streams' KV cells are free again")
    key = 'cellm:requests_total{endpoint="completions",outcome="cancelled"}'
    check(after[key] - before[key] == 4, "the four disconnects count as cancelled")
    qkey = 'cellm:requests_total{endpoint="completions",outcome="queue_full"}'
    check(after[qkey] - before[qkey] == 1, "the refusal counts as queue_full")
    # Capacity is back: a request goes through.
    r = srv.client().completions.create(model=MODEL_NAME, prompt="Hi", max_tokens=2)
    check(len(r.choices) == 1, "after the disconnects a new request is served")


def t_body_limit_flag(srv):
    """Started with --body-limit 65536: a 70 kB body is 413, a 60 kB one is read
    (and refused for its prompt's length instead)."""
    # Announced, not sent: the server answers from the headers alone.
    with socket.create_connection(("127.0.0.1", srv.port), timeout=60) as conn:
        conn.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 70000\r\n\r\n{\"p")
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            chunk = conn.recv(65536)
            if not chunk:
                break
            reply += chunk
    status_line = reply.split(b"\r\n", 1)[0]
    check(b" 413 " in status_line, f"--body-limit 65536 refuses a 70 kB body ({status_line!r})")
    fits = requests.post(srv.url + "/v1/completions",
                         json={"prompt": "word " * 12000, "max_tokens": 1})
    check(fits.status_code == 400 and error_of(fits).get("param") == "prompt",
          f"a 60 kB body is under the limit ({fits.status_code} {error_of(fits).get('param')})")


def t_drain_timeout_flag(srv):
    """Started with --drain-timeout 0: SIGTERM cancels a running stream at once
    (finish_reason "abort") instead of letting it run to its 400 tokens."""
    r = requests.post(srv.url + "/v1/completions", stream=True, timeout=600,
                      json={"model": MODEL_NAME, "prompt": "Count slowly:", "max_tokens": 400,
                            "ignore_eos": True, "stream": True})
    lines = r.iter_lines()
    first = next(lines)
    check(first.startswith(b"data: "), "the long stream started")
    srv.proc.send_signal(signal.SIGTERM)
    rest = [first] + [line for line in lines if line]
    check(rest[-1] == b"data: [DONE]", "the cancelled stream still ends with [DONE]")
    events = [json.loads(line[6:]) for line in rest[:-1]]
    reasons = [e["choices"][0]["finish_reason"] for e in events if e["choices"]]
    text = "".join(e["choices"][0]["text"] for e in events if e["choices"])
    check(reasons and reasons[-1] == "abort",
          f"with no drain time the stream is aborted ({reasons[-1:]}, {len(text)} chars)")
    check(srv.proc.wait(60) == 0, "the server exits 0 after the drain timeout")


def t_sigterm_drains(srv):
    r = requests.post(srv.url + "/v1/completions", stream=True, timeout=600,
                      json={"model": MODEL_NAME, "prompt": "Count to ten:", "max_tokens": 8,
                            "ignore_eos": True, "stream": True})
    lines = r.iter_lines()
    first = next(lines)
    check(first.startswith(b"data: "), "the stream started")
    srv.proc.send_signal(signal.SIGTERM)
    rest = [first] + [line for line in lines if line]
    check(rest[-1] == b"data: [DONE]", "the running stream still ends with [DONE]")
    events = [json.loads(line[6:]) for line in rest[:-1]]
    reasons = [e["choices"][0]["finish_reason"] for e in events if e["choices"]]
    check(reasons[-1] == "length", "the running stream finished normally during the drain")
    check(srv.proc.wait(60) == 0, "the server exits 0 after SIGTERM")


def group_api(binary, model):
    srv = Server(binary, model, "--max-sessions", "16", "--max-session-tokens", "512",
                 "--prefix-cache", "4")
    try:
        # A generation before the model is ready is 503 (when we are early enough).
        early = requests.post(srv.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 1})
        check(early.status_code in (200, 503), f"a request while loading is 200 or 503 ({early.status_code})")
        srv.wait_ready()
        for t in (t_health_models_tokenize, t_completion_and_chat, t_stop_strings, t_n_and_seeds,
                  t_min_tokens, t_prefix_cache, t_errors):
            run_test(t, srv)
        run_test(t_sigterm_drains, srv)
    finally:
        srv.kill()
    small = Server(binary, model, "--max-sessions", "4", "--max-session-tokens", "512",
                   "--prefix-cache", "0", "--max-queue", "0", "--body-limit", "65536",
                   "--drain-timeout", "0")
    try:
        small.wait_ready()
        run_test(t_capacity_disconnect, small)
        run_test(t_body_limit_flag, small)
        run_test(t_drain_timeout_flag, small)
    finally:
        small.kill()
    idle = Server(binary, model, "--max-sessions", "4", "--max-session-tokens", "512",
                  "--prefix-cache", "0")
    try:
        idle.wait_ready()
        code = idle.terminate()
        check(code == 0, f"SIGTERM on an idle server exits 0 (got {code})")
    finally:
        idle.kill()


# --------------------------------------------------------------- load group

def one_stream(url, tag, seed):
    """One streamed completion, parsed strictly. Returns (usage, error)."""
    body = {"model": MODEL_NAME, "prompt": f"Request {tag}: the weather today is", "max_tokens": 4,
            "temperature": 0.8, "seed": seed, "stream": True,
            "stream_options": {"include_usage": True}}
    try:
        r = requests.post(url + "/v1/completions", json=body, stream=True, timeout=900)
        if r.status_code != 200:
            return None, f"{tag}: HTTP {r.status_code} {r.text[:200]}"
        raw = r.content.decode("utf-8")
    except requests.RequestException as e:
        return None, f"{tag}: {e}"
    if not raw.endswith("data: [DONE]\n\n"):
        return None, f"{tag}: the stream does not end with [DONE]"
    blocks = raw.split("\n\n")[:-1]
    if any(not b.startswith("data: ") or "\n" in b for b in blocks):
        return None, f"{tag}: a block is not one data line"
    events = [json.loads(b[6:]) for b in blocks[:-1]]
    ids = {e["id"] for e in events}
    finishes = [c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]]
    usage = events[-1].get("usage") if events else None
    if len(ids) != 1 or len(finishes) != 1 or not usage or events[-1]["choices"]:
        return None, f"{tag}: malformed stream (ids {ids}, finishes {finishes})"
    if not 1 <= usage["completion_tokens"] <= 4:
        return None, f"{tag}: completion_tokens {usage['completion_tokens']}"
    return usage, None


def group_load(binary, model):
    srv = Server(binary, model, "--max-sessions", "96", "--max-session-tokens", "128",
                 "--prefix-cache", "16", "--max-queue", "256")
    try:
        srv.wait_ready()
        before = srv.metrics()
        usages, errors = [], []
        t0 = time.time()
        for rnd in range(3):
            with ThreadPoolExecutor(max_workers=64) as pool:
                results = list(pool.map(lambda i, rnd=rnd: one_stream(srv.url, f"{rnd}-{i}", i),
                                        range(64)))
            usages += [u for u, e in results if u]
            errors += [e for u, e in results if e]
            print(f"  round {rnd}: {sum(1 for u, e in results if u)} streams ok "
                  f"({time.time() - t0:.1f} s)")
        for e in errors[:10]:
            print("   ", e)
        check(not errors and len(usages) == 192, f"192 well-formed streams, {len(errors)} failures")
        after = srv.metrics()

        def delta(name):
            return after.get(name, 0) - before.get(name, 0)

        ok = 'cellm:requests_total{endpoint="completions",outcome="ok"}'
        check(delta(ok) == 192, f"requests_total ok grew by 192 ({delta(ok)})")
        sent_prompt = sum(u["prompt_tokens"] for u in usages)
        sent_gen = sum(u["completion_tokens"] for u in usages)
        check(delta("cellm:prompt_tokens_total") == sent_prompt,
              f"prompt_tokens_total grew by the usage sum ({sent_prompt})")
        check(delta("cellm:generation_tokens_total") == sent_gen,
              f"generation_tokens_total grew by the usage sum ({sent_gen})")
        check(delta("cellm:e2e_request_latency_seconds_count") == 192, "one e2e sample per request")
        check(delta("cellm:time_to_first_token_seconds_count") == 192, "one TTFT sample per request")
        check(delta("cellm:inter_token_latency_seconds_count") == sent_gen - 192,
              "one ITL sample per token after the first")
        # A request's admission slot goes back when the engine thread has closed its sessions,
        # which can come a moment after the client read [DONE]; the gauges settle, not lag forever.
        settled = after
        deadline = time.time() + 10
        while (settled["cellm:num_requests_running"] or settled["cellm:num_requests_waiting"]) \
                and time.time() < deadline:
            time.sleep(0.05)
            settled = srv.metrics()
        check(settled["cellm:num_requests_running"] == 0
              and settled["cellm:num_requests_waiting"] == 0,
              "nothing running or waiting afterwards (within 10 s of the last [DONE])")
        cached = sum(u["prompt_tokens_details"]["cached_tokens"] for u in usages)
        check(delta("cellm:prefix_cache_hit_tokens_total") == cached,
              f"prefix-cache hit tokens equal the usage sum ({cached})")
        code = srv.terminate()
        check(code == 0, f"SIGTERM exits 0 (got {code})")
    finally:
        srv.kill()


def e2e_main(groups):
    """The entry of every e2e script: runs the group named by --group (groups maps a name to a
    function of the server binary and the model path), then lists the failed checks and exits 1
    if there were any."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--group", choices=tuple(groups), required=True)
    ap.add_argument("--server", required=True, help="the cellm (or serve_driver) binary")
    ap.add_argument("--root", required=True, help="source tree (for models/)")
    args = ap.parse_args()
    groups[args.group](args.server, find_model(args.root))
    if FAILURES:
        print(f"\n{len(FAILURES)} check(s) failed:")
        for f in FAILURES:
            print("  -", f)
        sys.exit(1)
    print("\nall checks passed")


def main():
    e2e_main({"api": group_api, "load": group_load})


if __name__ == "__main__":
    main()
