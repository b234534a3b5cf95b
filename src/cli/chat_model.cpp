#include "cli/chat_model.h"

#include <algorithm>
#include <utility>

namespace cellm::cli {

Result<ChatModel> ChatModel::open(app::Engine& engine) {
  ChatModel model(engine);
  if (!model.restart()) return unavailable("the engine has no room for a chat session");
  return model;
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

bool ChatModel::restart() {
  session_.reset();  // frees its slot first: the engine handles requests in order
  held_.clear();
  session_ = engine_->runner().open_session_async().get();
  return session_.has_value();
}

bool ChatModel::rewind(std::size_t keep) {
  // Only committed tokens can be cloned; a pending one is fed again.
  keep = std::min<std::size_t>(keep, static_cast<std::size_t>(session_->position()));
  auto clone = session_->clone_async(static_cast<Position>(keep)).get();
  if (!clone) return restart();  // no room for a clone beside the session
  *session_ = std::move(*clone);
  held_.resize(keep);
  return true;
}

Result<ChatModel::Answer> ChatModel::answer(const nlohmann::ordered_json& messages,
                                            const SamplingArgs& sampling,
                                            const std::function<void(std::string_view)>& sink,
                                            const std::atomic<bool>* cancel) {
  if (!session_ && !restart()) return unavailable("the engine has no room for a chat session");
  CELLM_ASSIGN_OR_RETURN(const std::vector<Token> full, render(messages));
  if (full.empty()) return internal_error("the chat template rendered no tokens");
  const auto mismatch = std::mismatch(held_.begin(), held_.end(), full.begin(), full.end());
  // At least one token must be fed for the model to answer.
  std::size_t keep =
      std::min(static_cast<std::size_t>(mismatch.first - held_.begin()), full.size() - 1);
  if (keep < held_.size()) {
    if (!rewind(keep)) return unavailable("the engine has no room for a chat session");
    keep = held_.size();
  }
  std::vector<Token> delta(full.begin() + static_cast<std::ptrdiff_t>(keep), full.end());
  held_.insert(held_.end(), delta.begin(), delta.end());

  StreamResult result =
      stream_generation(*engine_, *session_, std::move(delta), sampling, sink, cancel);
  if (result.reason == FinishReason::kFailed) {
    // The session's state is unknown after a failure: start over.
    restart();
    return internal_error("generation failed: {}", result.error);
  }
  held_.insert(held_.end(), result.tokens.begin(), result.tokens.end());
  if (result.reason == FinishReason::kCancelled) {
    // A cancelled run may have committed only part of its input and may or
    // may not hold a pending token: keep exactly what is committed.
    if (!rewind(static_cast<std::size_t>(session_->position()))) {
      return unavailable("the engine has no room for a chat session");
    }
  }
  return Answer{std::move(result.text), result.reason,
                static_cast<std::int64_t>(result.tokens.size())};
}

}  // namespace cellm::cli
