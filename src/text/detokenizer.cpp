#include "text/detokenizer.h"

#include "core/utf8.h"
#include "text/decoder.h"

namespace cellm::text {

StreamingDetokenizer::StreamingDetokenizer(Tokenizer tokenizer, bool skip_special)
    : tokenizer_(std::move(tokenizer)), skip_special_(skip_special) {}

std::string StreamingDetokenizer::push(std::int32_t id) {
  const std::string* text = tokenizer_.token_text(id);
  if (text == nullptr) return {};  // decode() skips unknown ids too
  if (skip_special_ && tokenizer_.is_special(id)) return {};
  pending_.push_back(*text);
  const DecoderChain& decoder = tokenizer_.decoder();
  if (decoder.continues(pending_.back())) return {};
  std::string bytes = decoder.decode(pending_, at_start_);
  if (utf8::incomplete_tail(bytes) > 0) return {};
  // The pending tokens decode to whole characters that no later token can
  // change: emit them and start afresh after them.
  pending_.clear();
  at_start_ = false;
  return utf8::repair(bytes);
}

std::string StreamingDetokenizer::finish() {
  if (pending_.empty()) return {};
  std::string bytes = tokenizer_.decoder().decode(pending_, at_start_);
  pending_.clear();
  at_start_ = false;
  return utf8::repair(bytes);
}

void StreamingDetokenizer::reset() {
  pending_.clear();
  at_start_ = true;
}

}  // namespace cellm::text
