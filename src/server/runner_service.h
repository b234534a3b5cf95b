// RunnerService: the GenerationService over a Runner. A request becomes one
// Runner::submit (the engine owns the prefix cache, the single prefill and
// the fan-out of n choices); its events are forwarded to the HTTP layer's
// sink as they come. Text handling (tokenize, templates, detokenization)
// comes from a ModelText the caller provides, so tests can pair a real
// Runner with a toy executor.
//
// Thread-safety: as GenerationService. Nothing here blocks: start() queues
// the request and returns.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cellm/runner.h"
#include "server/generation_service.h"

namespace cellm::server {

// The text side of a model.
struct ModelText {
  std::function<Result<std::vector<Token>>(std::string_view, bool)> tokenize;
  std::function<Result<std::string>(const nlohmann::ordered_json&, const nlohmann::ordered_json&,
                                    bool)>
      render_chat;
  std::function<std::string(std::span<const Token>)> detokenize;
  std::function<std::string(Token)> token_bytes;  // optional (GenerationService::token_bytes)
  std::function<std::unique_ptr<TokenTextStream>()> text_stream;
  std::function<ServiceStats()> stats;  // optional
  // optional: the token bytes for constrained decoding
  std::function<std::shared_ptr<const grammar::TokenVocabulary>()> vocabulary;
};

struct RunnerServiceConfig {
  std::string model_name;
  std::int32_t context_length = 0;  // per-session position limit
  std::int32_t vocab_size = 0;
  std::int32_t max_sessions = 0;  // sessions for generating sequences
  // The runner keeps a prefix cache (RunnerOptions::prefix_cache_entries),
  // whose snapshots have sessions of their own beyond max_sessions.
  bool prefix_caching = false;
  std::vector<Token> stop_tokens;  // EOS set; dropped with ignore_eos
  SamplingDefaults sampling_defaults;  // the model's, for unset request settings
  ToolFormat tool_format = ToolFormat::kNone;
};

class RunnerService final : public GenerationService {
 public:
  // `runner` is borrowed and must outlive every job.
  RunnerService(Runner& runner, ModelText text, RunnerServiceConfig config);

  std::string model_name() const override { return config_.model_name; }
  std::int32_t context_length() const override { return config_.context_length; }
  std::int32_t vocab_size() const override { return config_.vocab_size; }
  std::int32_t max_sequences() const override;
  bool prefix_caching() const override { return config_.prefix_caching; }
  std::vector<Token> stop_tokens() const override { return config_.stop_tokens; }
  bool can_suppress_tokens() const override { return runner_.can_suppress_tokens(); }
  ToolFormat tool_format() const override { return config_.tool_format; }
  std::shared_ptr<const grammar::TokenVocabulary> token_vocabulary() const override {
    return text_.vocabulary ? text_.vocabulary() : nullptr;
  }

  Result<std::vector<Token>> tokenize(std::string_view text, bool add_special) const override;
  Result<std::string> render_chat(const nlohmann::ordered_json& messages,
                                  const nlohmann::ordered_json& extra,
                                  bool add_generation_prompt) const override;
  std::string detokenize(std::span<const Token> tokens) const override;
  std::string token_bytes(Token token) const override;
  std::unique_ptr<TokenTextStream> text_stream() const override;
  Result<std::unique_ptr<GenerationJob>> start(const GenerationSpec& spec,
                                               EventSink sink) override;
  ServiceStats stats() const override;
  SamplingDefaults sampling_defaults() const override { return config_.sampling_defaults; }

 private:
  class Job;

  Runner& runner_;
  ModelText text_;
  RunnerServiceConfig config_;
};

}  // namespace cellm::server
