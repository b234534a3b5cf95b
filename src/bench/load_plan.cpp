// Option checks, URL parsing and request bodies of the HTTP mode.
#include "bench/load_plan.h"

#include <array>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "app/draft_factory.h"
#include "grammar/json_schema.h"

namespace cellm::bench {
namespace {

// Common English words, each one token in the usual vocabularies (a leading
// space included), so that a text prompt of n words is close to n tokens.
constexpr std::array<const char*, 64> kWords = {
    "the",   "of",     "and",   "to",    "in",    "is",    "that", "for",   "it",    "as",
    "was",   "with",   "be",    "by",    "on",    "not",   "he",   "this",  "are",   "or",
    "his",   "from",   "at",    "which", "but",   "have",  "an",   "had",   "they",  "you",
    "were",  "their",  "one",   "all",   "we",    "can",   "her",  "has",   "there", "been",
    "if",    "more",   "when",  "will",  "would", "who",   "so",   "no",    "time",  "people",
    "year",  "way",    "day",   "man",   "thing", "woman", "life", "child", "world", "school",
    "state", "family", "water", "house"};

// Sampling and streaming fields every request of the run shares.
void common_fields(const HttpBenchOptions& o, std::uint64_t request_seed, nlohmann::json& body) {
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  body["temperature"] = o.load.temperature;
  if (o.load.temperature > 0) {
    body["top_p"] = o.load.top_p;
    if (o.load.top_k > 0) body["top_k"] = o.load.top_k;
    body["seed"] = request_seed;
  }
  if (o.ignore_eos) body["ignore_eos"] = true;
  if (!o.json_schema.empty()) {
    body["response_format"] = {
        {"type", "json_schema"},
        {"json_schema", {{"name", "bench"}, {"schema", nlohmann::json::parse(o.json_schema)}}}};
  }
}

// The checks of --dataset and --speculate.
Status validate_dataset_and_speculation(const HttpBenchOptions& o) {
  const bool dataset = !o.dataset_path.empty() || !o.dataset.empty();
  const bool in_process = o.url.empty();
  if (dataset && o.compare_inprocess.value_or(false)) {
    return invalid_argument(
        "--inprocess with --dataset: the in-process Runner load draws random token prompts and "
        "cannot send a dataset's text; drop --inprocess");
  }
  if (dataset && in_process && !std::filesystem::exists(o.load.model)) {
    return invalid_argument(
        "--dataset needs a model with a tokenizer (and a chat template for \"messages\"); '{}' "
        "is a random-weight shape with neither: pass a model file, e.g. --model "
        "models/gemma-3-270m-q4_k_m.gguf or models/SmolLM2-135M-Instruct.Q4_1.gguf",
        o.load.model);
  }
  if (o.speculate != "off" && o.speculate != "ngram" && o.speculate != "draft") {
    return invalid_argument("--speculate must be off, ngram or draft, got '{}'", o.speculate);
  }
  CELLM_RETURN_IF_ERROR(app::check_speculation_options(o.speculate, o.draft_model));
  if (o.speculate_tokens < 1 || o.speculate_tokens > 16) {
    return invalid_argument("--speculate-tokens must lie in 1..16 drafts, got {}",
                            o.speculate_tokens);
  }
  if (o.speculate == "off") return Status::ok();
  if (!in_process) {
    return invalid_argument(
        "--speculate configures the server bench serve starts (--http); a --url server "
        "speculates as it was started (e.g. cellm serve --speculate {}): drop --speculate",
        o.speculate);
  }
  if (o.compare_inprocess.value_or(false)) {
    return invalid_argument(
        "--inprocess with --speculate: the in-process Runner load does not speculate, so the "
        "ratio would compare unlike runs; drop --inprocess");
  }
  if (!std::filesystem::exists(o.load.model)) {
    return invalid_argument(
        "--speculate needs a model path (the engine cellm serve loads); '{}' is a random-weight "
        "shape: pass a model file, e.g. --model models/gemma-3-270m-q4_k_m.gguf",
        o.load.model);
  }
  return Status::ok();
}

}  // namespace

Status validate(const HttpBenchOptions& o) {
  CELLM_RETURN_IF_ERROR(validate(o.load));
  if (!o.url.empty()) {
    Result<Endpoint> e = parse_url(o.url);
    if (!e.ok()) return e.status();
  }
  if (o.vocab_size < 0) {
    return invalid_argument("--vocab-size must be 0 (automatic) or positive, got {}", o.vocab_size);
  }
  if (o.prefix_cache_entries < 0) {
    return invalid_argument("--prefix-cache-entries must be 0 (none) or positive, got {}",
                            o.prefix_cache_entries);
  }
  if (!(o.request_timeout_s > 0) || std::isinf(o.request_timeout_s)) {
    return invalid_argument("--request-timeout must be a positive number of seconds, got {}",
                            o.request_timeout_s);
  }
  if (!o.json_schema.empty() && o.compare_inprocess.value_or(false)) {
    return invalid_argument(
        "--inprocess with --json-schema: the in-process load sends no response_format, so the "
        "ratio would compare a constrained load with an unconstrained one; drop --inprocess");
  }
  if (o.compare_inprocess.value_or(false) && !o.url.empty() && o.load.model.empty()) {
    return invalid_argument("--inprocess with --url needs --model to load in this process");
  }
  CELLM_RETURN_IF_ERROR(validate_dataset_and_speculation(o));
  return Status::ok();
}

Result<Endpoint> parse_url(const std::string& url) {
  constexpr std::string_view kHttp = "http://";
  if (url.rfind(kHttp, 0) != 0) {
    return invalid_argument(
        "--url {}: give an http:// base URL such as http://127.0.0.1:8000 (https is not "
        "supported: benchmark over loopback or a private network)",
        url);
  }
  std::string_view rest = std::string_view(url).substr(kHttp.size());
  const std::size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  std::string path = slash == std::string_view::npos ? "" : std::string(rest.substr(slash));
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (authority.empty()) return invalid_argument("--url {}: no host", url);
  Endpoint e;
  const std::size_t colon = authority.rfind(':');
  if (colon == std::string_view::npos || authority.back() == ']') {
    e.host = std::string(authority);
  } else {
    e.host = std::string(authority.substr(0, colon));
    const std::string_view port = authority.substr(colon + 1);
    int p = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
    if (ec != std::errc() || end != port.data() + port.size() || p <= 0 || p > 65535) {
      return invalid_argument("--url {}: the port must be a number in 1..65535", url);
    }
    e.port = p;
  }
  if (e.host.empty()) return invalid_argument("--url {}: no host", url);
  if (e.host.size() > 2 && e.host.front() == '[' && e.host.back() == ']') {
    e.host = e.host.substr(1, e.host.size() - 2);
  }
  e.scheme_host_port = std::string(kHttp) + std::string(authority);
  const bool ends_v1 = path.size() >= 3 && path.compare(path.size() - 3, 3, "/v1") == 0;
  e.v1 = ends_v1 ? path : path + "/v1";
  return e;
}

std::string completion_body(const HttpBenchOptions& o, const std::string& model,
                            const RequestSpec& r, std::uint64_t request_seed) {
  nlohmann::json body;
  body["model"] = model;
  if (o.prompt_format == PromptFormat::kTokenIds) {
    nlohmann::json ids = nlohmann::json::array();
    for (Token t : r.prompt) ids.push_back(static_cast<std::int64_t>(t));
    body["prompt"] = std::move(ids);
  } else {
    std::string text;
    text.reserve(r.prompt.size() * 6);
    for (std::size_t i = 0; i < r.prompt.size(); ++i) {
      if (i > 0) text.push_back(' ');
      text += kWords[static_cast<std::size_t>(r.prompt[i]) % kWords.size()];
    }
    body["prompt"] = std::move(text);
  }
  body["max_tokens"] = r.output_len;
  common_fields(o, request_seed, body);
  return body.dump();
}

std::string dataset_body(const HttpBenchOptions& o, const std::string& model,
                         const DatasetRequest& r, std::uint64_t request_seed, int max_tokens) {
  nlohmann::json body;
  body["model"] = model;
  if (r.chat) {
    body["messages"] = r.messages;
  } else {
    body["prompt"] = r.prompt;
  }
  body["max_tokens"] = max_tokens > 0 ? max_tokens : r.max_tokens;
  if (!r.stop.is_null()) body["stop"] = r.stop;
  common_fields(o, request_seed, body);
  return body.dump();
}

const char* dataset_route(const DatasetRequest& r) {
  return r.chat ? "chat/completions" : "completions";
}

Result<std::string> read_json_schema(const std::string& path) {
  std::ifstream in(path);
  if (!in) return invalid_argument("--json-schema {}: cannot read the file", path);
  nlohmann::ordered_json doc = nlohmann::ordered_json::parse(in, nullptr, false);
  if (doc.is_discarded()) return invalid_argument("--json-schema {}: not valid JSON", path);
  if (doc.is_object() && doc.contains("schema") && doc.contains("example")) doc = doc["schema"];
  if (!doc.is_object()) {
    return invalid_argument("--json-schema {}: a JSON Schema is an object, got {}", path,
                            doc.type_name());
  }
  // Refused here rather than by the server, once per request.
  auto g = grammar::compile_json_schema(doc);
  if (!g.ok()) {
    return invalid_argument("--json-schema {}: the server would refuse it: {}", path,
                            g.status().message());
  }
  return doc.dump();
}

}  // namespace cellm::bench
