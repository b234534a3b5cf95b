// Tokenizer: text ↔ token ids with Hugging Face `tokenizers` semantics, built
// from tokenizer.json (BPE models: byte-level like Llama 3 / Qwen, or
// SentencePiece-style with byte fallback like Llama 2 / Gemma) or from GGUF
// vocabulary arrays (see gguf_vocab.h).
//
// encode: invalid UTF-8 in the input is first repaired (each maximal invalid
// subpart becomes U+FFFD), so every byte string has a defined encoding.
// decode: ids outside the vocabulary are skipped; invalid UTF-8 produced by
// byte tokens is repaired the same way.
//
// Thread-safety: a Tokenizer is immutable after creation and cheap to copy
// (shared state); all methods are const and safe to call concurrently.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cellm/status.h"

namespace cellm::text {

struct GgufVocab;
class DecoderChain;
struct TokenizerState;

class Tokenizer {
 public:
  // Parses tokenizer.json text. Unknown component types are NotSupported,
  // missing or malformed fields InvalidArgument, both naming the field.
  static Result<Tokenizer> from_json(std::string_view json);
  // Reads tokenizer.json or tokenizer.json.gz (gzip is detected by content).
  static Result<Tokenizer> from_file(const std::filesystem::path& path);
  // A model folder: tokenizer.json[.gz] plus, when present,
  // tokenizer_config.json for bos/eos.
  static Result<Tokenizer> from_dir(const std::filesystem::path& dir);
  static Result<Tokenizer> from_gguf_vocab(const GgufVocab& vocab);

  // Token ids of `text`; `add_special` applies the post-processor (BOS...).
  // Added/special tokens written in the text are always recognised.
  std::vector<std::int32_t> encode(std::string_view text, bool add_special) const;
  std::string decode(std::span<const std::int32_t> ids, bool skip_special) const;

  std::optional<std::int32_t> token_to_id(std::string_view token) const;
  // The vocabulary string of `id` (byte-level or ▁ form), nullopt if unused
  // or out of range.
  std::optional<std::string> id_to_token(std::int32_t id) const;
  // One past the largest id in use.
  std::int32_t vocab_size() const;
  std::optional<std::int32_t> bos_id() const;
  std::optional<std::int32_t> eos_id() const;
  // Ids the post-processor puts before / after the text with add_special.
  std::span<const std::int32_t> special_prefix() const;
  std::span<const std::int32_t> special_suffix() const;
  bool is_special(std::int32_t id) const;  // skipped by decode(skip_special)
  bool is_added(std::int32_t id) const;    // an added token (special or not)

  // Used by the streaming detokenizer: the decoder on raw token strings.
  const DecoderChain& decoder() const;
  const std::string* token_text(std::int32_t id) const;

 private:
  explicit Tokenizer(std::shared_ptr<const TokenizerState> state) : state_(std::move(state)) {}
  friend Result<Tokenizer> make_tokenizer(std::unique_ptr<TokenizerState> state);
  std::shared_ptr<const TokenizerState> state_;
};

}  // namespace cellm::text
