// ChoiceText: the token → text path of one choice. Tokens go through the
// model's streaming detokenizer, the text through the stop-string matcher, so
// a stop string split across tokens is still found and nothing from the stop
// string onwards is ever released. Counts the tokens that reached the client.
// With min_tokens (vLLM's rule): no stop string can end a choice before
// min_tokens tokens, but once they are out a match counts if it ends in later
// text, even when it began inside the first min_tokens tokens' text. The
// matcher is told where that early text ends, so it both passes over matches
// lying wholly inside it and holds back its tail that could begin a later one.
//
// Thread-safety: one ChoiceText per choice, used by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cellm/status.h"
#include "cellm/types.h"
#include "server/generation_service.h"
#include "text/stop_matcher.h"

namespace cellm::server {

class ChoiceText {
 public:
  // InvalidArgument for an empty or malformed stop string (see StopMatcher).
  static Result<ChoiceText> create(std::unique_ptr<TokenTextStream> stream,
                                   std::vector<std::string> stops, std::int64_t min_tokens = 0);

  // Text that became final with `tokens`. Once a stop string matched, the
  // remaining tokens (of this call and later ones) are neither shown nor
  // counted: the client never sees them.
  std::string push(std::span<const Token> tokens);
  // The generation ended: whatever was held is released (nothing after a
  // stop string).
  std::string finish();

  bool stopped_by_string() const { return stops_.stopped(); }
  // The matched stop string's position in the list, -1 when none matched.
  int stop_index() const { return stops_.stop_index(); }
  std::int64_t tokens() const { return tokens_; }

 private:
  ChoiceText(std::unique_ptr<TokenTextStream> stream, text::StopMatcher matcher,
             std::int64_t min_tokens)
      : stream_(std::move(stream)), stops_(std::move(matcher)), min_tokens_(min_tokens) {}
  // Text that the detokenizer released after the tokens_-th token.
  std::string feed(std::string_view piece);

  std::unique_ptr<TokenTextStream> stream_;
  text::StopMatcher stops_;
  std::int64_t min_tokens_;
  std::int64_t tokens_ = 0;
  bool finished_ = false;
};

}  // namespace cellm::server
