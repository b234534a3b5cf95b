// Streaming detokenization: token ids arrive one at a time and come back as
// text as soon as that text is final. The concatenation of everything push()
// and finish() return equals Tokenizer::decode of all the ids (same
// skip_special), and each returned piece is complete UTF-8:
//   - byte-level tokens that end inside a character are held until it
//     completes (or proves invalid, which then yields U+FFFD as decode does);
//   - a run of byte-fallback tokens (<0xE6><0x97><0xA5>) is held until a
//     non-byte token ends it, because HF turns a whole invalid run into
//     U+FFFD per byte;
//   - start-of-text rules (Strip dropping the leading space, Metaspace dropping
//     the ▁ of the first token) apply only to the stream's first token; later
//     leading spaces are kept.
// Not handled: a Strip decoder with stop > 0 after Fuse (trailing strip of the
// whole text) is applied per released piece; no shipped tokenizer uses it.
//
// Thread-safety: one StreamingDetokenizer per stream; not for concurrent use.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace cellm::text {

class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(Tokenizer tokenizer, bool skip_special = true);

  // The text that became final with `id` (often empty while held).
  std::string push(std::int32_t id);
  // End of stream: everything still held, unfinished characters repaired.
  std::string finish();
  // Starts a new stream.
  void reset();
  // Number of tokens whose text is held back.
  std::size_t pending_tokens() const { return pending_.size(); }

 private:
  Tokenizer tokenizer_;
  bool skip_special_;
  std::vector<std::string> pending_;
  bool at_start_ = true;
};

}  // namespace cellm::text
