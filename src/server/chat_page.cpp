#include "server/chat_page.h"

namespace cellm::server {
namespace {

// Element ids (#messages, #prompt, #send, #status) and the data-state
// attribute of assistant bubbles ("streaming", "done", "error") are what the
// browser test drives; keep them stable.
constexpr std::string_view kPage = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>cellm chat</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 0; display: flex; flex-direction: column;
         height: 100vh; background: #f5f5f7; }
  header { padding: 0.6rem 1rem; background: #20232a; color: #fff; display: flex; gap: 1rem;
           align-items: baseline; }
  header small { color: #aab; }
  #messages { flex: 1; overflow-y: auto; padding: 1rem; }
  .msg { max-width: 46rem; margin: 0.4rem 0; padding: 0.5rem 0.8rem; border-radius: 0.6rem;
         white-space: pre-wrap; line-height: 1.4; }
  .user { background: #d8e6ff; margin-left: auto; }
  .assistant { background: #fff; border: 1px solid #ddd; }
  .assistant[data-state="error"] { border-color: #c33; color: #a11; }
  form { display: flex; gap: 0.5rem; padding: 0.8rem 1rem; background: #fff; border-top: 1px solid #ddd; }
  textarea { flex: 1; resize: none; font: inherit; padding: 0.4rem; }
  button { font: inherit; padding: 0 1.2rem; }
</style>
</head>
<body>
<header><strong>cellm</strong><small id="status">connecting…</small></header>
<div id="messages"></div>
<form id="form">
  <textarea id="prompt" rows="2" placeholder="Say something (Enter sends, Shift+Enter breaks the line)"></textarea>
  <button id="send" type="submit">Send</button>
</form>
<script>
"use strict";
const history = [];
let model = "";
const $ = (id) => document.getElementById(id);

function bubble(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  div.textContent = text;
  $("messages").appendChild(div);
  $("messages").scrollTop = $("messages").scrollHeight;
  return div;
}

async function loadModel() {
  try {
    const r = await fetch("/v1/models");
    if (!r.ok) { $("status").textContent = "model loading…"; setTimeout(loadModel, 1000); return; }
    const body = await r.json();
    model = body.data[0].id;
    $("status").textContent = model;
  } catch (e) {
    $("status").textContent = "server unreachable";
    setTimeout(loadModel, 2000);
  }
}

// Reads "data: ..." events from a fetch body, calling onEvent with each JSON
// payload until "[DONE]".
async function readEvents(response, onEvent) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of block.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") return;
        onEvent(JSON.parse(data));
      }
    }
  }
}

async function send(text) {
  history.push({ role: "user", content: text });
  bubble("user", text);
  const out = bubble("assistant", "");
  out.dataset.state = "streaming";
  $("send").disabled = true;
  let answer = "";
  try {
    const response = await fetch("/v1/chat/completions", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ model, messages: history, stream: true, max_tokens: 256,
                             temperature: 0.3 }),
    });
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      throw new Error((body.error && body.error.message) || response.statusText);
    }
    await readEvents(response, (event) => {
      if (event.error) throw new Error(event.error.message);
      for (const choice of event.choices || []) {
        const piece = choice.delta && choice.delta.content;
        if (piece) {
          answer += piece;
          out.textContent = answer;
          $("messages").scrollTop = $("messages").scrollHeight;
        }
      }
    });
    history.push({ role: "assistant", content: answer });
    out.dataset.state = "done";
  } catch (e) {
    out.textContent = answer + "\n[error: " + e.message + "]";
    out.dataset.state = "error";
    history.pop();
  } finally {
    $("send").disabled = false;
  }
}

$("form").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("prompt").value.trim();
  if (!text || $("send").disabled) return;
  $("prompt").value = "";
  send(text);
});
$("prompt").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("form").requestSubmit(); }
});
loadModel();
</script>
</body>
</html>
)HTML";

}  // namespace

std::string_view chat_page_html() {
  return kPage;
}

}  // namespace cellm::server
