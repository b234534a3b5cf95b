#!/usr/bin/env python3
"""End-to-end tests of the defaults a first user meets, with SmolLM2-135M.

Group `defaults` (one ctest, server_e2e_defaults):
  - `cellm serve` with no sizing flag states in its ready line the context it
    chose (the model's own, read here from the GGUF metadata) and its sessions;
  - a request without max_tokens stops at --max-tokens-default (the official
    openai client, completions and chat);
  - 64 concurrent streams are all admitted at once with the default session
    count: all 64 are running together (/metrics) while prefix-cache snapshots
    are reported apart;
  - `cellm run` from another directory finds a model in the user's data folder
    ($XDG_DATA_HOME/cellm/models), and a miss lists every place searched.

Reuses the helpers of test_server_e2e.py. A missing package or model is a
failure that says what to run, never a skip.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server_e2e import MODEL_NAME, Server, check, e2e_main, run_test  # noqa: E402

try:
    import gguf
except ImportError as e:  # pragma: no cover - environment problem
    print(f"FAIL: {e}: run scripts/setup (installs scripts/requirements-test.txt into .venv)")
    sys.exit(1)

CAP = 5  # --max-tokens-default for the server under test
STREAMS = 64


def model_context(path):
    """The context length the GGUF file declares (<arch>.context_length)."""
    reader = gguf.GGUFReader(path)
    arch_field = reader.fields["general.architecture"]
    arch = bytes(arch_field.parts[arch_field.data[0]]).decode()
    field = reader.fields[f"{arch}.context_length"]
    return int(field.parts[field.data[0]][0])


def t_ready_line(srv, context):
    """The ready line states the context (the model's own) and the sessions."""
    ready = [line for line in srv.log if "ready in" in line]
    check(len(ready) == 1, f"one ready line ({len(ready)})")
    line = ready[0] if ready else ""
    print("   ", line.strip())
    check(f"context {context} (the model's)" in line,
          f"the ready line states the model's context {context}")
    m = re.search(r"(\d+) sessions \(([^)]*)\) \+ (\d+) for prefix snapshots", line)
    check(m is not None, "the ready line states the sessions and the snapshot sessions")
    if m:
        check(int(m.group(1)) >= STREAMS,
              f"the default sizing admits at least {STREAMS} sequences ({m.group(1)}, {m.group(2)})")
        check(int(m.group(3)) > 0, f"snapshots have sessions of their own ({m.group(3)})")
    models = srv.client().models.list()
    check(models.data and models.data[0].id == MODEL_NAME, "the model is listed")
    r = srv.client().completions.create(model=MODEL_NAME, prompt="x", max_tokens=1)
    check(r.usage.prompt_tokens >= 1, "a first request is served")


def t_default_max_tokens(srv):
    """Without max_tokens a generation stops at the server's cap."""
    client = srv.client()
    r = client.completions.create(model=MODEL_NAME, prompt="Once upon a time",
                                  extra_body={"ignore_eos": True})
    check(r.usage.completion_tokens == CAP and r.choices[0].finish_reason == "length",
          f"a completion without max_tokens stops at {CAP} tokens "
          f"({r.usage.completion_tokens}, {r.choices[0].finish_reason})")
    c = client.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Tell me a long story."}],
        extra_body={"ignore_eos": True})
    check(c.usage.completion_tokens == CAP and c.choices[0].finish_reason == "length",
          f"a chat without max_tokens stops at {CAP} tokens "
          f"({c.usage.completion_tokens}, {c.choices[0].finish_reason})")
    r = client.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=CAP + 3,
                                  extra_body={"ignore_eos": True})
    check(r.usage.completion_tokens == CAP + 3,
          f"an explicit max_tokens above the default cap is honoured ({r.usage.completion_tokens})")


def t_concurrent_admission(srv):
    """64 streams, each long enough that none can finish before the last one
    starts: once every stream has delivered its first chunk, all 64 must be
    running together. With fewer admission slots, the later streams could only
    start after earlier ones finished, so fewer would ever run at once."""
    client = srv.client()

    def start(i):
        stream = client.completions.create(
            model=MODEL_NAME, prompt=f"Request {i}: a story about the number {i}",
            max_tokens=400, stream=True, extra_body={"ignore_eos": True})
        first = next(iter(stream))
        return stream, first

    with ThreadPoolExecutor(max_workers=STREAMS) as pool:
        futures = [pool.submit(start, i) for i in range(STREAMS)]
        started = []
        for f in futures:
            try:
                started.append(f.result(timeout=900))
            except Exception as e:  # noqa: BLE001 - any failure is reported
                check(False, f"a stream started: {e!r}")
        check(len(started) == STREAMS, f"all {STREAMS} streams delivered a first chunk ({len(started)})")
        m = srv.metrics()
        running = m.get("cellm:num_requests_running", -1)
        check(running == STREAMS, f"all {STREAMS} streams run at once (running {running})")
        check(m.get("cellm:num_sequences_running", -1) == STREAMS,
              f"running sequences count requests only, not snapshots "
              f"({m.get('cellm:num_sequences_running')})")
        check(m.get("cellm:num_requests_waiting", -1) == 0, "no stream is waiting")
        snaps = m.get("cellm:prefix_snapshot_sessions", -1)
        check(snaps >= 0, f"/metrics reports the snapshot sessions apart ({snaps})")
        for stream, _ in started:
            stream.close()  # the client goes away: the server cancels the rest


def group_defaults(binary, model):
    context = model_context(model)
    srv = Server(binary, model, "--max-tokens-default", str(CAP))
    try:
        srv.wait_ready()
        for t in (t_ready_line, t_default_max_tokens, t_concurrent_admission):
            if t is t_ready_line:
                run_test(t, srv, context)
            else:
                run_test(t, srv)
    finally:
        srv.kill()
    run_test(t_run_finds_model, binary, model)


def run_cellm(binary, cwd, env, *args):
    return subprocess.run([os.path.abspath(binary), "run", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def t_run_finds_model(binary, model):
    """`cellm run` from an unrelated directory, with HOME and XDG_DATA_HOME in
    a temporary folder: a copy of the binary outside the checkout finds the
    model only through the data folder; with the folder empty it lists every
    place searched; the binary in the checkout also finds the checkout's models/."""
    with tempfile.TemporaryDirectory() as tmp:
        home = os.path.join(tmp, "home")
        data = os.path.join(tmp, "data")
        elsewhere = os.path.join(tmp, "elsewhere")
        bindir = os.path.join(tmp, "bin")
        for d in (home, elsewhere, bindir):
            os.makedirs(d)
        env = {k: v for k, v in os.environ.items() if k != "CELLM_MODEL"}
        env.update(HOME=home, XDG_DATA_HOME=data)
        copy = os.path.join(bindir, "cellm")
        shutil.copy2(os.path.abspath(binary), copy)

        r = run_cellm(copy, elsewhere, env, "-p", "Hello", "-n", "2")
        check(r.returncode != 0, f"with an empty data folder the copied binary fails (rc {r.returncode})")
        searched = os.path.join(data, "cellm", "models", os.path.basename(model))
        check(searched in r.stderr and "scripts/fetch-model smollm2" in r.stderr,
              "the miss lists the data folder it searched and how to fetch")
        print("   ", r.stderr.strip().replace("\n", "\n    "))

        folder = os.path.join(data, "cellm", "models")
        os.makedirs(folder)
        os.symlink(os.path.abspath(model), os.path.join(folder, os.path.basename(model)))
        r = run_cellm(copy, elsewhere, env, "-p", "Hello", "-n", "2", "--json")
        check(r.returncode == 0, f"with the model in the data folder `cellm run` succeeds "
                                 f"(rc {r.returncode}: {r.stderr[-300:]})")
        check(r.stdout.strip() != "", "it prints a continuation")

        r = run_cellm(copy, elsewhere, dict(env, CELLM_MODEL="no-such-model"), "-p", "Hi", "-n", "1")
        check(r.returncode != 0 and "CELLM_MODEL" in r.stderr,
              "a CELLM_MODEL that names nothing is an error that says where it came from")

        empty = dict(env, XDG_DATA_HOME=os.path.join(tmp, "nothing"))
        r = run_cellm(binary, elsewhere, empty, "-p", "Hello", "-n", "2", "--json")
        check(r.returncode == 0,
              f"the binary in the checkout finds the checkout's models/ from another directory "
              f"(rc {r.returncode}: {r.stderr[-300:]})")


def main():
    e2e_main({"defaults": group_defaults})


if __name__ == "__main__":
    main()
