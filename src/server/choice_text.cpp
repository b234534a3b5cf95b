#include "server/choice_text.h"

namespace cellm::server {

Result<ChoiceText> ChoiceText::create(std::unique_ptr<TokenTextStream> stream,
                                      std::vector<std::string> stops, std::int64_t min_tokens) {
  CELLM_ASSIGN_OR_RETURN(text::StopMatcher matcher, text::StopMatcher::create(std::move(stops)));
  return ChoiceText(std::move(stream), std::move(matcher), min_tokens);
}

std::string ChoiceText::feed(std::string_view piece) {
  // Text released while the minimum is not yet past (an empty piece or the
  // detokenizer's tail included) is early text: the boundary grows over it.
  // Without a minimum nothing is early, not even a tail after no tokens.
  if (min_tokens_ > 0 && tokens_ <= min_tokens_) {
    stops_.ignore_matches_ending_by(stops_.bytes_pushed() + piece.size());
  }
  return stops_.push(piece).text;
}

std::string ChoiceText::push(std::span<const Token> tokens) {
  std::string out;
  for (Token t : tokens) {
    if (finished_ || stops_.stopped()) break;
    tokens_ += 1;
    out += feed(stream_->push(t));
  }
  return out;
}

std::string ChoiceText::finish() {
  if (finished_) return {};
  finished_ = true;
  if (stops_.stopped()) return {};
  std::string out = feed(stream_->finish());
  if (!stops_.stopped()) out += stops_.finish();
  return out;
}

}  // namespace cellm::server
