#include "server/choice_text.h"

namespace cellm::server {

ChoiceText::ChoiceText(std::unique_ptr<TokenTextStream> stream, text::StopMatcher stops,
                       std::int64_t min_tokens)
    : stream_(std::move(stream)), stops_(std::move(stops)), min_tokens_(min_tokens) {}

std::string ChoiceText::push(std::span<const Token> tokens) {
  std::string out;
  for (Token t : tokens) {
    if (finished_ || stops_.stopped()) break;
    tokens_ += 1;
    const std::string piece = stream_->push(t);
    if (piece.empty()) continue;
    if (tokens_ <= min_tokens_) {
      out += piece;
      continue;
    }
    text::StopMatcher::Output o = stops_.push(piece);
    out += o.text;
  }
  return out;
}

std::string ChoiceText::finish() {
  if (finished_) return {};
  finished_ = true;
  if (stops_.stopped()) return {};
  std::string out;
  const std::string tail = stream_->finish();
  if (!tail.empty()) out += stops_.push(tail).text;
  if (!stops_.stopped()) out += stops_.finish();
  return out;
}

}  // namespace cellm::server
