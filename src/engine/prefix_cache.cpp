#include "cellm/prefix_cache.h"

#include <algorithm>
#include <limits>
#include <mutex>
#include <new>
#include <tuple>

#include "engine/engine_core.h"

namespace cellm {
namespace {

constexpr std::size_t kMaxTokens = static_cast<std::size_t>(std::numeric_limits<Position>::max());

std::size_t common_prefix(const std::vector<Token>& a, const std::vector<Token>& b) {
  const std::size_t n = std::min(a.size(), b.size());
  std::size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

// Shared by the capture and every copy of its wrapped callback. The snapshot
// is bound to the source's identity, not to the Session object, so moving or
// reassigning the source does not change what is captured.
struct PromptCapture::State {
  std::mutex mu;
  PrefixCache* cache = nullptr;
  std::shared_ptr<detail::EngineCore> core;
  std::shared_ptr<detail::SessionState> source;
  std::vector<Token> tokens;
  bool requested = false;
  bool collected = false;
  std::future<std::optional<Session>> snapshot;
};

PrefixCache::PrefixCache(std::size_t max_entries) : max_entries_(max_entries) {}

bool PrefixCache::insert(std::vector<Token> tokens, Session snapshot) {
  if (!enabled() || tokens.empty() || tokens.size() > kMaxTokens || !snapshot.valid() ||
      static_cast<std::size_t>(snapshot.position()) != tokens.size()) {
    return false;  // `snapshot` is released on return
  }
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->tokens == tokens) {
      entries_.splice(entries_.begin(), entries_, it);
      return true;
    }
  }
  entries_.push_front(Entry{std::move(tokens), std::move(snapshot)});
  while (entries_.size() > max_entries_) entries_.pop_back();
  return true;
}

std::optional<PrefixMatch> PrefixCache::lookup(const std::vector<Token>& request) {
  if (request.size() < 2 || entries_.empty()) return std::nullopt;
  try {
    // (match, recency rank, entry): longest first, then most recent.
    std::vector<std::tuple<std::size_t, std::size_t, std::list<Entry>::iterator>> candidates;
    std::size_t rank = 0;
    for (auto it = entries_.begin(); it != entries_.end(); ++it, ++rank) {
      // The request's last token is always left for a forward to predict from.
      const std::size_t match = std::min(common_prefix(it->tokens, request), request.size() - 1);
      if (match > 0) candidates.emplace_back(match, rank, it);
    }
    std::sort(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) {
      if (std::get<0>(a) != std::get<0>(b)) return std::get<0>(a) > std::get<0>(b);
      return std::get<1>(a) < std::get<1>(b);
    });
    for (auto& [match, r, it] : candidates) {
      std::optional<Session> child;
      try {
        child = it->snapshot.clone_async(static_cast<Position>(match)).get();
      } catch (const std::bad_alloc&) {
        throw;
      } catch (...) {
        child.reset();
      }
      if (!child || !child->valid()) continue;
      entries_.splice(entries_.begin(), entries_, it);
      return PrefixMatch{std::move(*child), match};
    }
  } catch (const std::bad_alloc&) {
    return std::nullopt;
  }
  return std::nullopt;
}

void PrefixCache::clear() {
  entries_.clear();
}

PromptCapture PrefixCache::capture_prompt(const Session& source, std::vector<Token> tokens) {
  PromptCapture capture;
  if (!enabled() || tokens.empty() || tokens.size() > kMaxTokens || !source.valid()) {
    return capture;
  }
  capture.state_ = std::make_shared<PromptCapture::State>();
  capture.state_->cache = this;
  capture.state_->core = source.core_;
  capture.state_->source = source.state_;
  capture.state_->tokens = std::move(tokens);
  return capture;
}

GenerationCallback PromptCapture::wrap(GenerationCallback cb) const {
  if (!state_) return cb;
  return [state = state_, cb = std::move(cb)](const GenerationUpdate& update) {
    if (!update.tokens.empty()) {
      std::lock_guard lock(state->mu);
      if (!state->requested) {
        state->requested = true;
        // Queued now, so it runs before the next forward can move the source.
        state->snapshot = Session::clone_of(state->core, state->source,
                                            static_cast<Position>(state->tokens.size()));
      }
    }
    if (cb) cb(update);
  };
}

bool PromptCapture::collect() {
  if (!state_) return false;
  std::shared_ptr<State> state = std::move(state_);
  std::future<std::optional<Session>> snapshot;
  std::vector<Token> tokens;
  {
    std::lock_guard lock(state->mu);
    if (!state->requested || state->collected) return false;
    state->collected = true;
    snapshot = std::move(state->snapshot);
    tokens = state->tokens;
  }
  if (!snapshot.valid()) return false;
  std::optional<Session> session;
  try {
    session = snapshot.get();
  } catch (...) {
    return false;
  }
  if (!session) return false;
  return state->cache->insert(std::move(tokens), std::move(*session));
}

}  // namespace cellm
