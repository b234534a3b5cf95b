// Engine: the entry point for an application that embeds cellm. It opens a
// model by path (a .gguf file or a Hugging Face folder) on the best backend
// this build has (CUDA when built with it and a device is visible, else the
// CPU) and hands out what it takes to run it: the Runner (cellm/runner.h)
// that generates tokens, the tokenizer as encode/decode and a streaming
// decoder, the model's chat template, its stop tokens and sampling defaults.
//
//   auto engine = cellm::Engine::open({.model = "model.gguf"});
//   if (!engine.ok()) { /* engine.status().message() says why */ }
//   cellm::Request request{.prompt = *(*engine)->encode("Hello"),
//                          .config = (*engine)->generation_config(32)};
//   (*engine)->runner().submit(std::move(request), {.on_update = ..., .on_done = ...});
//
// examples/stream_completion is a whole program. This header and the ones it
// includes are the public API: no CUDA, JSON or other third-party type
// appears in them except fmt (through cellm/status.h).
//
// Thread-safety: open() from any thread. Afterwards every const method is
// safe from any thread at once; runner() follows the Runner's contract.
// Destruction shuts the runner down (live generations end kCancelled) and
// must not run on a thread inside one of its callbacks. A TextStream is
// for one thread at a time.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cellm/runner.h"
#include "cellm/sampling_defaults.h"
#include "cellm/status.h"
#include "cellm/types.h"

namespace cellm {

struct EngineOptions {
  // A single-file GGUF model or a Hugging Face folder (config.json,
  // safetensors, tokenizer.json).
  std::filesystem::path model;
  // "auto" (CUDA when available, else CPU), "cpu" or "cuda".
  std::string backend = "auto";
  // Sessions that generate at once. 0: 64, or fewer when the KV memory
  // cannot hold that many at the context.
  std::int32_t max_sessions = 0;
  // Tokens a session may hold (prompt and output). 0: the model's context,
  // lowered only when memory is short.
  std::int32_t max_session_tokens = 0;
  // Prompt snapshots the runner keeps so that a request starting with a
  // recent prompt skips prefilling it (Request::use_prefix_cache); 0: none.
  std::int32_t prefix_cache_entries = 0;
};

// One message of a conversation for the chat template.
struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

// Token ids to text as they arrive: push() returns the text that became
// final with a token (often empty while a multi-byte character or a word
// piece is incomplete); finish() returns what is still held. Their
// concatenation equals Engine::decode of all the ids, and every piece is
// whole UTF-8, so each can be printed at once.
class TextStream {
 public:
  TextStream(TextStream&&) noexcept;
  TextStream& operator=(TextStream&&) noexcept;
  ~TextStream();

  std::string push(Token token);
  std::string finish();

 private:
  friend class Engine;
  struct Impl;
  explicit TextStream(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class Engine {
 public:
  // Stage ("reading model.gguf", "building program", ..., "ready") and the
  // fraction done in [0, 1]; called on the thread that runs open().
  using Progress = std::function<void(std::string_view stage, double fraction)>;

  // Loads the model and starts the runner's engine thread. Errors name what
  // was wrong: a missing or unreadable path, an unsupported architecture or
  // format, a negative option, a backend this build or machine lacks.
  static Result<std::unique_ptr<Engine>> open(const EngineOptions& options,
                                              const Progress& progress = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  Runner& runner();

  // Text to token ids; add_special adds BOS (and the like) the way the model
  // expects at the start of a prompt.
  Result<std::vector<Token>> encode(std::string_view text, bool add_special = true) const;
  // Token ids to text; ids outside the vocabulary are skipped.
  std::string decode(std::span<const Token> tokens, bool skip_special = true) const;
  // A streaming decoder for one generation's tokens.
  TextStream text_stream(bool skip_special = true) const;

  bool has_chat_template() const;
  // The prompt text of `messages` rendered through the model's chat template
  // (encode it with add_special = false: the template writes BOS itself).
  // NotFound when the model ships no usable template.
  Result<std::string> render_chat(std::span<const ChatMessage> messages,
                                  bool add_generation_prompt = true) const;
  // The same from an OpenAI-style JSON array of messages (tool calls and
  // all), with extra template variables as a JSON object ({"tools": [...],
  // "enable_thinking": false}). InvalidArgument for malformed JSON.
  Result<std::string> render_chat_json(std::string_view messages_json,
                                       bool add_generation_prompt = true,
                                       std::string_view variables_json = "{}") const;

  // The ids that end a generation (the model's end-of-sequence set).
  const std::vector<Token>& stop_tokens() const;
  // The sampling settings the model ships; every field unset when none.
  const SamplingDefaults& sampling_defaults() const;
  // A GenConfig for up to max_new_tokens tokens that stops at stop_tokens()
  // and samples with the model's defaults (greedy where it ships none);
  // nondeterministic unless a seed is set on it.
  GenConfig generation_config(std::int64_t max_new_tokens) const;

  const std::string& model_name() const;    // the file or folder name
  const std::string& backend_name() const;  // "cpu" or "cuda"
  std::int32_t max_session_tokens() const;
  std::int32_t max_sessions() const;
  std::int32_t vocab_size() const;

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The library's log threshold, for every engine of the process: "trace",
// "debug", "info" (the default), "warn", "error" or "off". Logs go to
// stderr. InvalidArgument for any other name. Meant for start-up.
Status set_log_level(std::string_view level);

}  // namespace cellm
