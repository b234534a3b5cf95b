#include "server/choice_text.h"

#include <algorithm>

namespace cellm::server {

Result<ChoiceText> ChoiceText::create(std::unique_ptr<TokenTextStream> stream,
                                      std::vector<std::string> stops, std::int64_t min_tokens) {
  CELLM_ASSIGN_OR_RETURN(text::StopMatcher matcher, text::StopMatcher::create(stops));
  return ChoiceText(std::move(stream), std::move(matcher), std::move(stops), min_tokens);
}

ChoiceText::ChoiceText(std::unique_ptr<TokenTextStream> stream, text::StopMatcher matcher,
                       std::vector<std::string> stops, std::int64_t min_tokens)
    : stream_(std::move(stream)),
      stops_(std::move(matcher)),
      stop_strings_(std::move(stops)),
      min_tokens_(min_tokens),
      windowed_(min_tokens > 0 && !stop_strings_.empty()) {}

std::size_t ChoiceText::held_prefix_length() const {
  // The longest tail of the window that a stop string could still complete.
  std::size_t hold = 0;
  for (const std::string& stop : stop_strings_) {
    for (std::size_t k = std::min(stop.size() - 1, window_.size()); k > hold; --k) {
      if (window_.compare(window_.size() - k, k, stop, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  return hold;
}

std::string ChoiceText::absorb(const std::string& piece) {
  window_ += piece;
  if (tokens_ <= min_tokens_) {
    boundary_ = window_.size();  // still early text: nothing may match yet
  } else {
    // The earliest match that ends past the boundary; one lying wholly in
    // the early text was made before min_tokens and does not count.
    std::size_t best = std::string::npos;
    for (const std::string& stop : stop_strings_) {
      for (std::size_t at = window_.find(stop); at != std::string::npos && at < best;
           at = window_.find(stop, at + 1)) {
        if (at + stop.size() > boundary_) {
          best = at;
          break;
        }
      }
    }
    if (best != std::string::npos) {
      std::string out = window_.substr(0, best);
      window_.clear();
      stopped_ = true;
      return out;
    }
  }
  const std::size_t release = window_.size() - held_prefix_length();
  std::string out = window_.substr(0, release);
  window_.erase(0, release);
  boundary_ = boundary_ > release ? boundary_ - release : 0;
  if (tokens_ > min_tokens_ && boundary_ == 0) {
    // Only later text is held, and it holds no match: the plain matcher
    // takes over from here, starting with that text.
    windowed_ = false;
    text::StopMatcher::Output o = stops_.push(window_);
    window_.clear();
    out += o.text;
  }
  return out;
}

std::string ChoiceText::push(std::span<const Token> tokens) {
  std::string out;
  for (Token t : tokens) {
    if (finished_ || stopped_by_string()) break;
    tokens_ += 1;
    const std::string piece = stream_->push(t);
    if (windowed_) {
      // Called even for an empty piece: the minimum may have just passed.
      out += absorb(piece);
      continue;
    }
    if (piece.empty()) continue;
    if (tokens_ <= min_tokens_) {
      out += piece;  // no stop strings: nothing to look for before the minimum
      continue;
    }
    out += stops_.push(piece).text;
  }
  return out;
}

std::string ChoiceText::finish() {
  if (finished_) return {};
  finished_ = true;
  if (stopped_by_string()) return {};
  std::string out;
  const std::string tail = stream_->finish();
  if (windowed_) {
    out += absorb(tail);
    if (stopped_by_string()) return out;
    if (windowed_) {
      out += window_;
      window_.clear();
      return out;
    }
    return out + stops_.finish();
  }
  if (!tail.empty()) out += stops_.push(tail).text;
  if (!stops_.stopped()) out += stops_.finish();
  return out;
}

}  // namespace cellm::server
