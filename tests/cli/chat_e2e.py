#!/usr/bin/env python3
"""End-to-end tests of `cellm chat` with SmolLM2-135M, through a pseudo-terminal.

pexpect plays the user at a terminal: a question gets an answer; an empty
line does nothing; Up recalls the previous line, also in the next run (the
history file under $XDG_STATE_HOME); text typed while an answer streams does
not reach the next prompt; Ctrl-C stops an answer and the chat goes on;
Ctrl-C at an empty prompt says how to leave; /system, /reset, /save (the JSON
file is read back), unknown commands; a tiny --max-session-tokens makes the
chat drop its oldest turns and keep going, and refuses a message too long to
ever fit. Without a terminal, stdout carries only the answers. A copy of the
model without its chat template is refused before the weights load.

What the conversation holds is always checked through /save's file, so every
check compares two things the program produced, never a copied answer.

A missing virtual environment, package or model is a failure that says what
to run, never a skip.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server", "e2e"))
try:
    import gguf
    import pexpect
    from test_server_e2e import FAILURES, check, find_model, run_test
except ImportError as e:  # pragma: no cover - environment problem
    print(f"FAIL: {e}: run scripts/setup (installs scripts/requirements-test.txt into .venv)")
    sys.exit(1)

# Generous: the CPU backend on a loaded 2-core machine manages a few tokens/s.
TIMEOUT = 300
PROMPT = "\r\n> "
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
UP = "\x1b[A"


def clean(text):
    return ANSI.sub("", text).replace("\r", "")


def words(text):
    return " ".join(text.split())


class Chat:
    """`cellm chat MODEL ARGS...` on a pseudo-terminal, up to its first prompt."""

    def __init__(self, ctx, *args):
        self.ctx = ctx
        self.child = pexpect.spawn(ctx.cellm, ["chat", ctx.model, *args], env=ctx.env,
                                   encoding="utf-8", codec_errors="replace", timeout=TIMEOUT,
                                   dimensions=(50, 1000))
        self.transcript = []
        self.child.logfile_read = self  # collects everything the program wrote
        self.child.expect_exact("Ctrl-D or /quit leaves")
        self.child.expect_exact("> ")

    # pexpect's logfile interface
    def write(self, data):
        self.transcript.append(data)

    def flush(self):
        pass

    def line(self, text):
        """Types `text` and Enter; returns what was shown up to the next prompt."""
        self.child.send(text + "\r")
        self.child.expect_exact(text)
        self.child.expect_exact(PROMPT)
        return clean(self.child.before)

    def save(self, name):
        """/save to a fresh file; returns its messages."""
        path = os.path.join(self.ctx.tmp, name)
        shown = self.line(f"/save {path}")
        if not check(os.path.exists(path), f"/save wrote {name} ({shown.strip()!r})"):
            return []
        with open(path, encoding="utf-8") as f:
            return json.load(f)["messages"]

    def quit_with_eof(self):
        self.child.sendeof()
        self.child.expect(pexpect.EOF)
        self.child.close()
        return self.child.exitstatus


class Context:
    def __init__(self, cellm, model, tmp):
        self.cellm = cellm
        self.model = model
        self.tmp = tmp
        self.state = os.path.join(tmp, "state")
        self.env = dict(os.environ, HOME=os.path.join(tmp, "home"), XDG_STATE_HOME=self.state,
                        TERM="xterm", LANG="C.UTF-8", OMP_WAIT_POLICY="passive")
        os.makedirs(self.env["HOME"], exist_ok=True)


def answered(shown, messages, index):
    """Whether messages[index] is an answer that was also shown on screen."""
    if index >= len(messages) or messages[index]["role"] != "assistant":
        return False
    content = words(messages[index]["content"])
    return bool(content) and content in words(shown)


# --------------------------------------------------------------------- tests

def t_answer_history_commands(ctx):
    """One run: answers, empty lines, Up, typing during an answer, commands."""
    chat = Chat(ctx, "--max-tokens", "40")
    question = "What is the capital of France?"
    first = chat.line(question)
    chat.child.send("\r")  # an empty line
    chat.child.expect_exact(PROMPT)
    check(clean(chat.child.before).strip() == "", "an empty line does nothing but show a new prompt")
    chat.child.send(UP)
    chat.child.expect_exact(question)
    chat.child.send("\r")
    chat.child.expect_exact(PROMPT)
    second = clean(chat.child.before)
    messages = chat.save("answers.json")
    check([m["role"] for m in messages] == ["user", "assistant", "user", "assistant"],
          f"two questions, two answers, nothing for the empty line ({[m['role'] for m in messages]})")
    check(len(messages) == 4 and messages[0]["content"] == question
          and messages[2]["content"] == question, "Up recalled and resent the previous question")
    check(answered(first, messages, 1) and answered(second, messages, 3),
          "both answers were shown and kept")

    # Typing while an answer is being made: the text must neither run the
    # next turn nor wait at the next prompt. It is typed as soon as the
    # question is sent, not after the first words: on a GPU a 40-token answer
    # can be over before a test sees its first words.
    story = "Write a long story about a dragon and a knight."
    chat.line("/reset")
    chat.child.send(story + "\r")
    chat.child.expect_exact(story)
    chat.child.send("LEAKED TEXT\r")
    chat.child.expect_exact(PROMPT)
    streamed = clean(chat.child.before)
    check("[cut at 40 tokens" in streamed,
          "the answer ran on to --max-tokens after the typing (so the typing came during it)")
    messages = chat.save("leak.json")
    check([m["content"] for m in messages if m["role"] == "user"] == [story],
          "text typed during the answer never became a message")
    check("LEAKED" not in clean("".join(chat.transcript)),
          "text typed during the answer was neither echoed nor left at the prompt")

    # /system, /reset, unknown commands.
    shown = chat.line("/system")
    check("no system message" in shown, f"/system without one says so ({shown.strip()!r})")
    chat.line("/system You answer in one short sentence.")
    shown = chat.line("/system")
    check("You answer in one short sentence." in shown, "/system shows the system message")
    chat.line("Name a color.")
    messages = chat.save("system.json")
    # The system message, the story's turn and the new one.
    check(len(messages) == 5 and messages[0] == {"role": "system",
                                                 "content": "You answer in one short sentence."}
          and messages[1]["content"] == story and messages[3]["content"] == "Name a color.",
          f"the system message leads the saved conversation ({len(messages)} messages)")
    shown = chat.line("/reset")
    check("new conversation" in shown, f"/reset says so ({shown.strip()!r})")
    messages = chat.save("reset.json")
    check(messages == [{"role": "system", "content": "You answer in one short sentence."}],
          f"/reset forgot the turns and kept the system message ({messages})")
    shown = chat.line("/frobnicate")
    check("unknown command /frobnicate" in shown, f"unknown commands are named ({shown.strip()!r})")
    chat.child.send("/quit\r")
    chat.child.expect(pexpect.EOF)
    chat.child.close()
    check(chat.child.exitstatus == 0, f"/quit leaves with status 0 ({chat.child.exitstatus})")
    history = os.path.join(ctx.state, "cellm", "chat_history")
    check(os.path.exists(history), f"the history is kept in {history}")


def t_interrupt_and_persisted_history(ctx):
    """Ctrl-C stops an answer and the chat goes on; history from the last run."""
    chat = Chat(ctx, "--max-tokens", "1000")
    # The previous run's last lines come back with Up.
    chat.child.send(UP)
    chat.child.expect_exact("/quit")
    chat.child.send(UP)
    chat.child.expect_exact("/frobnicate")
    check(True, "Up recalls the previous run's lines")
    chat.child.sendintr()  # abandons the recalled line
    chat.child.expect_exact(PROMPT)
    check("to leave" not in chat.child.before, "Ctrl-C on a typed line only abandons it")
    chat.child.sendintr()
    chat.child.expect_exact("to leave")
    chat.child.expect_exact(PROMPT)
    check(True, "Ctrl-C at an empty prompt says how to leave")

    story = "Write a very long story about a dragon who learns to sing."
    chat.child.send(story + "\r")
    chat.child.expect_exact(story)
    chat.child.expect(r"\w+\W+\w+")  # a few words of the answer
    chat.child.sendintr()
    index = chat.child.expect_exact(["[stopped", "[cut at"])
    check(index == 0, "Ctrl-C stopped the answer (not its end)")
    chat.child.expect_exact(PROMPT)
    shown = clean(chat.child.before)
    check(chat.child.isalive(), "the program is still alive after Ctrl-C")
    messages = chat.save("stopped.json")
    check(len(messages) == 2 and messages[0]["content"] == story
          and messages[1]["role"] == "assistant" and messages[1]["content"].strip() != "",
          "the partial answer stays in the conversation")
    stopped = clean("".join(chat.transcript))
    check(len(messages) == 2 and words(messages[1]["content"]) in words(stopped),
          "the kept partial answer is what was shown")
    again = chat.line("Now say hello.")
    messages = chat.save("after_stop.json")
    check(len(messages) == 4 and answered(again, messages, 3),
          "the next question after a stopped answer gets an answer")
    status = chat.quit_with_eof()
    check(status == 0, f"Ctrl-D leaves with status 0 ({status})")


def t_full_context_trims(ctx):
    """A tiny session: oldest turns go, the chat goes on, too long is refused."""
    # About 100 tokens a turn: two turns and the next question fill 300.
    chat = Chat(ctx, "--max-tokens", "24", "--max-session-tokens", "300", "--no-history")
    filler = " ".join(["apple banana cherry grape lemon mango"] * 8)
    asked = []
    notices = 0
    for i in range(6):
        question = f"Message {i}: which fruit comes first in: {filler}?"
        asked.append(question)
        shown = chat.line(question)
        if "[dropped the" in shown:
            notices += 1
            check(re.search(r"\[dropped the \d+ oldest turns? to fit the session's 300 tokens\]",
                            shown) is not None, f"turn {i}: the notice says how many ({shown[:120]!r})")
    check(notices >= 1, f"the oldest turns were dropped to fit ({notices} notices in 6 turns)")
    messages = chat.save("trimmed.json")
    users = [m["content"] for m in messages if m["role"] == "user"]
    check(0 < len(users) < len(asked) and users == asked[len(asked) - len(users):],
          f"the saved conversation is the newest {len(users)} of {len(asked)} questions, in order")
    check(messages[-1]["role"] == "assistant", "the last question was answered")

    too_long = "Summarize: " + " ".join(["apple banana cherry grape lemon mango"] * 120)
    chat.child.send(too_long + "\r")
    chat.child.expect_exact("does not fit")
    chat.child.expect_exact(PROMPT)
    check(True, "a message too long for the session is refused with a message")
    check(chat.save("after_refusal.json") == messages, "the refusal changed nothing")
    shown = chat.line("Name a fruit.")
    messages = chat.save("after_short.json")
    check(messages and messages[-2]["content"] == "Name a fruit." and answered(shown, messages,
                                                                              len(messages) - 1),
          "a shorter message afterwards gets an answer")
    check(chat.quit_with_eof() == 0, "the trimmed chat leaves with status 0")


def t_pipe(ctx):
    """Without a terminal: plain lines in, only the answers out."""
    path = os.path.join(ctx.tmp, "pipe.json")
    proc = subprocess.run([ctx.cellm, "chat", ctx.model, "--max-tokens", "16"],
                          input=f"Say hello.\n\n/save {path}\n", capture_output=True,
                          text=True, env=ctx.env, timeout=TIMEOUT)
    check(proc.returncode == 0, f"exit status 0 at end of input ({proc.returncode})")
    check(os.path.exists(path), "commands work from a pipe")
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        messages = json.load(f)["messages"]
    check(len(messages) == 2, f"one message per line, none for the empty line ({len(messages)})")
    check(proc.stdout == messages[-1]["content"] + "\n",
          f"stdout holds the answer and nothing else ({proc.stdout!r})")


def t_template_less_model(ctx):
    """A model without a chat template is refused before it is loaded."""
    path = os.path.join(ctx.tmp, "no-template.gguf")
    reader = gguf.GGUFReader(ctx.model)
    writer = gguf.GGUFWriter(path, arch=reader.fields["general.architecture"].contents())
    dropped = False
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue  # the writer writes these itself
        if field.name == "tokenizer.chat_template":
            dropped = True
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    check(dropped, "the source model has a chat template to drop")
    for t in reader.tensors:
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in reader.tensors:
        writer.write_tensor_data(t.data)
    writer.close()

    # The copy is still a model cellm runs, so the refusal is the template's.
    run = subprocess.run([ctx.cellm, "run", path, "-p", "Hello", "--max-tokens", "2"],
                         capture_output=True, text=True, env=ctx.env, timeout=TIMEOUT)
    check(run.returncode == 0, f"the copy runs with `cellm run` ({run.stderr[-300:]!r})")
    proc = subprocess.run([ctx.cellm, "chat", path], input="Hello\n", capture_output=True,
                          text=True, env=ctx.env, timeout=TIMEOUT)
    check(proc.returncode == 1, f"chat refuses it with status 1 ({proc.returncode})")
    check("no-template.gguf has no chat template" in proc.stderr and "cellm run" in proc.stderr,
          f"the refusal names the model and points to `cellm run` ({proc.stderr.strip()!r})")
    check("loading" not in proc.stderr, "the refusal comes before loading starts")
    check(proc.stdout == "", "nothing on stdout")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cellm", required=True, help="the cellm binary")
    ap.add_argument("--root", required=True, help="source tree (for models/)")
    args = ap.parse_args()
    model = find_model(args.root)
    with tempfile.TemporaryDirectory(prefix="cellm_chat_e2e_") as tmp:
        ctx = Context(os.path.abspath(args.cellm), model, tmp)
        # The second test reads the history the first one leaves.
        run_test(t_answer_history_commands, ctx)
        run_test(t_interrupt_and_persisted_history, ctx)
        run_test(t_full_context_trims, ctx)
        run_test(t_pipe, ctx)
        run_test(t_template_less_model, ctx)
    if FAILURES:
        print(f"\n{len(FAILURES)} check(s) failed:")
        for f in FAILURES:
            print("  -", f)
        sys.exit(1)
    print("\nall checks passed")


if __name__ == "__main__":
    main()
