// Talking to the server: JSON requests carrying the API key, errors that
// keep the server's message, and the reader of streamed (SSE) answers. No
// page elements are touched here.
"use strict";

const cellmApi = (() => {
  let apiKey = "";

  // The server's API key (cellm serve --api-key), sent as a bearer token.
  function setKey(key) {
    apiKey = key.trim();
  }

  function authHeaders() {
    return apiKey ? { Authorization: "Bearer " + apiKey } : {};
  }

  // An HTTP error's message from the server's JSON body.
  async function httpError(response) {
    let detail = response.statusText || "request failed";
    try {
      const body = await response.json();
      if (body && body.error && body.error.message) detail = body.error.message;
    } catch (e) {
      // Not JSON: keep the status text.
    }
    const err = new Error(detail);
    err.status = response.status;
    return err;
  }

  function describe(err) {
    if (err.status === 401) {
      return "Server error 401: " + err.message + ". Enter the server's API key in Settings.";
    }
    if (err.status) return "Server error " + err.status + ": " + err.message;
    if (err instanceof TypeError) return "Could not reach the server: " + err.message;
    return err.message;
  }

  // The chat endpoint's (and /tokenize's) answer for a model without a chat template.
  const isNoTemplate = (err) =>
    err.status === 400 && /chat template/i.test(err.message) && /\bno\b/i.test(err.message);

  // POSTs `body` as JSON; a refusal throws httpError's Error.
  async function postJson(path, body, signal) {
    const response = await fetch(path, {
      method: "POST",
      headers: { "Content-Type": "application/json", ...authHeaders() },
      body: JSON.stringify(body),
      signal,
    });
    if (!response.ok) throw await httpError(response);
    return response;
  }

  // Reads "data: ..." events from a streamed response until "[DONE]"; a
  // stream cut before it is an error, not a finished answer.
  async function readEvents(response, onEvent) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) {
        throw new Error("The answer stream ended before it was complete: the server may have " +
                        "stopped or the connection dropped.");
      }
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        for (const line of block.split("\n")) {
          if (!line.startsWith("data:")) continue;
          const data = line.slice(5).trim();
          if (data === "[DONE]") return;
          onEvent(JSON.parse(data));
        }
      }
    }
  }

  return { setKey, authHeaders, httpError, describe, isNoTemplate, postJson, readEvents };
})();
