// The text side of a loaded model: its tokenizer (tokenizer.json of a Hugging
// Face folder, or the tokenizer.ggml.* metadata of a GGUF file), its chat
// template source and its stop tokens, found the way each format stores them.
//
// Thread-safety: pure functions over immutable inputs.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cellm/status.h"
#include "cellm/types.h"
#include "format/gguf.h"
#include "model/loader.h"
#include "text/gguf_vocab.h"
#include "text/tokenizer.h"

namespace cellm::app {

// tokenizer.ggml.* metadata as plain arrays.
Result<text::GgufVocab> gguf_vocab(const format::GgufFile& gguf);
Result<text::Tokenizer> load_tokenizer(const model::LoadedModel& model);

// The Jinja source of the model's chat template, if it ships one
// (tokenizer_config.json's chat_template, or tokenizer.chat_template in GGUF).
Result<std::optional<std::string>> load_chat_template_source(const model::LoadedModel& model);
// The same from a model's path and, for GGUF, its parsed file alone (no
// weights loaded): what a caller needs before deciding to load the model.
Result<std::optional<std::string>> load_chat_template_source(const std::filesystem::path& path,
                                                             const format::GgufFile* gguf);

// Special-token strings the template binds (bos_token, eos_token).
struct SpecialTokenText {
  std::string bos;
  std::string eos;
};
SpecialTokenText special_token_text(const text::Tokenizer& tokenizer);

// EOS ids from the model (generation_config / GGUF) plus the tokenizer's EOS,
// and the chat template's end-of-turn token when the vocabulary has one.
std::vector<Token> stop_token_ids(const model::LoadedModel& model,
                                  const text::Tokenizer& tokenizer);

}  // namespace cellm::app
