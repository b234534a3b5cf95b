// ChatModel: the engine side of `cellm chat`. Each turn renders the whole
// conversation through the chat template and submits it as one request
// (Runner::submit, the path a server request takes); the runner's prefix
// cache holds the previous turns' prompts, so only what is new since the
// last prompt is prefilled, and an edited or trimmed history simply matches
// a shorter prefix.
//
// Thread-safety: one thread (the chat's); the sink passed to answer() runs on
// the engine thread, one call at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/engine.h"
#include "cellm/runner.h"
#include "cellm/status.h"
#include "cli/generate.h"

namespace cellm::cli {

class ChatModel {
 public:
  // Unavailable when the engine keeps no prefix cache (every turn would
  // prefill the whole conversation again).
  static Result<ChatModel> open(app::Engine& engine);

  // The tokens of `messages` rendered for the next answer.
  Result<std::int64_t> count_tokens(const nlohmann::ordered_json& messages) const;

  struct Answer {
    std::string text;  // what was shown (a stopped answer's part included)
    FinishReason reason = FinishReason::kFailed;
    std::int64_t tokens = 0;  // tokens generated
  };
  // Answers the last user message of `messages`, streaming its text to
  // `sink`; `cancel` stops it (see stream_generation). A failed generation is
  // an error; the next turn starts from the cache as usual.
  Result<Answer> answer(const nlohmann::ordered_json& messages, const SamplingArgs& sampling,
                        const std::function<void(std::string_view)>& sink,
                        const std::atomic<bool>* cancel);

 private:
  explicit ChatModel(app::Engine& engine) : engine_(&engine) {}
  Result<std::vector<Token>> render(const nlohmann::ordered_json& messages) const;

  app::Engine* engine_;
};

}  // namespace cellm::cli
