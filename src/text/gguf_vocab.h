// The tokenizer description a GGUF file carries (tokenizer.ggml.* metadata),
// as plain arrays, so the GGUF reader (src/format) can hand it over without
// this library parsing GGUF. Two models are supported:
//   "gpt2":  byte-level BPE from tokens + merges; `pre` picks the split regex.
//   "llama": SentencePiece BPE from tokens + scores (highest score merges
//            first) with <0xXX> byte fallback and ▁ for spaces.
//
// Thread-safety: a plain value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cellm::text {

// tokenizer.ggml.token_type values.
enum class GgufTokenType : std::int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct GgufVocab {
  std::string model;                // tokenizer.ggml.model
  std::string pre;                  // tokenizer.ggml.pre (gpt2): "llama-bpe", "qwen2", "gpt2", ...
  std::vector<std::string> tokens;  // tokenizer.ggml.tokens
  std::vector<float> scores;        // tokenizer.ggml.scores (llama)
  std::vector<std::string> merges;  // tokenizer.ggml.merges (gpt2), "a b"
  std::vector<std::int32_t> token_types;  // tokenizer.ggml.token_type (empty: all normal)
  std::optional<std::int32_t> bos;        // tokenizer.ggml.bos_token_id
  std::optional<std::int32_t> eos;        // tokenizer.ggml.eos_token_id
  std::optional<std::int32_t> unk;        // tokenizer.ggml.unknown_token_id
  std::optional<bool> add_bos;            // default: true for llama, false for gpt2
  std::optional<bool> add_eos;            // default: false
  std::optional<bool> add_space_prefix;   // llama; default true
};

}  // namespace cellm::text
