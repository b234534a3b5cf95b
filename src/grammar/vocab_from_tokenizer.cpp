#include "grammar/vocab_from_tokenizer.h"

#include <algorithm>

#include "text/decoder.h"

namespace cellm::grammar {

std::vector<std::string> token_bytes_from_tokenizer(const text::Tokenizer& tokenizer,
                                                    std::int64_t vocab_size) {
  const std::int64_t n = std::max<std::int64_t>(vocab_size, tokenizer.vocab_size());
  std::vector<std::string> bytes(static_cast<std::size_t>(n));
  const text::DecoderChain& decoder = tokenizer.decoder();
  for (std::int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const std::string* text = tokenizer.token_text(id);
    if (text == nullptr || text->empty() || tokenizer.is_special(id)) continue;
    // continues() is true exactly for byte-fallback tokens of a decoder
    // that has the step: alone, decode() would turn the byte into U+FFFD.
    if (decoder.continues(*text)) {
      bytes[static_cast<std::size_t>(id)] =
          std::string(1, static_cast<char>(text::parse_byte_token(*text)));
      continue;
    }
    bytes[static_cast<std::size_t>(id)] = decoder.decode({*text}, /*at_start=*/false);
  }
  return bytes;
}

std::shared_ptr<const TokenVocabulary> vocabulary_from_tokenizer(const text::Tokenizer& tokenizer,
                                                                 std::int64_t vocab_size) {
  return TokenVocabulary::create(token_bytes_from_tokenizer(tokenizer, vocab_size));
}

}  // namespace cellm::grammar
