#include "executor/draft_model_proposer.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "core/log.h"

namespace cellm::executor {

Result<std::shared_ptr<DraftModelProposer>> DraftModelProposer::create(
    std::unique_ptr<RawStepExecutor> draft, std::shared_ptr<void> resources,
    std::int64_t target_vocab, std::string label) {
  if (!draft) return invalid_argument("draft model {}: no executor", label);
  if (draft->vocab_size() != target_vocab) {
    return invalid_argument(
        "draft model {} has a vocabulary of {} tokens but the target model's has {}: a draft "
        "must share the target's tokenizer (e.g. a smaller model of the same family)",
        label, draft->vocab_size(), target_vocab);
  }
  return std::shared_ptr<DraftModelProposer>(
      new DraftModelProposer(std::move(draft), std::move(resources), std::move(label)));
}

DraftModelProposer::DraftModelProposer(std::unique_ptr<RawStepExecutor> draft,
                                       std::shared_ptr<void> resources, std::string label)
    : resources_(std::move(resources)), draft_(std::move(draft)), label_(std::move(label)) {}

DraftModelProposer::~DraftModelProposer() {
  if (!initialized_) return;
  for (auto& [session, state] : states_) draft_->close_session(state.sid);
}

void DraftModelProposer::initialize() {
  if (initialized_ || broken_) return;
  initialized_ = draft_->initialize();
  if (!initialized_) {
    broken_ = true;
    logged_ = true;
    CELLM_LOG_WARN(
        "speculation: draft model {} failed to initialize (see above); every session decodes "
        "without drafts",
        label_);
  }
}

std::span<const Token> DraftModelProposer::held(SessionId session) const {
  const auto it = states_.find(session);
  if (it == states_.end()) return {};
  return it->second.fed;
}

void DraftModelProposer::fail(SessionId session, const std::string& what) {
  if (const auto it = states_.find(session); it != states_.end()) {
    draft_->close_session(it->second.sid);
    states_.erase(it);
  }
  failed_.insert(session);
  if (!logged_) {
    logged_ = true;
    CELLM_LOG_WARN(
        "speculation: draft model {} failed for session {} (it decodes without drafts; later "
        "failures of this draft are not logged): {}",
        label_, session, what);
  }
}

DraftModelProposer::State* DraftModelProposer::state_for(SessionId session) {
  if (auto it = states_.find(session); it != states_.end()) return &it->second;
  std::optional<SessionId> sid = draft_->open_session();
  if (!sid && !states_.empty()) {
    // The draft holds fewer sessions than the target: the one idle longest
    // gives way (it re-feeds its history if it is asked again).
    auto oldest = std::min_element(states_.begin(), states_.end(), [](const auto& a, const auto& b) {
      return a.second.used < b.second.used;
    });
    draft_->close_session(oldest->second.sid);
    states_.erase(oldest);
    sid = draft_->open_session();
  }
  if (!sid) return nullptr;
  State& state = states_[session];
  state.sid = *sid;
  return &state;
}

std::optional<Token> DraftModelProposer::step(State& state, std::span<const Token> tokens,
                                              std::size_t position) {
  BatchInput batch;
  Input in;
  in.sid = state.sid;
  in.produce_output = true;
  in.offset = 0;
  in.size = tokens.size();
  in.payload = std::make_shared<const std::vector<Token>>(tokens.begin(), tokens.end());
  in.position = static_cast<Position>(position);
  batch.inputs.push_back(std::move(in));
  BatchOutput out;
  ++steps_;
  if (!draft_->execute(batch, out) || out.outputs.size() != 1 || !out.outputs[0] ||
      out.outputs[0]->tokens.size() != 1) {
    return std::nullopt;
  }
  // The executor committed the fed tokens (rewinding first when the input
  // started below the session's length).
  state.fed.resize(position);
  state.fed.insert(state.fed.end(), tokens.begin(), tokens.end());
  return out.outputs[0]->tokens[0];
}

void DraftModelProposer::propose(SessionId session, std::span<const Token> history,
                                 std::size_t max_tokens, std::vector<Token>& out) {
  if (!initialized_) initialize();  // an owner that never called it
  if (broken_ || max_tokens == 0 || history.empty() || failed_.contains(session)) return;
  // Drafting k tokens feeds the history and k - 1 drafts.
  const auto room = static_cast<std::size_t>(std::max(draft_->max_session_tokens(), 0));
  if (history.size() > room) return;
  const std::size_t k = std::min(max_tokens, room - history.size() + 1);
  try {
    State* state = state_for(session);
    if (state == nullptr) return;
    state->used = ++clock_;
    // What the draft session holds of the history; at least the last
    // token is fed again, since its row gives the first draft.
    const auto mismatch = std::mismatch(state->fed.begin(), state->fed.end(), history.begin(),
                                        history.end());
    std::size_t common = static_cast<std::size_t>(mismatch.first - state->fed.begin());
    common = std::min(common, history.size() - 1);
    std::optional<Token> next = step(*state, history.subspan(common), common);
    for (std::size_t j = 0; next; ++j) {
      if (*next >= static_cast<Token>(draft_->vocab_size())) break;
      out.push_back(*next);
      if (j + 1 == k) return;
      const Token fed = *next;
      next = step(*state, std::span<const Token>(&fed, 1), history.size() + j);
    }
    if (!next) {
      out.clear();
      fail(session, "a draft step failed (see the executor's log above)");
    }
  } catch (const std::exception& e) {
    out.clear();
    fail(session, e.what());
  }
}

void DraftModelProposer::forget(SessionId session) {
  failed_.erase(session);
  const auto it = states_.find(session);
  if (it == states_.end()) return;
  draft_->close_session(it->second.sid);
  states_.erase(it);
}

}  // namespace cellm::executor
