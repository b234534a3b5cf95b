// RunnerService: the GenerationService over a Runner and an optional
// PrefixCache. A request's prompt first looks for a cached prefix (its clone
// then prefills only the rest) or opens a fresh session; choice 0 generates on
// it while a PromptCapture snapshots the prompt for later requests; choices
// 1..n-1 wait for that single prefill, clone the session just before the
// prompt's last token and generate from there with seed + i. Text handling
// (tokenize, templates, detokenization) comes from a ModelText the caller
// provides, so tests can pair a real Runner with a toy executor.
//
// Thread-safety: as GenerationService. The PrefixCache is only touched under
// an internal mutex and never from a runner callback.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cellm/prefix_cache.h"
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
};

struct RunnerServiceConfig {
  std::string model_name;
  std::int32_t context_length = 0;  // per-session position limit
  std::int32_t vocab_size = 0;
  std::int32_t max_sessions = 0;          // sessions for generating sequences
  std::int32_t prefix_cache_entries = 0;  // snapshots the cache may hold
  // True when the runner holds sessions for snapshots beyond max_sessions
  // (the cache's entries and one prompt snapshot per running request, as the
  // Engine sizes it): snapshots then take no admission slot. False: they come
  // out of max_sessions, so admission keeps room for them.
  bool snapshots_have_own_sessions = false;
  std::vector<Token> stop_tokens;  // EOS set; dropped with ignore_eos
  SamplingDefaults sampling_defaults;  // the model's, for unset request settings
  ToolFormat tool_format = ToolFormat::kNone;
};

class RunnerService final : public GenerationService {
 public:
  // `runner` and `cache` (null: no prefix caching) are borrowed and must
  // outlive every job.
  RunnerService(Runner& runner, PrefixCache* cache, ModelText text, RunnerServiceConfig config);

  std::string model_name() const override { return config_.model_name; }
  std::int32_t context_length() const override { return config_.context_length; }
  std::int32_t vocab_size() const override { return config_.vocab_size; }
  std::int32_t max_sequences() const override;
  std::int32_t sequences_for(std::int32_t n) const override;
  bool prefix_caching() const override { return cache_ != nullptr; }
  std::vector<Token> stop_tokens() const override { return config_.stop_tokens; }
  bool can_suppress_tokens() const override { return runner_.can_suppress_tokens(); }
  ToolFormat tool_format() const override { return config_.tool_format; }

  Result<std::vector<Token>> tokenize(std::string_view text, bool add_special) const override;
  Result<std::string> render_chat(const nlohmann::ordered_json& messages,
                                  const nlohmann::ordered_json& extra,
                                  bool add_generation_prompt) const override;
  std::string detokenize(std::span<const Token> tokens) const override;
  std::string token_bytes(Token token) const override;
  std::unique_ptr<TokenTextStream> text_stream() const override;
  Result<std::unique_ptr<GenerationJob>> start(const GenerationSpec& spec, EventSink sink,
                                               const std::function<bool()>& abandoned) override;
  ServiceStats stats() const override;
  SamplingDefaults sampling_defaults() const override { return config_.sampling_defaults; }

 private:
  class Job;

  Runner& runner_;
  PrefixCache* cache_;
  ModelText text_;
  RunnerServiceConfig config_;
  // Serialises every PrefixCache call (lookup, capture_prompt, collect).
  std::shared_ptr<std::mutex> cache_mu_ = std::make_shared<std::mutex>();
  // Running requests' prompt captures (each holds a snapshot session once
  // its first token is out); shared with the jobs, which may outlive us.
  std::shared_ptr<std::atomic<std::int64_t>> captures_ =
      std::make_shared<std::atomic<std::int64_t>>(0);
};

}  // namespace cellm::server
