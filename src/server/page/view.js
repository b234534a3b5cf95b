// The page's conversation view and messages: message bubbles, answers
// rendered as Markdown with their footers and Copy buttons, the error banner
// and the notices. Model text reaches the page only through
// cellmMarkdown.render or textContent.
"use strict";

const cellmView = (() => {
  const $ = (id) => document.getElementById(id);

  const messagesBox = $("messages");

  function nearBottom() {
    return messagesBox.scrollHeight - messagesBox.scrollTop - messagesBox.clientHeight < 80;
  }

  function scrollDown(force) {
    if (force || nearBottom()) messagesBox.scrollTop = messagesBox.scrollHeight;
  }

  function addBubble(role) {
    const div = document.createElement("div");
    div.className = "msg " + role;
    const body = document.createElement("div");
    body.className = "body";
    div.append(body);
    $("empty").hidden = true;
    messagesBox.append(div);
    scrollDown(true);
    return div;
  }

  function showMarkdown(bubble, text) {
    const body = bubble.querySelector(".body");
    body.replaceChildren(cellmMarkdown.render(text));
  }

  // The Markdown source of each answer bubble, for its Copy button.
  const answerText = new WeakMap();

  // The line under an answer: what happened (text) and a Copy button.
  function setFooter(bubble, text, raw) {
    bubble.querySelector(".foot")?.remove();
    const foot = document.createElement("div");
    foot.className = "foot";
    const info = document.createElement("span");
    info.textContent = text;
    foot.append(info);
    if (raw) {
      answerText.set(bubble, raw);
      const copy = document.createElement("button");
      copy.type = "button";
      copy.className = "copy-answer";
      copy.textContent = "Copy";
      copy.setAttribute("aria-label", "Copy the answer");
      foot.append(copy);
    }
    bubble.append(foot);
  }


  // Removes every message and shows the empty-conversation hint.
  function clear() {
    messagesBox.querySelectorAll(".msg").forEach((m) => m.remove());
    $("empty").hidden = false;
  }

  function showError(message) {
    $("banner-text").textContent = message;
    $("banner").hidden = false;
  }

  function hideError() {
    $("banner").hidden = true;
    $("banner-text").textContent = "";
  }

  function setNotice(id, text) {
    let note = document.getElementById(id);
    if (!text) {
      if (note) note.remove();
      return;
    }
    if (!note) {
      note = document.createElement("p");
      note.id = id;
      note.className = "notice";
      $("notices").append(note);
    }
    note.textContent = text;
  }

  // Copy buttons of code blocks and answers, delegated: answers are
  // re-rendered while they stream.
  messagesBox.addEventListener("click", async (e) => {
    const button = e.target.closest("button.copy, button.copy-answer");
    if (!button) return;
    const code = button.classList.contains("copy")
        ? button.closest(".code-block").querySelector("code").textContent
        : answerText.get(button.closest(".msg")) || "";
    let ok = false;
    try {
      await navigator.clipboard.writeText(code);
      ok = true;
    } catch (err) {
      // The clipboard API needs a secure context (http://localhost is one,
      // a LAN address is not): fall back to a selected textarea.
      const area = document.createElement("textarea");
      area.value = code;
      area.setAttribute("readonly", "");
      area.style.position = "fixed";
      area.style.opacity = "0";
      document.body.append(area);
      area.select();
      ok = document.execCommand("copy");
      area.remove();
    }
    button.textContent = ok ? "Copied" : "Copy failed";
    setTimeout(() => { button.textContent = "Copy"; }, 1500);
  });

  return { scrollDown, addBubble, showMarkdown, setFooter, clear, showError, hideError,
           setNotice };
})();
