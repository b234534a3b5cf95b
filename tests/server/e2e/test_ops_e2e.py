#!/usr/bin/env python3
"""End-to-end tests of what an operator of `cellm serve` relies on, with
SmolLM2-135M on 127.0.0.1.

Group `ops` (one ctest, server_e2e_ops):
  - API keys: the official openai client with a key (from --api-key and from
    --api-key-file) is served, with a wrong key it gets AuthenticationError;
    raw requests without a key get 401 in the OpenAI error shape with a
    WWW-Authenticate header; / and /health stay public, /metrics does not
  - GET /v1/models/{id}: the model object for the served name, 404 otherwise
  - CORS: a preflight from a listed origin is answered, another origin's is
    not, and responses name only listed origins
  - a second server on a busy port exits non-zero naming host:port, and the
    first keeps answering
  - logs: piped stderr carries no terminal escape codes (and the same line on
    a pseudo-terminal does); a non-loopback address without a key warns; --log-format json writes JSON
    objects; bad option values (log format, key file, origin) are start-up
    errors

A missing virtual environment, package or model is a failure that says what
to run, never a skip.
"""
import json
import os
import pty
import re
import select
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server_e2e import (MODEL_NAME, Server, check, error_of,  # noqa: E402
                             e2e_main, run_test)

try:
    import openai
    import requests
except ImportError as e:  # pragma: no cover - environment problem
    print(f"FAIL: {e}: run scripts/setup (installs scripts/requirements-test.txt into .venv)")
    sys.exit(1)

KEY = "sk-ops-flag-key"
FILE_KEY = "sk-ops-file-key"
ORIGIN = "http://app.example:3000"


class CmdServer(Server):
    """A server started from a full command line (global options before
    `serve`, a host other than 127.0.0.1); the port is read from stderr."""

    def __init__(self, cmd):
        super().__init__(None, None, cmd=cmd)


def run_to_exit(cmd, timeout=120):
    """Runs a command expected to stop on its own; returns (code, stderr)."""
    print("running:", " ".join(cmd))
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout,
                       check=False)
    return p.returncode, p.stderr.decode("utf-8", "replace")


# ------------------------------------------------------------------ checks

def t_keys_with_openai(srv):
    for key in (KEY, FILE_KEY):
        c = openai.OpenAI(base_url=srv.url + "/v1", api_key=key, max_retries=0, timeout=600)
        check([m.id for m in c.models.list().data] == [MODEL_NAME],
              f"with key {key} the client lists the served model")
        chat = c.chat.completions.create(model=MODEL_NAME, max_tokens=3, temperature=0,
                                         messages=[{"role": "user", "content": "Hi"}])
        check(len(chat.choices) == 1 and chat.choices[0].message.role == "assistant",
              f"with key {key} a chat completion is served")
    bad = openai.OpenAI(base_url=srv.url + "/v1", api_key="sk-wrong", max_retries=0, timeout=600)
    for what, call in (("models.list", lambda: bad.models.list()),
                       ("chat", lambda: bad.chat.completions.create(
                           model=MODEL_NAME, max_tokens=3,
                           messages=[{"role": "user", "content": "Hi"}])),
                       ("completions", lambda: bad.completions.create(
                           model=MODEL_NAME, prompt="Hi", max_tokens=3))):
        try:
            call()
            check(False, f"a wrong key is refused on {what}")
        except openai.AuthenticationError as e:
            check(e.status_code == 401, f"a wrong key gets AuthenticationError (401) on {what}")
            body = e.body if isinstance(e.body, dict) else {}
            check(body.get("type") == "authentication_error",
                  f"the 401 error body has type authentication_error ({body})")


def t_keys_raw(srv):
    r = requests.post(srv.url + "/v1/chat/completions", timeout=60,
                      json={"model": MODEL_NAME, "max_tokens": 2,
                            "messages": [{"role": "user", "content": "Hi"}]})
    err = error_of(r)
    check(r.status_code == 401, f"no Authorization header: 401 (got {r.status_code})")
    check(err.get("type") == "authentication_error" and "message" in err and "param" in err
          and "code" in err, f"the 401 has the OpenAI error shape ({r.text[:200]})")
    check(r.headers.get("WWW-Authenticate", "").startswith("Bearer"),
          f"the 401 carries WWW-Authenticate ({r.headers.get('WWW-Authenticate')})")
    check(requests.get(srv.url + "/health", timeout=60).status_code == 200,
          "/health answers without a key")
    page = requests.get(srv.url + "/", timeout=60)
    check(page.status_code == 200 and "text/html" in page.headers.get("Content-Type", ""),
          "the chat page at / loads without a key")
    check(requests.get(srv.url + "/metrics", timeout=60).status_code == 401,
          "/metrics needs the key by default")
    m = requests.get(srv.url + "/metrics", headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    check(m.status_code == 200 and "cellm:" in m.text, "/metrics answers with the key")
    tok = requests.post(srv.url + "/tokenize", json={"prompt": "Hello"}, timeout=60)
    check(tok.status_code == 401, f"/tokenize needs the key (got {tok.status_code})")


def t_model_by_id(srv):
    auth = {"Authorization": f"Bearer {KEY}"}
    c = openai.OpenAI(base_url=srv.url + "/v1", api_key=KEY, max_retries=0, timeout=600)
    m = c.models.retrieve(MODEL_NAME)
    check(m.id == MODEL_NAME and m.object == "model", "models.retrieve returns the served model")
    r = requests.get(f"{srv.url}/v1/models/{MODEL_NAME}", headers=auth, timeout=60)
    listed = requests.get(srv.url + "/v1/models", headers=auth, timeout=60).json()["data"][0]
    check(r.status_code == 200 and r.json() == listed,
          "GET /v1/models/{id} equals the list's entry")
    other = requests.get(srv.url + "/v1/models/not-" + MODEL_NAME, headers=auth, timeout=60)
    err = error_of(other)
    check(other.status_code == 404 and err.get("type") == "invalid_request_error"
          and err.get("param") == "model", f"another id is 404 in the OpenAI shape ({other.text})")
    try:
        c.models.retrieve("not-" + MODEL_NAME)
        check(False, "the client raises NotFoundError for another id")
    except openai.NotFoundError:
        check(True, "the client raises NotFoundError for another id")


def t_cors(srv):
    pre = requests.options(srv.url + "/v1/chat/completions", timeout=60, headers={
        "Origin": ORIGIN, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    check(pre.status_code in (200, 204), f"a listed origin's preflight is answered ({pre.status_code})")
    check(pre.headers.get("Access-Control-Allow-Origin") == ORIGIN,
          f"the preflight allows the origin ({pre.headers.get('Access-Control-Allow-Origin')})")
    allow_h = pre.headers.get("Access-Control-Allow-Headers", "").lower()
    check("authorization" in allow_h and "content-type" in allow_h,
          f"the preflight allows Authorization and Content-Type ({allow_h})")
    check("POST" in pre.headers.get("Access-Control-Allow-Methods", ""),
          "the preflight allows POST")
    evil = requests.options(srv.url + "/v1/chat/completions", timeout=60, headers={
        "Origin": "http://evil.example", "Access-Control-Request-Method": "POST"})
    check("Access-Control-Allow-Origin" not in evil.headers and evil.status_code >= 400,
          f"another origin's preflight is refused ({evil.status_code})")
    r = requests.post(srv.url + "/v1/completions", timeout=600,
                      headers={"Origin": ORIGIN, "Authorization": f"Bearer {KEY}"},
                      json={"model": MODEL_NAME, "prompt": "Hi", "max_tokens": 2})
    check(r.status_code == 200 and r.headers.get("Access-Control-Allow-Origin") == ORIGIN,
          "a listed origin's request is answered with its Allow-Origin")
    r = requests.get(srv.url + "/v1/models", timeout=60,
                     headers={"Origin": "http://evil.example", "Authorization": f"Bearer {KEY}"})
    check(r.status_code == 200 and "Access-Control-Allow-Origin" not in r.headers,
          "another origin's request gets no Allow-Origin")


def t_port_in_use(srv, binary, model):
    code, err = run_to_exit([binary, "serve", model, "--host", "127.0.0.1",
                             "--port", str(srv.port)])
    check(code != 0, f"a second server on port {srv.port} exits non-zero (got {code})")
    check(f"127.0.0.1:{srv.port}" in err and "another process is listening there" in err
          and "--port" in err, f"its error names host:port and says what to do ({err.strip()!r})")
    c = openai.OpenAI(base_url=srv.url + "/v1", api_key=KEY, max_retries=0, timeout=600)
    for i in range(4):  # several connections: none may reach a second listener
        r = c.completions.create(model=MODEL_NAME, prompt="Hi", max_tokens=2)
        check(len(r.choices) == 1, f"the first server still answers (request {i + 1})")


def t_no_escape_codes(srv):
    text = "".join(srv.log)
    check(len(text) > 0, "the server wrote to stderr")
    check("\x1b" not in text, "piped stderr carries no terminal escape codes")


def t_startup_errors(binary, model):
    code, err = run_to_exit([binary, "--log-format", "yaml", "serve", model, "--port", "0"])
    check(code != 0 and "yaml" in err and "json" in err,
          f"an unknown --log-format is an error naming the choices ({code}: {err.strip()!r})")
    missing = "/nonexistent/cellm-ops/keys.txt"
    code, err = run_to_exit([binary, "serve", model, "--port", "0", "--api-key-file", missing])
    check(code != 0 and missing in err, f"an unreadable key file is an error ({code}: {err.strip()!r})")
    with tempfile.NamedTemporaryFile("w", suffix=".keys", delete=False) as f:
        f.write("# no keys here\n\n")
    try:
        code, err = run_to_exit([binary, "serve", model, "--port", "0", "--api-key-file", f.name])
        check(code != 0 and f.name in err and "no key" in err,
              f"an empty key file is an error ({code}: {err.strip()!r})")
    finally:
        os.unlink(f.name)
    code, err = run_to_exit([binary, "serve", model, "--port", "0", "--cors", "app.example"])
    check(code != 0 and "app.example" in err, f"a malformed --cors origin is an error ({err.strip()!r})")


def t_open_address_warns(binary, model):
    """0.0.0.0 without a key: a warning, as plain text and as JSON."""
    srv = CmdServer([binary, "serve", model, "--host", "0.0.0.0", "--port", "0",
                     "--served-model-name", MODEL_NAME, "--max-sessions", "4",
                     "--max-session-tokens", "512", "--prefix-cache", "0"])
    try:
        srv.wait_ready()
        check(srv.terminate() == 0, "the open server stops on SIGTERM")
    finally:
        srv.kill()
    text = "".join(srv.log)
    warn = [line for line in srv.log if "without an API key" in line]
    check(len(warn) == 1 and "warn" in warn[0] and "--api-key" in warn[0],
          f"0.0.0.0 without a key logs one warning ({warn})")
    check("\x1b" not in text, "the warning carries no escape codes when piped")

    srv = CmdServer([binary, "--log-format", "json", "serve", model, "--host", "0.0.0.0",
                     "--port", "0", "--served-model-name", MODEL_NAME, "--max-sessions", "4",
                     "--max-session-tokens", "512", "--prefix-cache", "0"])
    try:
        srv.wait_ready()
        check(srv.terminate() == 0, "the JSON-logging server stops on SIGTERM")
    finally:
        srv.kill()
    objects = []
    for line in srv.log:
        if line.startswith("{"):
            try:
                objects.append(json.loads(line))
            except ValueError:
                check(False, f"a JSON log line parses ({line!r})")
    check(all(set(o) == {"time", "level", "message"} for o in objects) and objects,
          f"JSON log lines hold time, level and message ({objects[:2]})")
    check(any(o["level"] == "warn" and "without an API key" in o["message"] for o in objects),
          "the open-address warning is a JSON object at level warn")
    check(any(o["level"] == "info" and re.search(r"listening on http://", o["message"])
              for o in objects), "the listening line is a JSON object")
    check(any(o["message"].endswith("stopped") for o in objects), "the stop line is a JSON object")
    check(all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", o["time"]) for o in objects),
          "JSON times are ISO 8601 UTC with milliseconds")


def t_color_only_on_tty(binary):
    """The same warning line, piped and on a terminal: escape codes only on the
    terminal. A missing model makes the server exit right after the warning."""
    cmd = [binary, "serve", "/nonexistent/cellm-ops/model.gguf", "--host", "0.0.0.0",
           "--port", "0"]
    code, piped = run_to_exit(cmd)
    check(code != 0 and "without an API key" in piped and "\x1b" not in piped,
          f"piped: the warning is plain text ({piped.strip()[:200]!r})")
    master, slave = pty.openpty()
    print("running on a terminal:", " ".join(cmd))
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    out = b""
    deadline = time.time() + 120
    while time.time() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if not ready:
            if proc.poll() is not None:
                break
            continue
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    text = out.decode("utf-8", "replace")
    warn = [line for line in text.splitlines() if "without an API key" in line]
    check(len(warn) == 1 and "\x1b[" in warn[0],
          f"on a terminal the warning's level is colored ({warn})")


def group_ops(binary, model):
    run_test(t_startup_errors, binary, model)
    run_test(t_color_only_on_tty, binary)
    with tempfile.NamedTemporaryFile("w", suffix=".keys", delete=False) as f:
        f.write(f"# operator keys\n\n  {FILE_KEY}  \n")
    try:
        srv = Server(binary, model, "--max-sessions", "4", "--max-session-tokens", "512",
                     "--prefix-cache", "0", "--api-key", KEY, "--api-key-file", f.name,
                     "--cors", ORIGIN)
        try:
            srv.wait_ready()
            for t in (t_keys_with_openai, t_keys_raw, t_model_by_id, t_cors):
                run_test(t, srv)
            run_test(t_port_in_use, srv, binary, model)
            code = srv.terminate()
            check(code == 0, f"the keyed server exits 0 on SIGTERM (got {code})")
            run_test(t_no_escape_codes, srv)
        finally:
            srv.kill()
    finally:
        os.unlink(f.name)
    run_test(t_open_address_warns, binary, model)


def main():
    e2e_main({"ops": group_ops})


if __name__ == "__main__":
    main()
