// RunnerStack pieces shared by the server tests over a real Runner: the
// byte-level ModelText (token t < 256 is byte t) and Stack, a Runner with
// its prefix cache over a ToyExecutor behind a RunnerService.
//
// Thread-safety: as the Runner and RunnerService; a Stack itself belongs to
// the test thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cellm/decode_first_scheduler.h"
#include "cellm/runner.h"
#include "server/runner_service.h"
#include "toy_executor.h"

namespace cellm::server::testing {

inline ModelText byte_text() {
  ModelText t;
  t.tokenize = [](std::string_view s, bool) -> Result<std::vector<Token>> {
    std::vector<Token> ids;
    for (unsigned char c : s) ids.push_back(c);
    return ids;
  };
  t.render_chat = [](const nlohmann::ordered_json& messages, const nlohmann::ordered_json&,
                     bool) -> Result<std::string> {
    std::string out;
    for (const auto& m : messages) out += m["content"].get<std::string>() + "|";
    return out;
  };
  t.detokenize = [](std::span<const Token> ids) {
    std::string s;
    for (Token t : ids) {
      if (t < 256) s += static_cast<char>(t);
    }
    return s;
  };
  t.text_stream = [] {
    struct Bytes : TokenTextStream {
      std::string push(Token t) override {
        return t < 256 ? std::string(1, static_cast<char>(t)) : "";
      }
      std::string finish() override { return {}; }
    };
    return std::unique_ptr<TokenTextStream>(new Bytes);
  };
  return t;
}

// A Runner (keeping `cache_entries` prompt snapshots) + RunnerService over a
// ToyExecutor.
struct Stack {
  explicit Stack(std::size_t cache_entries, std::uint64_t eos_every = 0)
      : executor(32, eos_every),
        runner(executor, DecodeFirstScheduler::create(64, 16, 16),
               toy_runner_options(static_cast<std::int32_t>(cache_entries))) {
    RunnerServiceConfig c;
    c.model_name = "toy";
    c.context_length = 512;
    c.vocab_size = 258;
    c.max_sessions = 32;
    c.prefix_caching = cache_entries > 0;
    c.stop_tokens = {ToyExecutor::kEos};
    service = std::make_shared<RunnerService>(runner, byte_text(), c);
  }
  ~Stack() {
    service.reset();
    runner.shutdown();
  }
  std::size_t cache_size() const { return static_cast<std::size_t>(runner.prefix_cache_size()); }
  ToyExecutor executor;
  Runner runner;
  std::shared_ptr<RunnerService> service;
};

}  // namespace cellm::server::testing
