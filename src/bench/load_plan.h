// The HTTP mode of `cellm bench serve`: its options and the request bodies it
// sends. The load itself (lengths, prompts, arrivals) is the in-process
// mode's (bench_serve.h), drawn from the same seed, so that both modes of one
// run serve the very same requests; or, with --dataset, the requests of a
// JSONL file (dataset.h), sent as text to the completions or chat route.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_serve.h"
#include "bench/dataset.h"
#include "cellm/status.h"

namespace cellm::bench {

enum class PromptFormat : std::uint8_t {
  kTokenIds,  // "prompt": [ids...] (no tokenizer needed; what vLLM and llama-server accept)
  kText,      // "prompt": "words ..." (one random word per requested token; usage counts)
};

enum class ProgressMode : std::uint8_t { kAuto, kBar, kLines, kOff };

struct HttpBenchOptions {
  // Model, backend, lengths, rate, concurrency, warm-up, seed, sampling,
  // scheduler limits and --json, shared with the in-process mode.
  ServeBenchOptions load;
  // An OpenAI-compatible base URL ("http://host:port", with or without a
  // trailing "/v1"); empty: start cellm's own server in-process on
  // 127.0.0.1, any free port.
  std::string url;
  // The "model" field of every request; empty: the first id of GET /v1/models.
  std::string served_model;
  std::string api_key;  // sent as "Authorization: Bearer KEY" when set
  PromptFormat prompt_format = PromptFormat::kTokenIds;
  // The vocabulary random token prompts are drawn from, for --url (0: ask
  // nobody and use 32000, safe for every common model).
  std::int32_t vocab_size = 0;
  bool ignore_eos = true;  // every request generates exactly its output length
  // Also run the load through the Runner in-process (the existing mode) and
  // report HTTP over in-process throughput. Unset: on when the server runs
  // in-process, off against --url.
  std::optional<bool> compare_inprocess;
  // The in-process server's prefix cache (cellm serve --prefix-cache-entries):
  // random prompts share nothing, so by default none.
  std::int32_t prefix_cache_entries = 0;
  double request_timeout_s = 1800;  // one request, first byte to last
  ProgressMode progress = ProgressMode::kAuto;
  std::string plot_path;  // a PNG drawn by bench/plot_serve.py after the run
  // --json-schema FILE: every request asks for response_format json_schema
  // with this schema (read_json_schema), so that a constrained load compares
  // with an unconstrained one. Empty: no response_format.
  std::string json_schema_file;
  std::string json_schema;  // the schema as JSON text
  // --dataset FILE: the requests of `dataset` (read_dataset of the file, read
  // by run_http_serve_bench when left empty) replace the random prompts;
  // the input and output lengths, range ratio and prefix go unused.
  std::string dataset_path;
  std::vector<DatasetRequest> dataset;
  // The in-process server's speculative decoding, as `cellm serve --speculate
  // off|ngram|draft --draft-model PATH --speculate-tokens K` takes it
  // (app::EngineOptions::speculate, speculate_tokens, draft_model).
  std::string speculate = "off";
  std::int32_t speculate_tokens = 4;
  std::string draft_model;
};

// The schema of --json-schema FILE as JSON text: the file is a JSON Schema,
// or a bench/schemas file ({"schema": ..., "example": ...}), whose "schema"
// is taken. Refused when it cannot be read, parsed or compiled.
Result<std::string> read_json_schema(const std::string& path);

// Option checks of the HTTP mode (the shared ones through validate()).
Status validate(const HttpBenchOptions& options);

// Where --url points: "http://host:port" split, and the path prefix that
// /completions follows ("/v1" unless the URL already ends in it).
struct Endpoint {
  std::string scheme_host_port;  // "http://127.0.0.1:8080"
  std::string host;
  int port = 80;
  std::string v1;  // "/v1" or "/something/v1"
};
Result<Endpoint> parse_url(const std::string& url);

// The JSON body of request `r`: a streaming /v1/completions request with
// max_tokens = its output length (and min_tokens, ignore_eos when asked,
// response_format json_schema with --json-schema), usage in the last chunk. Text prompts hold one
// word of a fixed list per token id, so they are as random and as long (in words) as the ids.
std::string completion_body(const HttpBenchOptions& options, const std::string& model,
                            const RequestSpec& r, std::uint64_t request_seed);

// The body of a --dataset request: streaming, usage in the last chunk, the
// run's sampling, its messages (chat) or prompt (completions) and stop as written, and
// max_tokens (its own unless `max_tokens` > 0 overrides it, as the warm-up
// does). ignore_eos only when the options ask for it.
std::string dataset_body(const HttpBenchOptions& options, const std::string& model,
                         const DatasetRequest& r, std::uint64_t request_seed, int max_tokens = 0);
// The route a request goes to under {v1}/: "chat/completions" or "completions".
const char* dataset_route(const DatasetRequest& r);

}  // namespace cellm::bench
