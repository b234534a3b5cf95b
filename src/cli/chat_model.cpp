#include "cli/chat_model.h"

#include <utility>

namespace cellm::cli {

Result<ChatModel> ChatModel::open(app::Engine& engine) {
  if (engine.prefix_cache_entries() <= 0) {
    return unavailable("the chat needs an engine with a prefix cache (load it with entries > 0)");
  }
  return ChatModel(engine);
}

Result<std::vector<Token>> ChatModel::render(const nlohmann::ordered_json& messages) const {
  CELLM_ASSIGN_OR_RETURN(const std::string text,
                         engine_->render_chat(messages, /*add_generation_prompt=*/true));
  return engine_->encode(text, /*add_special=*/false);
}

Result<std::int64_t> ChatModel::count_tokens(const nlohmann::ordered_json& messages) const {
  CELLM_ASSIGN_OR_RETURN(const std::vector<Token> tokens, render(messages));
  return static_cast<std::int64_t>(tokens.size());
}

Result<ChatModel::Answer> ChatModel::answer(const nlohmann::ordered_json& messages,
                                            const SamplingArgs& sampling,
                                            const std::function<void(std::string_view)>& sink,
                                            const std::atomic<bool>* cancel) {
  CELLM_ASSIGN_OR_RETURN(std::vector<Token> prompt, render(messages));
  if (prompt.empty()) return internal_error("the chat template rendered no tokens");
  StreamResult result = stream_generation(*engine_, std::move(prompt), sampling, sink, cancel);
  if (result.reason == FinishReason::kFailed) {
    return internal_error("generation failed: {}", result.error);
  }
  return Answer{std::move(result.text), result.reason,
                static_cast<std::int64_t>(result.tokens.size())};
}

}  // namespace cellm::cli
