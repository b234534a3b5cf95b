#include "server/choice_text.h"

namespace cellm::server {

std::string ChoiceText::push(std::span<const Token> tokens) {
  if (finished_) return {};
  std::string text;
  for (Token t : tokens) {
    tokens_ += 1;
    text += stream_->push(t);
  }
  return cut_.push(text);
}

std::string ChoiceText::finish(std::span<const Token> tokens,
                               const std::optional<StopStringMatch>& stop) {
  if (finished_) return {};
  finished_ = true;
  std::string rest;
  for (Token t : tokens) {
    tokens_ += 1;
    rest += stream_->push(t);
  }
  rest += stream_->finish();
  std::optional<std::int64_t> from_match;
  if (stop) {
    stop_index_ = stop->index;
    from_match = stop->text_bytes - stop->offset;
  }
  return cut_.finish(rest, from_match);
}

}  // namespace cellm::server
