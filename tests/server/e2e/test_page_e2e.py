#!/usr/bin/env python3
"""End-to-end tests of the chat page that `cellm serve` serves at "/", in
headless Chromium (selenium) against SmolLM2-135M on 127.0.0.1.

Group (one ctest):
  browser  an answer streams in; Shift+Enter and Enter; the Markdown renderer
           (checked on fixed text in the browser, <script> escaped); Stop
           keeps the partial answer and the page goes on; New chat; settings
           used in requests and kept over a reload; the context gauge agrees
           with /tokenize; old turns are left out, with a notice, when the
           context is small; server errors in a banner that stays in view; a
           model without a chat template falls back to plain completions; a
           server started with --api-key gets its key asked for, sent, kept.

A screenshot of each state goes to $CELLMDEV_E2E_ARTIFACTS, or else to a new
temporary folder whose path is printed. A missing package, browser or model
is a failure that says what to run, never a skip.
"""
import os
import re
import sys
import tempfile
import time

import requests

import test_server_e2e as base
from test_server_e2e import MODEL_NAME, Server, check, run_test

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError as e:  # pragma: no cover - environment problem
    print(f"FAIL: {e}: run scripts/setup (installs selenium into .venv)")
    sys.exit(1)

# Generous: the CPU backend on a shared 2-core machine.
ANSWER_WAIT_S = 300
FINAL_STATES = ("done", "error", "stopped")


class Page:
    """The chat page in one headless Chromium, plus where screenshots go."""

    def __init__(self, url, artifacts, prefix):
        chromium = next((p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser")
                         if os.path.exists(p)), None)
        driver_bin = "/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else None
        if not chromium or not driver_bin:
            print("FAIL: chromium and chromium-driver are missing: run scripts/setup "
                  "(Debian packages chromium chromium-driver)")
            sys.exit(1)
        opts = Options()
        opts.binary_location = chromium
        for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                  "--window-size=1100,820"):
            opts.add_argument(a)
        self.b = webdriver.Chrome(service=Service(driver_bin), options=opts)
        self.url = url
        self.artifacts = artifacts
        self.prefix = prefix
        self.shots = 0

    def open(self, wait_model=True):
        # Copy buttons are checked by reading the clipboard back.
        self.b.execute_cdp_cmd("Browser.grantPermissions", {
            "origin": self.url, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})
        self.b.get(self.url + "/")
        if wait_model:
            WebDriverWait(self.b, 60).until(lambda b: self.el("status").text == MODEL_NAME)
        # Every request body the page sends, to check what it asked for.
        self.b.execute_script("""
            window.__sent = [];
            const realFetch = window.fetch;
            window.__auth = [];
            window.fetch = (url, opts) => {
              if (opts && opts.body)
                window.__sent.push({url: String(url), body: JSON.parse(opts.body)});
              window.__auth.push((opts && opts.headers && opts.headers.Authorization) || null);
              return realFetch(url, opts);
            };""")

    def el(self, id_):
        return self.b.find_element(By.ID, id_)

    def js(self, script, *args):
        return self.b.execute_script(script, *args)

    def shot(self, name):
        self.shots += 1
        path = os.path.join(self.artifacts, f"{self.prefix}{self.shots:02d}-{name}.png")
        self.b.save_screenshot(path)
        print(f"  shot  {path}")

    def sent(self, path):
        return [s["body"] for s in self.js("return window.__sent;") if s["url"] == path]

    def settings(self, **values):
        """Types into the settings fields (ids: temperature, top-p, max-tokens, system-prompt)."""
        if self.el("settings").get_attribute("hidden") is not None:
            self.el("settings-toggle").click()
        for id_, value in values.items():
            box = self.el(id_.replace("_", "-"))
            box.send_keys(Keys.CONTROL, "a")
            box.send_keys(Keys.DELETE)
            if value != "":
                box.send_keys(str(value))
        self.el("settings-toggle").click()

    def assistants(self):
        return self.b.find_elements(By.CSS_SELECTOR, ".msg.assistant")

    def send(self, text=""):
        """Types `text` (if any) and presses Enter; returns the new answer's
        bubble once it is final."""
        before = len(self.assistants())
        box = self.el("prompt")
        if text:
            box.send_keys(text)
        box.send_keys(Keys.ENTER)
        WebDriverWait(self.b, 30).until(lambda b: len(self.assistants()) == before + 1)
        bubble = self.assistants()[before]
        WebDriverWait(self.b, ANSWER_WAIT_S).until(
            lambda b: bubble.get_attribute("data-state") in FINAL_STATES)
        return bubble

    def copy(self, button):
        """Clicks a Copy button; returns its label after and the clipboard's text."""
        self.js("return navigator.clipboard.writeText('(nothing copied)');")
        button.click()
        WebDriverWait(self.b, 10).until(lambda b: button.text != "Copy")
        text = self.b.execute_async_script(
            "const done = arguments[0];"
            "navigator.clipboard.readText().then(done, (e) => done('clipboard error: ' + e));")
        return button.text, text

    def fill(self):
        m = re.fullmatch(r"(\d+) / (\d+) tokens", self.el("fill").text)
        return (int(m.group(1)), int(m.group(2))) if m else None

    def wait_fill(self, want):
        try:
            WebDriverWait(self.b, 60).until(lambda b: self.fill() == want)
        except Exception:
            pass
        return self.fill()

    def banner(self):
        shown = self.el("banner").get_attribute("hidden") is None
        return self.el("banner-text").text if shown else None

    def check_console(self):
        """No script error on the page (refused requests, logged as network
        errors, are expected)."""
        errors = [e["message"] for e in self.b.get_log("browser")
                  if e["level"] == "SEVERE" and e.get("source") != "network"]
        check(not errors, f"no script errors on the {self.prefix.rstrip('-')} page ({errors[:3]})")

    def quit(self):
        self.b.quit()


def tokenize(srv, **body):
    r = requests.post(srv.url + "/tokenize", json=body, timeout=60)
    r.raise_for_status()
    return r.json()


# ------------------------------------------------------------------ checks

def t_streams_answer(page, srv):
    page.settings(temperature=0, max_tokens=48, system_prompt="")
    check(page.el("messages").get_attribute("role") == "log", "the conversation is a log region")
    check(page.b.find_element(By.CSS_SELECTOR, "label[for='prompt']") is not None,
          "the message box has a label")
    # The lengths the answer shows while it streams, and whether it is a
    # live region meanwhile.
    page.js("""
        window.__lengths = new Set(); window.__live = false;
        new MutationObserver(() => {
          const out = document.querySelector(".assistant[data-state='streaming']");
          if (!out) return;
          if (out.getAttribute("aria-live") === "polite") window.__live = true;
          const n = out.querySelector(".body").textContent.length;
          if (n > 0) window.__lengths.add(n);
        }).observe(document.getElementById('messages'),
                   {childList: true, subtree: true, characterData: true});""")
    box = page.el("prompt")
    box.send_keys("Name three colours.")
    box.send_keys(Keys.SHIFT, Keys.ENTER)
    box.send_keys("Answer in one sentence.")
    check(box.get_attribute("value") == "Name three colours.\nAnswer in one sentence.",
          "Shift+Enter breaks the line instead of sending")
    check(not page.b.find_elements(By.CSS_SELECTOR, ".msg.user"), "nothing was sent yet")
    box.send_keys(Keys.ENTER)
    WebDriverWait(page.b, 30).until(lambda b: page.assistants())
    bubble = page.assistants()[0]
    WebDriverWait(page.b, ANSWER_WAIT_S).until(
        lambda b: bubble.get_attribute("data-state") in FINAL_STATES)
    check(bubble.get_attribute("data-state") == "done", "the answer completed without error")
    text = bubble.find_element(By.CSS_SELECTOR, ".body").text
    check(len(text.strip()) > 0, f"the answer has text ({text!r})")
    lengths = page.js("return [...window.__lengths];")
    check(len(lengths) >= 2, f"the answer grew while it streamed (lengths seen: {lengths})")
    check(page.js("return window.__live;"), "the streaming answer is an aria-live region")
    check(bubble.get_attribute("aria-busy") == "false", "the finished answer is not busy")
    user = page.b.find_element(By.CSS_SELECTOR, ".msg.user").text
    check(user == "Name three colours.\nAnswer in one sentence.",
          f"Enter sent the two lines ({user!r})")
    check(box.get_attribute("value") == "", "the message box is empty again")
    check(page.banner() is None, "no error is shown")
    page.shot("answer")


MARKDOWN = """# Plan

Some **bold**, *italic*, `inline <code>` and ~~gone~~ text.
A second line.

- first item
- second with [a link](https://example.com/docs?a=1)
  - nested item
1. one
2. two

```python
print("<b>not bold</b>")
```

| Left | Right |
|:-----|------:|
| a    | `1|2` |

<script>window.__pwned = 1</script> <img src=x onerror="window.__pwned = 2">
[bad](javascript:window.__pwned=3) and https://example.org/x."""


def t_markdown(page, srv):
    r = page.js("""
        const box = document.createElement("div");
        box.append(cellmMarkdown.render(arguments[0]));
        const q = (s) => [...box.querySelectorAll(s)];
        return {
          h1: q("h1").map((e) => e.textContent),
          strong: q("strong").map((e) => e.textContent),
          em: q("em").map((e) => e.textContent),
          del: q("del").map((e) => e.textContent),
          inline: q("p code").map((e) => e.textContent),
          br: q("p br").length,
          ul: q("ul > li").length, nested: q("ul li ul > li").map((e) => e.textContent),
          ol: q("ol > li").map((e) => e.textContent),
          pre: q("pre code").map((e) => e.textContent),
          copy: q(".code-block button.copy").length,
          th: q("table th").map((e) => [e.textContent, e.style.textAlign]),
          td: q("table td").map((e) => e.textContent),
          links: q("a").map((e) => [e.textContent, e.getAttribute("href"), e.rel, e.target]),
          scripts: q("script, img, iframe, [onerror]").length,
          text: box.textContent,
        };""", MARKDOWN)
    check(r["h1"] == ["Plan"], f"a heading renders ({r['h1']})")
    check(r["strong"] == ["bold"] and r["em"] == ["italic"] and r["del"] == ["gone"],
          f"bold, italic and strikethrough render ({r['strong']}, {r['em']}, {r['del']})")
    check(r["inline"] == ["inline <code>"], f"inline code keeps its text ({r['inline']})")
    check(r["br"] >= 1, "a single newline in a paragraph is a line break")
    check(r["ul"] == 3 and r["nested"] == ["nested item"], f"lists nest ({r['ul']}, {r['nested']})")
    check(r["ol"] == ["one", "two"], f"an ordered list renders ({r['ol']})")
    check(r["pre"] == ['print("<b>not bold</b>")'], f"a fenced block keeps its text ({r['pre']})")
    check(r["copy"] == 1, "the code block has a copy button")
    check(r["th"] == [["Left", ""], ["Right", "right"]] and r["td"] == ["a", "1|2"],
          f"a table renders with its alignment ({r['th']}, {r['td']})")
    hrefs = [link[1] for link in r["links"]]
    check(hrefs == ["https://example.com/docs?a=1", "https://example.org/x"],
          f"only http(s) links become links ({hrefs})")
    check(all(link[2] == "noopener noreferrer nofollow" and link[3] == "_blank"
              for link in r["links"]), "links open apart from the page (rel noopener)")
    check(r["scripts"] == 0, "no script, image or handler comes out of the text")
    check("<script>window.__pwned = 1</script>" in r["text"], "<script> shows as text")
    check(page.js("return window.__pwned === undefined;"), "nothing in the text ran")
    # The same in an answer bubble, for the screenshot and the copy button.
    page.js("""
        const msg = document.createElement("div");
        msg.className = "msg assistant"; msg.dataset.state = "done"; msg.id = "md-sample";
        const body = document.createElement("div"); body.className = "body";
        body.append(cellmMarkdown.render(arguments[0])); msg.append(body);
        document.getElementById("messages").append(msg);
        msg.scrollIntoView();""", MARKDOWN)
    label, copied = page.copy(page.b.find_element(By.CSS_SELECTOR, "#md-sample button.copy"))
    check(label == "Copied" and copied == 'print("<b>not bold</b>")',
          f"the code block's copy button copies its code ({label!r}, {copied!r})")
    page.shot("markdown")
    page.b.execute_cdp_cmd("Emulation.setEmulatedMedia", {
        "features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    check(page.js("return matchMedia('(prefers-color-scheme: dark)').matches;"),
          "the browser shows the page in dark mode")
    page.shot("markdown-dark")
    page.b.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
    page.js("document.getElementById('md-sample').remove();")


def t_stop_and_new_chat(page, srv):
    page.el("new-chat").click()
    # Greedy, so the long answer is the same on every run.
    page.settings(temperature=0, max_tokens=400)
    box = page.el("prompt")
    box.send_keys("Write a very long story about a dragon who learns to bake bread.")
    box.send_keys(Keys.ENTER)
    WebDriverWait(page.b, 30).until(lambda b: page.assistants())
    bubble = page.assistants()[0]
    body = bubble.find_element(By.CSS_SELECTOR, ".body")
    WebDriverWait(page.b, ANSWER_WAIT_S).until(
        lambda b: len(body.text) >= 40 or bubble.get_attribute("data-state") != "streaming")
    check(bubble.get_attribute("data-state") == "streaming", "the long answer is streaming")
    check(page.el("stop").is_displayed() and not page.el("send").is_displayed(),
          "while it streams, Stop replaces Send")
    sent = page.sent("/v1/chat/completions")[-1]["messages"]
    n_prompt = tokenize(srv, messages=sent)["count"]
    check(page.fill() is not None and page.fill()[0] == n_prompt,
          f"while it streams the gauge shows the prompt's tokens ({page.fill()} vs {n_prompt})")
    page.shot("streaming")
    page.el("stop").click()
    WebDriverWait(page.b, 30).until(lambda b: bubble.get_attribute("data-state") != "streaming")
    check(bubble.get_attribute("data-state") == "stopped", "Stop ends the answer as stopped")
    partial = body.text
    check(len(partial) >= 40, f"the partial answer stays ({len(partial)} chars)")
    foot = bubble.find_element(By.CSS_SELECTOR, ".foot").text
    check("stopped" in foot, f"the answer is marked stopped ({foot!r})")
    check(page.el("send").is_displayed() and not page.el("stop").is_displayed(),
          "after Stop, Send is back")
    check(page.banner() is None, "stopping is not an error")
    # The server cancels the abandoned stream.
    deadline = time.time() + 60
    while time.time() < deadline and srv.metrics()["cellm:num_requests_running"] > 0:
        time.sleep(0.2)
    check(srv.metrics()["cellm:num_requests_running"] == 0, "the server stopped generating")
    page.shot("stopped")

    # The page goes on: the next message is answered, after the partial one.
    page.settings(max_tokens=12)
    nxt = page.send("Give the dragon a name.")
    check(nxt.get_attribute("data-state") == "done", "after Stop the next message is answered")
    check(body.text == partial, "the stopped answer did not change afterwards")
    last = page.sent("/v1/chat/completions")[-1]["messages"]
    check([m["role"] for m in last] == ["user", "assistant", "user"] and
          last[1]["content"].strip() != "",
          f"the partial answer is part of the conversation ({[m['role'] for m in last]})")

    page.el("new-chat").click()
    check(page.b.find_elements(By.CSS_SELECTOR, ".msg") == [], "New chat clears the messages")
    check(page.el("empty").is_displayed(), "New chat shows the empty state")
    ctx = tokenize(srv, prompt="x")["max_model_len"]
    check(page.wait_fill((0, ctx)) == (0, ctx), f"New chat empties the gauge ({page.fill()})")
    page.settings(max_tokens=8)
    page.send("Hello!")
    first = page.sent("/v1/chat/completions")[-1]["messages"]
    check(first == [{"role": "user", "content": "Hello!"}],
          f"after New chat the conversation starts over ({first})")
    page.shot("new-chat")
    page.el("new-chat").click()


def t_settings_persist(page, srv):
    page.settings(temperature=0.25, top_p=0.8, max_tokens=20,
                  system_prompt="You are a terse assistant.")
    page.open()  # a fresh load of the page
    page.el("settings-toggle").click()
    got = {i: page.el(i).get_attribute("value")
           for i in ("temperature", "top-p", "max-tokens", "system-prompt")}
    check(got == {"temperature": "0.25", "top-p": "0.8", "max-tokens": "20",
                  "system-prompt": "You are a terse assistant."},
          f"the settings are kept over a reload ({got})")
    page.shot("settings")
    page.el("settings-toggle").click()
    bubble = page.send("Say hi.")
    check(bubble.get_attribute("data-state") == "done", "an answer with the saved settings")
    body = page.sent("/v1/chat/completions")[-1]
    check(body.get("temperature") == 0.25 and body.get("top_p") == 0.8 and
          body.get("max_tokens") == 20, f"the request uses them ({body})")
    check(body["messages"][0] == {"role": "system", "content": "You are a terse assistant."},
          "the system prompt leads the messages")
    page.el("new-chat").click()


def t_fill_gauge(page, srv):
    system = "You answer in one short sentence."
    page.settings(temperature=0, max_tokens=24, system_prompt=system)
    question = "What is the capital of France?"
    bubble = page.send(question)
    check(bubble.get_attribute("data-state") == "done", "the question is answered")
    sent = page.sent("/v1/chat/completions")[-1]
    # The same greedy request again, not streamed: the answer the page holds.
    again_body = {k: v for k, v in sent.items() if k not in ("stream", "stream_options")}
    again = requests.post(srv.url + "/v1/chat/completions", timeout=600, json=again_body).json()
    answer = again["choices"][0]["message"]["content"]
    want = tokenize(srv, messages=[{"role": "system", "content": system},
                                   {"role": "user", "content": question},
                                   {"role": "assistant", "content": answer}])
    expected = (want["count"], want["max_model_len"])
    got = page.wait_fill(expected)
    check(got == expected, f"the gauge shows /tokenize's count of the conversation "
                           f"({got} vs {expected})")
    label, copied = page.copy(bubble.find_element(By.CSS_SELECTOR, ".copy-answer"))
    check(label == "Copied" and copied == answer,
          f"the answer's Copy button copies its Markdown source ({copied!r} vs {answer!r})")
    meter = page.el("fill-meter")
    check(float(meter.get_attribute("value")) == expected[0] and
          float(meter.get_attribute("max")) == expected[1], "the meter agrees")
    # Editing the system prompt recounts.
    page.settings(system_prompt="Be brief.")
    want2 = tokenize(srv, messages=[{"role": "system", "content": "Be brief."},
                                    {"role": "user", "content": question},
                                    {"role": "assistant", "content": answer}])
    expected2 = (want2["count"], want2["max_model_len"])
    got2 = page.wait_fill(expected2)
    check(got2 == expected2, f"a new system prompt is counted ({got2} vs {expected2})")
    page.shot("fill")
    page.settings(system_prompt="")
    page.el("new-chat").click()


def t_trims_old_turns(page, srv):
    """The server's context is 512 tokens: three ~190-token messages cannot
    all fit, so the page leaves the oldest turn out and says so."""
    ctx = tokenize(srv, prompt="x")["max_model_len"]
    check(ctx == 512, f"the server runs with a 512-token context ({ctx})")
    page.settings(temperature=0, max_tokens=16, system_prompt="You are helpful.")
    filler = "the quick brown fox jumps over the lazy dog and " * 16
    long_messages = [f"Note {i}: {filler}Reply with one word." for i in range(3)]
    n_one = tokenize(srv, messages=[{"role": "user", "content": long_messages[0]}])["count"]
    check(3 * n_one > ctx, f"three messages ({n_one} tokens each) exceed the context")
    states = [page.send(m).get_attribute("data-state") for m in long_messages]
    check(states == ["done"] * 3, f"every message is answered ({states})")
    check(page.banner() is None, f"no error is shown ({page.banner()})")
    notes = page.b.find_elements(By.ID, "notice-trim")
    text = notes[0].text if notes else ""
    m = re.match(r"(\d+) older messages? (?:was|were) left out to fit the context", text)
    check(m is not None, f"a notice says older messages were left out ({text!r})")
    dropped = int(m.group(1)) if m else -1
    dimmed = len(page.b.find_elements(By.CSS_SELECTOR, ".msg.trimmed"))
    check(dropped >= 2 and dropped % 2 == 0 and dimmed == dropped,
          f"whole turns are left out and dimmed ({dropped} said, {dimmed} dimmed)")
    last = page.sent("/v1/chat/completions")[-1]
    roles = [x["role"] for x in last["messages"]]
    contents = [x["content"] for x in last["messages"]]
    check(roles[0] == "system" and contents[0] == "You are helpful.", "the system prompt is kept")
    check(long_messages[0] not in contents and contents[-1] == long_messages[2],
          "the oldest message is left out, the newest is sent")
    n_sent = tokenize(srv, messages=last["messages"])["count"]
    check(n_sent + last["max_tokens"] <= ctx,
          f"what was sent fits ({n_sent} + {last['max_tokens']})")
    fill = page.fill()
    check(fill is not None and fill[0] <= ctx, f"the gauge stays within the context ({fill})")
    page.shot("trimmed")
    # A single message larger than the context cannot be trimmed to fit: the
    # page says so before sending anything, and gives the text back.
    huge = "Summarise: " + filler * 4
    chats_before = len(page.sent("/v1/chat/completions"))
    page.js("document.getElementById('prompt').value = arguments[0];", huge)
    failed = page.send()
    text = page.banner() or ""
    check(failed.get_attribute("data-state") == "error" and "too long for the context" in text,
          f"a message larger than the context is refused with a reason ({text!r})")
    check(len(page.sent("/v1/chat/completions")) == chats_before, "nothing was sent for it")
    check(page.el("prompt").get_attribute("value") == huge.strip(),
          "the long message is given back")
    page.js("document.getElementById('prompt').value = '';")
    page.el("new-chat").click()
    check(not page.b.find_elements(By.ID, "notice-trim"), "New chat clears the notice")
    page.settings(system_prompt="")


def t_error_banner(page, srv):
    page.settings(temperature=3, max_tokens=8)
    expected = requests.post(srv.url + "/v1/chat/completions", timeout=60, json={
        "model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}],
        "temperature": 3}).json()["error"]["message"]
    bubble = page.send("Hi there")
    check(bubble.get_attribute("data-state") == "error", "the answer bubble shows the failure")
    text = page.banner()
    check(text is not None and "400" in text and expected in text,
          f"the banner shows the server's message ({text!r}, server: {expected!r})")
    check(page.el("prompt").get_attribute("value") == "Hi there",
          "the message is given back for another try")
    # The banner is outside the scrolling conversation: in view wherever it scrolls.
    for where in ("0", "messages.scrollHeight"):
        in_view = page.js(f"""
            const messages = document.getElementById('messages');
            messages.scrollTop = {where};
            const r = document.getElementById('banner').getBoundingClientRect();
            return r.height > 0 && r.top >= 0 && r.bottom <= window.innerHeight;""")
        check(in_view, f"the banner stays in view (conversation scrolled to {where})")
    page.shot("error")
    page.el("banner-close").click()
    check(page.banner() is None, "the banner can be dismissed")
    page.settings(temperature=0)
    retry = page.send()  # the given-back message
    check(retry.get_attribute("data-state") == "done",
          "with a valid temperature the message is answered")
    check(page.banner() is None, "no error after the fix")
    page.el("new-chat").click()


API_KEY = "page-test-key-4711"


def t_api_key(page, srv):
    """Started with --api-key: the page asks for the key, uses it, keeps it."""
    missing = requests.get(srv.url + "/v1/models", timeout=60)
    check(missing.status_code == 401, f"the server wants a key ({missing.status_code})")
    page.open(wait_model=False)
    WebDriverWait(page.b, 60).until(lambda b: page.el("status").text == "API key needed")
    text = page.banner() or ""
    check("401" in text and base.error_of(missing)["message"] in text,
          f"the banner shows the server's message ({text!r})")
    check(page.el("settings").is_displayed() and
          page.b.switch_to.active_element == page.el("api-key"),
          "the settings open on the API key field")
    check(not page.el("send").is_enabled(), "nothing can be sent without the key")
    page.shot("api-key-needed")
    page.el("api-key").send_keys("wrong-key")
    WebDriverWait(page.b, 60).until(lambda b: "not valid" in (page.banner() or ""))
    check(page.el("status").text == "API key needed", "a wrong key is refused")
    box = page.el("api-key")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(API_KEY)
    WebDriverWait(page.b, 60).until(lambda b: page.el("status").text == MODEL_NAME)
    check(page.banner() is None, "with the right key the error goes away")
    page.el("settings-toggle").click()
    page.settings(temperature=0, max_tokens=8, system_prompt="")
    bubble = page.send("Hello!")
    check(bubble.get_attribute("data-state") == "done", "a message is answered with the key")
    auth = page.js("return window.__auth;")
    check(auth and all(a == "Bearer " + API_KEY for a in auth[-3:]),
          f"the page sends the key with its requests ({auth[-3:]})")
    page.open()  # reloaded: the key was kept
    check(page.el("api-key").get_attribute("value") == API_KEY, "the key is kept over a reload")


def strip_chat_template(src, dst):
    """Copies a GGUF file without its tokenizer.chat_template key."""
    try:
        import gguf
    except ImportError as e:
        print(f"FAIL: {e}: run scripts/setup (installs gguf into .venv)")
        sys.exit(1)
    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(dst, arch=arch)
    align = reader.fields.get("general.alignment")
    if align is not None:
        writer.data_alignment = align.contents()
    dropped = False
    for field in reader.fields.values():
        if field.name == "general.architecture" or field.name.startswith("GGUF."):
            continue
        if field.name == "tokenizer.chat_template":
            dropped = True
            continue
        sub_type = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), field.types[0], sub_type=sub_type)
    for t in reader.tensors:
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in reader.tensors:
        writer.write_tensor_data(t.data)
    writer.close()
    return dropped


def t_no_chat_template(page, srv):
    chat = requests.post(srv.url + "/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
    check(chat.status_code == 400 and "chat template" in base.error_of(chat).get("message", ""),
          f"the server refuses chat for this model ({chat.status_code})")
    page.settings(temperature=0, max_tokens=12, system_prompt="")
    first = page.send("The capital of France is")
    check(first.get_attribute("data-state") == "done",
          "the first message is answered as a completion")
    check(page.banner() is None, f"no error banner ({page.banner()})")
    notes = [n.text for n in page.b.find_elements(By.CSS_SELECTOR, "#notices .notice")
             if "chat template" in n.text]
    check(len(notes) == 1 and "completion" in notes[0], f"the page says so once ({notes})")
    check(page.el("mode").is_displayed(), "the header shows completion mode")
    comps = page.sent("/v1/completions")
    check(len(comps) == 1 and comps[0]["prompt"] == "The capital of France is",
          f"it sent the text as a plain completion ({comps})")
    answer = first.find_element(By.CSS_SELECTOR, ".body").text
    check(len(answer.strip()) > 0, f"the completion has text ({answer!r})")
    second = page.send("Its largest museum is")
    check(second.get_attribute("data-state") == "done", "the next message is a completion too")
    chats = page.sent("/v1/chat/completions")
    check(len(chats) <= 1, f"chat is not tried again ({len(chats)} chat requests)")
    comps = page.sent("/v1/completions")
    check(len(comps) == 2 and comps[1]["prompt"].startswith("The capital of France is") and
          comps[1]["prompt"].endswith("Its largest museum is"),
          f"the second completion continues the text so far ({comps[-1]['prompt']!r})")
    notes = [n for n in page.b.find_elements(By.CSS_SELECTOR, "#notices .notice")
             if "chat template" in n.text]
    check(len(notes) == 1, "still one notice")
    n_prompt = tokenize(srv, prompt=comps[1]["prompt"])["count"]
    # The gauge recounts after the answer lands (an async /tokenize): wait for it.
    try:
        WebDriverWait(page.b, 60).until(lambda b: (page.fill() or (0, 0))[0] > n_prompt)
    except Exception:
        pass
    fill = page.fill()
    check(fill is not None and fill[0] > n_prompt,
          f"the gauge counts the text so far as a prompt ({fill}, sent {n_prompt})")
    page.shot("no-template")


# ------------------------------------------------------------------- group

def group_browser(binary, model, artifacts):
    srv = Server(binary, model, "--max-sessions", "4", "--max-session-tokens", "512")
    page = None
    try:
        srv.wait_ready()
        page = Page(srv.url, artifacts, "chat-")
        page.open()
        check(True, "the page found the model")
        for t in (t_streams_answer, t_markdown, t_stop_and_new_chat, t_settings_persist,
                  t_fill_gauge, t_trims_old_turns, t_error_banner):
            run_test(t, page, srv)
    finally:
        if page is not None:
            page.check_console()
            page.quit()
        srv.kill()

    srv = Server(binary, model, "--max-sessions", "4", "--max-session-tokens", "512",
                 "--api-key", API_KEY)
    page = None
    try:
        srv.wait_ready()
        page = Page(srv.url, artifacts, "key-")
        run_test(t_api_key, page, srv)
    finally:
        if page is not None:
            page.check_console()
            page.quit()
        srv.kill()

    with tempfile.TemporaryDirectory(prefix="cellm-notemplate-") as tmp:
        plain = os.path.join(tmp, "smollm2-no-template.gguf")
        check(strip_chat_template(model, plain), "the copied model lost its chat template")
        srv = Server(binary, plain, "--max-sessions", "4", "--max-session-tokens", "512")
        page = None
        try:
            srv.wait_ready()
            page = Page(srv.url, artifacts, "plain-")
            page.open()
            run_test(t_no_chat_template, page, srv)
        finally:
            if page is not None:
                page.check_console()
                page.quit()
            srv.kill()


def main():
    def browser(binary, model):
        artifacts = (os.environ.get("CELLMDEV_E2E_ARTIFACTS") or
                     tempfile.mkdtemp(prefix="cellm-page-e2e-"))
        os.makedirs(artifacts, exist_ok=True)
        print(f"screenshots: {artifacts}")
        group_browser(binary, model, artifacts)
    base.e2e_main({"browser": browser})


if __name__ == "__main__":
    main()
