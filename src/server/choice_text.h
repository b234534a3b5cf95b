// ChoiceText: the token → text path of one choice. Tokens go through the
// model's streaming detokenizer, the text through the stop-string matcher, so
// a stop string split across tokens is still found and nothing from the stop
// string onwards is ever released. Counts the tokens that reached the client.
// With min_tokens, the text of the first min_tokens tokens bypasses the
// matcher (a stop string cannot end a choice before min_tokens, as EOS
// cannot); matching starts with the text that follows.
//
// Thread-safety: one ChoiceText per choice, used by one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cellm/types.h"
#include "server/generation_service.h"
#include "text/stop_matcher.h"

namespace cellm::server {

class ChoiceText {
 public:
  ChoiceText(std::unique_ptr<TokenTextStream> stream, text::StopMatcher stops,
             std::int64_t min_tokens = 0);

  // Text that became final with `tokens`. Once a stop string matched, the
  // remaining tokens (of this call and later ones) are neither shown nor
  // counted: the client never sees them.
  std::string push(std::span<const Token> tokens);
  // The generation ended: whatever was held is released (nothing after a
  // stop string).
  std::string finish();

  bool stopped_by_string() const { return stops_.stopped(); }
  std::int64_t tokens() const { return tokens_; }

 private:
  std::unique_ptr<TokenTextStream> stream_;
  text::StopMatcher stops_;
  std::int64_t min_tokens_;
  std::int64_t tokens_ = 0;
  bool finished_ = false;
};

}  // namespace cellm::server
