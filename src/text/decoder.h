// Decoders of the tokenizer.json pipeline (ByteLevel, ByteFallback, Fuse,
// Strip, Replace, Metaspace, Sequence): they turn token strings back into
// text. A DecoderChain runs them in order on the list of token strings, as HF
// decode_chain does, and produces raw bytes; callers repair invalid UTF-8.
// `at_start` false means the tokens continue earlier output (streaming), so
// rules that only apply at the very start of the text are skipped.
//
// Thread-safety: immutable after construction; decode() is const.
#pragma once

#include <string>
#include <vector>

namespace cellm::text {

enum class DecoderKind { kByteLevel, kByteFallback, kFuse, kStrip, kReplace, kMetaspace };

struct DecoderStep {
  DecoderKind kind;
  std::string pattern;  // Replace: text to find; Strip: the character; Metaspace: replacement
  std::string content;  // Replace: replacement text
  int start = 0;        // Strip
  int stop = 0;         // Strip
  bool prepend = true;  // Metaspace: prepend scheme is not "never"
};

class DecoderChain {
 public:
  DecoderChain() = default;
  // No steps and `join_with_space`: HF's default of joining tokens with " ".
  DecoderChain(std::vector<DecoderStep> steps, bool join_with_space)
      : steps_(std::move(steps)), join_with_space_(join_with_space) {}

  std::string decode(std::vector<std::string> tokens, bool at_start) const;
  // Whether the output of `last_token` may still change with the tokens
  // that follow (an unfinished ByteFallback run).
  bool continues(const std::string& last_token) const;

 private:
  std::vector<DecoderStep> steps_;
  bool join_with_space_ = false;
};

// "<0xAB>" → 0xAB, else -1.
int parse_byte_token(const std::string& token);

}  // namespace cellm::text
