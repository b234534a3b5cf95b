// ChatModel: the engine side of `cellm chat`. It keeps one runner Session for
// the whole conversation and, at each turn, renders the conversation through
// the chat template and feeds only the tokens the session does not hold yet.
// When the rendering no longer starts with what the session holds (turns
// trimmed, a new system message, /reset, a re-tokenized answer), the session
// is cloned at the common prefix, or, without room for a clone, replaced by
// a fresh one that is fed the whole conversation.
//
// Thread-safety: one thread (the chat's); the sink passed to answer() runs on
// the engine thread, one call at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
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
  // Opens the session; Unavailable when the engine has no room for one.
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
  // an error, after which the model starts over in a fresh session.
  Result<Answer> answer(const nlohmann::ordered_json& messages, const SamplingArgs& sampling,
                        const std::function<void(std::string_view)>& sink,
                        const std::atomic<bool>* cancel);

 private:
  explicit ChatModel(app::Engine& engine) : engine_(&engine) {}
  Result<std::vector<Token>> render(const nlohmann::ordered_json& messages) const;
  // Makes the session hold only held_[0, keep) (or less: see the class
  // comment); false when no session could be had at all.
  bool rewind(std::size_t keep);
  bool restart();

  app::Engine* engine_;
  std::optional<Session> session_;
  std::vector<Token> held_;  // what the session holds, its pending token included
};

}  // namespace cellm::cli
