// The chat page's behaviour: settings, sending and streaming, stop, new
// chat, the context gauge and trimming, and the fallback to plain
// completions for a model without a chat template. Drawing is view.js's,
// requests api.js's.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const { scrollDown, addBubble, showMarkdown, setFooter, showError, hideError, setNotice } =
      cellmView;
  const { describe, isNoTemplate, readEvents } = cellmApi;
  const SETTINGS_KEY = "cellm.chat.settings";
  // Kept apart from the settings so "Defaults" leaves it alone.
  const API_KEY_KEY = "cellm.chat.apiKey";
  const DEFAULTS = { temperature: 0.7, top_p: 0.95, max_tokens: 512, system: "" };

  // The conversation: {role, content, bubble}. Messages before `keepFrom`
  // were left out to fit the context; they stay on screen, dimmed.
  let conversation = [];
  let keepFrom = 0;
  let model = "";
  let contextSize = 0;
  let mode = "chat";  // "completion" once the model turns out to have no chat template
  let controller = null;  // the AbortController of the running request
  let fillTimer = 0;
  let fillRound = 0;  // only the latest count is shown; earlier ones may land later
  let modelTimer = 0;

  // ------------------------------------------------------------ settings

  const fields = {
    temperature: $("temperature"),
    top_p: $("top-p"),
    max_tokens: $("max-tokens"),
    system: $("system-prompt"),
  };

  function loadSettings() {
    let saved = {};
    try {
      saved = JSON.parse(localStorage.getItem(SETTINGS_KEY) || "{}") || {};
    } catch (e) {
      saved = {};
    }
    for (const [key, input] of Object.entries(fields)) {
      const value = key in saved ? saved[key] : DEFAULTS[key];
      input.value = value === null || value === undefined ? "" : String(value);
    }
  }

  function storage(action) {
    try {
      return action();
    } catch (e) {
      return null;  // storage can be disabled; settings then last for this page only
    }
  }

  function saveSettings() {
    const out = {};
    for (const [key, input] of Object.entries(fields)) out[key] = input.value;
    storage(() => localStorage.setItem(SETTINGS_KEY, JSON.stringify(out)));
  }

  function askForKey() {
    $("status").textContent = "API key needed";
    $("settings").hidden = false;
    $("settings-toggle").setAttribute("aria-expanded", "true");
    $("api-key").focus();
  }

  // A number field's value, or undefined when empty (the server's default
  // applies). Out-of-range values are sent as typed: the server's error
  // message says what is allowed.
  function numberField(input) {
    const text = input.value.trim();
    if (text === "") return undefined;
    const value = Number(text);
    return Number.isFinite(value) ? value : undefined;
  }

  function maxTokensSetting() {
    const v = numberField(fields.max_tokens);
    return v !== undefined && v >= 1 ? Math.floor(v) : DEFAULTS.max_tokens;
  }



  function switchToCompletions() {
    mode = "completion";
    $("mode").hidden = false;
    setNotice("notice-mode", "This model has no chat template, so the page now sends plain " +
              "completions: each answer continues the conversation's text.");
  }

  // ------------------------------------------------------------ requests

  // A POST; a 401 also opens the API key field.
  async function postJson(path, body, signal) {
    try {
      return await cellmApi.postJson(path, body, signal);
    } catch (err) {
      if (err.status === 401) askForKey();
      throw err;
    }
  }

  function messagesFrom(start) {
    const out = [];
    const system = fields.system.value.trim();
    if (system) out.push({ role: "system", content: system });
    for (const m of conversation.slice(start)) out.push({ role: m.role, content: m.content });
    return out;
  }

  // Completion mode: the system prompt, then the turns as one text; an
  // answer continues its question's text directly.
  function promptFrom(start) {
    let text = fields.system.value.trim();
    if (text) text += "\n\n";
    for (const m of conversation.slice(start)) {
      if (m.role === "user" && text && !/\s$/.test(text)) text += "\n\n";
      text += m.content;
    }
    return text;
  }

  // Tokens of the request that would carry conversation[start..].
  async function countFrom(start, signal) {
    const body = mode === "chat" ? { messages: messagesFrom(start) }
                                 : { prompt: promptFrom(start) };
    const r = await (await postJson("/tokenize", body, signal)).json();
    contextSize = r.max_model_len;
    return r.count;
  }

  // Drops the oldest turns (never the system prompt, never the newest
  // message) until the prompt leaves room for an answer. Returns the prompt's
  // token count, the max_tokens to ask for and the first message kept.
  async function fitContext(signal) {
    const wanted = maxTokensSetting();
    let start = keepFrom;
    for (;;) {
      const count = await countFrom(start, signal);
      const room = contextSize - count;
      // Keep room for the whole answer when it is small next to the
      // context, else for a quarter of the context.
      const reserve = Math.max(1, Math.min(wanted, Math.floor(contextSize / 4)));
      if (room >= reserve) return { start, count, maxTokens: Math.min(wanted, room) };
      if (start >= conversation.length - 1) {
        throw new Error("The message is too long for the context: the prompt needs " + count +
                        " tokens and the answer " + reserve + ", but the context holds " +
                        contextSize + ". Shorten it, or the system prompt.");
      }
      // Drop a whole turn: the user message and the answer after it.
      start += 1;
      while (start < conversation.length - 1 && conversation[start].role !== "user") start += 1;
    }
  }

  function applyTrim(start) {
    keepFrom = start;
    conversation.forEach((m, i) => m.bubble.classList.toggle("trimmed", i < keepFrom));
    for (const m of conversation.slice(0, keepFrom)) m.bubble.title = "left out of the context";
    setNotice("notice-trim", keepFrom === 0 ? "" :
      keepFrom + " older message" + (keepFrom === 1 ? " was" : "s were") +
      " left out to fit the context of " + contextSize + " tokens.");
  }


  function requestBody(maxTokens, start) {
    const body = { model, stream: true, max_tokens: maxTokens,
                   stream_options: { include_usage: true } };
    const temperature = numberField(fields.temperature);
    const topP = numberField(fields.top_p);
    if (temperature !== undefined) body.temperature = temperature;
    if (topP !== undefined) body.top_p = topP;
    if (mode === "chat") body.messages = messagesFrom(start);
    else body.prompt = promptFrom(start);
    return body;
  }

  // ------------------------------------------------------------ sending

  function setBusy(busy) {
    $("send").hidden = busy;
    $("stop").hidden = !busy;
    $("send").disabled = busy;
    document.body.classList.toggle("busy", busy);
  }

  async function send(text) {
    hideError();
    // "New chat" while this streams replaces the array: nothing of this
    // exchange may land in the new conversation.
    const convo = conversation;
    const user = { role: "user", content: text, bubble: addBubble("user") };
    user.bubble.querySelector(".body").textContent = text;
    convo.push(user);
    const out = addBubble("assistant");
    out.dataset.state = "streaming";
    out.setAttribute("aria-live", "polite");
    out.setAttribute("aria-busy", "true");
    const ctrl = new AbortController();
    controller = ctrl;
    setBusy(true);
    let answer = "";
    let usage = null;
    let finish = null;
    let frame = 0;
    let firstAt = 0;
    const redraw = () => {
      frame = 0;
      showMarkdown(out, answer);
      scrollDown(false);
    };
    try {
      let fit;
      let response;
      for (let attempt = 0; ; attempt += 1) {
        try {
          fit = await fitContext(ctrl.signal);
          response = await postJson(mode === "chat" ? "/v1/chat/completions" : "/v1/completions",
                                    requestBody(fit.maxTokens, fit.start), ctrl.signal);
          break;
        } catch (err) {
          if (attempt > 0 || mode !== "chat" || !isNoTemplate(err)) throw err;
          switchToCompletions();
        }
      }
      applyTrim(fit.start);
      fillRound += 1;  // a count still in flight is older than this one
      showFill(fit.count);
      await readEvents(response, (event) => {
        if (event.error) {
          throw new Error("The server failed while answering: " +
                          (event.error.message || "no reason given"));
        }
        if (event.usage) usage = event.usage;
        for (const choice of event.choices || []) {
          const piece = mode === "chat" ? choice.delta && choice.delta.content : choice.text;
          if (piece) {
            if (!firstAt) firstAt = performance.now();
            answer += piece;
            if (!frame) frame = requestAnimationFrame(redraw);
          }
          if (choice.finish_reason) finish = choice.finish_reason;
        }
      });
      out.dataset.state = "done";
    } catch (err) {
      if (ctrl.signal.aborted) {
        out.dataset.state = "stopped";
      } else {
        out.dataset.state = "error";
        showError(describe(err));
      }
    } finally {
      if (frame) cancelAnimationFrame(frame);
      showMarkdown(out, answer);
      out.setAttribute("aria-busy", "false");
      out.removeAttribute("aria-live");
      if (controller === ctrl) controller = null;
      setBusy(false);
    }
    if (convo !== conversation) return;
    const state = out.dataset.state;
    if (answer || state === "done") {
      convo.push({ role: "assistant", content: answer, bubble: out });
      // Decoding speed: the tokens after the first over the time they took.
      const seconds = firstAt ? (performance.now() - firstAt) / 1000 : 0;
      let foot = state === "stopped" ? "stopped"
               : finish === "length" ? "cut at max tokens"
               : finish === "abort" ? "ended by the server (shutting down)" : "";
      if (!answer) foot = "the model answered nothing";
      if (usage && usage.completion_tokens) {
        const n = usage.completion_tokens;
        foot += (foot ? " · " : "") + n + (n === 1 ? " token" : " tokens");
        if (n > 1 && seconds > 0) foot += ", " + ((n - 1) / seconds).toFixed(1) + " tokens/s";
      }
      if (state === "error") foot = "interrupted by an error";
      setFooter(out, foot, answer);
    } else {
      // Nothing came back: take the question out of the conversation (turns
      // must alternate for most templates) and give it back for another try.
      convo.pop();
      user.bubble.classList.add("failed");
      user.bubble.title = "not in the conversation";
      out.querySelector(".body").textContent =
          state === "error" ? "No answer: see the error above." : "Stopped before any answer.";
      if (!$("prompt").value) $("prompt").value = text;
    }
    if (state !== "error") updateFill();
    // Back to the message box, unless the user went elsewhere meanwhile.
    const active = document.activeElement;
    if (!active || active === document.body || active.closest("form")) $("prompt").focus();
  }

  // ------------------------------------------------------------ the context gauge

  async function updateFill() {
    clearTimeout(fillTimer);
    const round = ++fillRound;
    const gauge = $("fill");
    let count = 0;
    try {
      if (conversation.length > keepFrom || fields.system.value.trim()) {
        count = await countFrom(keepFrom);
      }
      if (round !== fillRound) return;
    } catch (err) {
      if (round !== fillRound) return;
      if (mode === "chat" && isNoTemplate(err)) {
        switchToCompletions();
        return updateFill();
      }
      gauge.textContent = "? / " + (contextSize || "?") + " tokens";
      gauge.title = "could not count the tokens: " + err.message;
      return;
    }
    showFill(count);
  }

  function showFill(count) {
    $("fill").textContent = count + " / " + contextSize + " tokens";
    $("fill").title = "tokens the conversation takes in the next request, of the context's " +
                      contextSize;
    $("fill-meter").max = contextSize || 1;
    $("fill-meter").value = Math.min(count, contextSize);
  }

  function updateFillSoon() {
    clearTimeout(fillTimer);
    fillTimer = setTimeout(updateFill, 400);
  }

  // ------------------------------------------------------------ page actions

  function stop() {
    if (controller) controller.abort();
  }

  function newChat() {
    stop();
    conversation = [];
    keepFrom = 0;
    cellmView.clear();
    setNotice("notice-trim", "");
    hideError();
    updateFill();
    $("prompt").focus();
  }

  async function loadModel() {
    clearTimeout(modelTimer);
    try {
      const r = await fetch("/v1/models", { headers: cellmApi.authHeaders() });
      if (r.status === 401) {
        // No retry loop: the next try comes when the key is edited.
        model = "";
        $("send").disabled = true;
        showError(describe(await cellmApi.httpError(r)));
        askForKey();
        return;
      }
      if (!r.ok) {
        $("status").textContent = "model loading…";
        modelTimer = setTimeout(loadModel, 1000);
        return;
      }
      const body = await r.json();
      hideError();
      model = body.data[0].id;
      contextSize = body.data[0].max_model_len || 0;
      $("status").textContent = model;
      $("send").disabled = false;
      updateFill();
    } catch (e) {
      $("status").textContent = "server unreachable";
      modelTimer = setTimeout(loadModel, 2000);
    }
  }

  $("form").addEventListener("submit", (e) => {
    e.preventDefault();
    const text = $("prompt").value.trim();
    if (!text || controller || !model) return;
    $("prompt").value = "";
    send(text);
  });
  $("prompt").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $("form").requestSubmit();
    } else if (e.key === "Escape" && controller) {
      stop();
    }
  });
  $("stop").addEventListener("click", stop);
  $("new-chat").addEventListener("click", newChat);
  $("banner-close").addEventListener("click", hideError);
  $("settings-toggle").addEventListener("click", () => {
    const panel = $("settings");
    panel.hidden = !panel.hidden;
    $("settings-toggle").setAttribute("aria-expanded", String(!panel.hidden));
  });
  for (const input of Object.values(fields)) input.addEventListener("input", saveSettings);
  fields.system.addEventListener("input", updateFillSoon);
  $("api-key").addEventListener("input", () => {
    const key = $("api-key").value.trim();
    cellmApi.setKey(key);
    storage(() => (key ? localStorage.setItem(API_KEY_KEY, key)
                       : localStorage.removeItem(API_KEY_KEY)));
    clearTimeout(modelTimer);
    modelTimer = setTimeout(loadModel, 400);
  });
  $("reset-settings").addEventListener("click", () => {
    for (const [key, input] of Object.entries(fields)) input.value = String(DEFAULTS[key]);
    saveSettings();
    updateFillSoon();
  });

  loadSettings();
  $("api-key").value = storage(() => localStorage.getItem(API_KEY_KEY)) || "";
  cellmApi.setKey($("api-key").value);
  loadModel();
})();
