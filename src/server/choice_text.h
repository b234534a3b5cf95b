// ChoiceText: the token → text path of one choice. Tokens go through the
// model's streaming detokenizer and the text through a StopCut: stop strings
// are matched by the engine (GenConfig::stop_strings), which ends the choice
// in the step whose token completes one and says where the match began; the
// text side only holds back a streamed tail that could still begin a stop
// string and, at the end, cuts the text at the engine's match (inside a
// token if need be), so nothing from the stop string onwards is released.
// min_tokens needs nothing here: the engine does not report a match that
// ends within the first min_tokens tokens' text.
//
// Thread-safety: one ChoiceText per choice, used by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cellm/runner.h"
#include "cellm/types.h"
#include "server/generation_service.h"
#include "text/stop_cut.h"

namespace cellm::server {

class ChoiceText {
 public:
  // `stops` are the request's stop strings (vetted by check_request).
  ChoiceText(std::unique_ptr<TokenTextStream> stream, std::vector<std::string> stops)
      : stream_(std::move(stream)), cut_(std::move(stops)) {}

  // Text that became final with `tokens`, from an update that is not the
  // last; a tail that could begin a stop string is held back.
  std::string push(std::span<const Token> tokens);
  // The last update: its tokens, and the engine's match when it ended on a
  // stop string (FinishReason::kStopString). Returns the rest of the text,
  // cut at the match. Later calls return "".
  std::string finish(std::span<const Token> tokens,
                     const std::optional<StopStringMatch>& stop = std::nullopt);

  bool stopped_by_string() const { return stop_index_ >= 0; }
  // The matched stop string's position in the list, -1 when none matched.
  int stop_index() const { return stop_index_; }
  // Tokens delivered (the one that completed a stop string included).
  std::int64_t tokens() const { return tokens_; }

 private:
  std::unique_ptr<TokenTextStream> stream_;
  text::StopCut cut_;
  std::int64_t tokens_ = 0;
  int stop_index_ = -1;
  bool finished_ = false;
};

}  // namespace cellm::server
