// probe_chat_template: whether a model can hold a chat, decided from its
// metadata alone (a GGUF file's header, which is memory-mapped and parsed
// without touching the weights, or a Hugging Face folder's
// chat_template.jinja / tokenizer_config.json), so that `cellm chat` refuses
// a model without a usable template before spending the time and memory of
// loading it.
//
// Thread-safety: a pure function of the files it reads; reentrant.
#pragma once

#include <filesystem>

#include "cellm/status.h"

namespace cellm::app {

// OK when the model at `path` ships a chat template that cellm can run.
// NotFound when it ships none; the parse error (with its line:column) when
// the template uses something cellm does not implement; the reader's error
// when the metadata cannot be read. Messages name the model.
Status probe_chat_template(const std::filesystem::path& path);

}  // namespace cellm::app
