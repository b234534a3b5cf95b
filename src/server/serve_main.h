// `cellm serve`: listen first (so /health answers 503 while loading), load the
// Engine with progress logs, serve the OpenAI API until SIGINT/SIGTERM, then
// drain (running requests finish within drain_timeout_s, later ones are
// cancelled) and shut the engine down. A second signal exits at once.
//
// Thread-safety: run_serve() is called once, from main(). It installs
// SIGINT/SIGTERM handlers (which only write to a pipe read by its signal
// thread) and ignores SIGPIPE.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/quantize.h"

namespace cellm::server {

struct ServeArgs {
  // A Hugging Face folder or .gguf file, or a name looked up as
  // app/model_path.h says; empty: $CELLM_MODEL, else smollm2.
  std::filesystem::path model;
  std::string host = "127.0.0.1";
  int port = 8080;                         // 0: any free port (printed when listening)
  std::string backend = "auto";            // "auto", "cpu" or "cuda"
  std::int32_t max_sessions = 0;           // sequences at once; 0: sized from the KV memory
  std::int32_t max_session_tokens = 0;     // 0: the model's context, as memory allows
  std::int32_t max_tokens_default = 2048;  // requests without max_tokens; 0: the context's room
  std::int32_t prefix_cache_entries = 16;  // 0 disables automatic prefix caching
  std::int32_t max_queue = 256;            // requests waiting for capacity before 429
  std::size_t body_limit = 8u << 20;       // request bytes before 413
  std::string served_model_name;           // empty: the model's file or folder name
  std::int32_t drain_timeout_s = 30;
  std::int32_t prefill_chunk = 0;     // 0: the engine's default (256)
  std::int32_t max_batch_tokens = 0;  // 0: decodes plus two prefill chunks
  std::string speculate = "off";      // "ngram" or "draft" (app::EngineOptions::speculate)
  std::int32_t speculate_tokens = 4;
  std::string draft_model;      // with speculate "draft" (app::EngineOptions::draft_model)
  bool keep_quantized = false;  // program::ProgramOptions::keep_quantized
  model::Quantize quantize = model::Quantize::kNone;  // app::EngineOptions::quantize
  DType kv_dtype = DType::kBF16;                      // app::EngineOptions::kv_dtype
  // Access: with any key (--api-key, or --api-key-file with one key per
  // line) every route but /, /health and, with metrics_open, /metrics needs
  // "Authorization: Bearer KEY".
  std::vector<std::string> api_keys;
  std::filesystem::path api_key_file;  // empty: none
  bool metrics_open = false;
  std::vector<std::string> cors_origins;  // exact origins or "*"; empty: no CORS
};

// Returns the process exit code: 0 after a clean stop, 1 when the options are
// invalid (a bad key, an unreadable or empty key file, a malformed origin) or
// listening or loading failed. Status lines go to stderr, as JSON objects
// under --log-format json.
int run_serve(const ServeArgs& args);

}  // namespace cellm::server
