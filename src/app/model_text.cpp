#include "app/model_text.h"

#include <algorithm>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/files.h"

namespace cellm::app {
namespace {

Status missing_key(std::string_view key, const std::string& path) {
  return data_loss(
      "{}: GGUF metadata lacks '{}', so no tokenizer can be built; use a GGUF "
      "converted with its vocabulary, or a Hugging Face folder",
      path, key);
}

Result<std::vector<std::string>> string_array(const format::GgufFile& gguf, std::string_view key) {
  const format::GgufValue* v = gguf.find(key);
  if (v == nullptr) return missing_key(key, gguf.path());
  if (!v->is_array() || v->strings.size() != v->array_size()) {
    return data_loss("{}: GGUF metadata '{}' is not an array of strings", gguf.path(), key);
  }
  return v->strings;
}

std::optional<std::int32_t> optional_id(const format::GgufFile& gguf, std::string_view key) {
  const format::GgufValue* v = gguf.find(key);
  if (v == nullptr) return std::nullopt;
  auto u = v->as_uint();
  if (!u || *u > 0x7fffffffu) return std::nullopt;
  return static_cast<std::int32_t>(*u);
}

std::optional<bool> optional_bool(const format::GgufFile& gguf, std::string_view key) {
  const format::GgufValue* v = gguf.find(key);
  return v == nullptr ? std::nullopt : v->as_bool();
}

Result<nlohmann::json> read_json(const std::filesystem::path& path) {
  CELLM_ASSIGN_OR_RETURN(const std::string text, read_file(path));
  auto doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded()) return data_loss("{} is not valid JSON", path.string());
  return doc;
}

}  // namespace

Result<text::GgufVocab> gguf_vocab(const format::GgufFile& gguf) {
  text::GgufVocab vocab;
  CELLM_ASSIGN_OR_RETURN(auto model, gguf.get_string("tokenizer.ggml.model"));
  if (!model) return missing_key("tokenizer.ggml.model", gguf.path());
  vocab.model = *model;
  CELLM_ASSIGN_OR_RETURN(auto pre, gguf.get_string("tokenizer.ggml.pre"));
  vocab.pre = pre.value_or("");
  CELLM_ASSIGN_OR_RETURN(vocab.tokens, string_array(gguf, "tokenizer.ggml.tokens"));
  if (const format::GgufValue* scores = gguf.find("tokenizer.ggml.scores")) {
    vocab.scores.assign(scores->floats.begin(), scores->floats.end());
  }
  if (gguf.find("tokenizer.ggml.merges") != nullptr) {
    CELLM_ASSIGN_OR_RETURN(vocab.merges, string_array(gguf, "tokenizer.ggml.merges"));
  }
  if (const format::GgufValue* types = gguf.find("tokenizer.ggml.token_type")) {
    vocab.token_types.reserve(types->ints.size());
    for (std::int64_t t : types->ints) vocab.token_types.push_back(static_cast<std::int32_t>(t));
  }
  vocab.bos = optional_id(gguf, "tokenizer.ggml.bos_token_id");
  vocab.eos = optional_id(gguf, "tokenizer.ggml.eos_token_id");
  vocab.unk = optional_id(gguf, "tokenizer.ggml.unknown_token_id");
  vocab.add_bos = optional_bool(gguf, "tokenizer.ggml.add_bos_token");
  vocab.add_eos = optional_bool(gguf, "tokenizer.ggml.add_eos_token");
  vocab.add_space_prefix = optional_bool(gguf, "tokenizer.ggml.add_space_prefix");
  return vocab;
}

Result<text::Tokenizer> load_tokenizer(const model::LoadedModel& model) {
  if (const format::GgufFile* gguf = model.gguf_metadata()) {
    CELLM_ASSIGN_OR_RETURN(text::GgufVocab vocab, gguf_vocab(*gguf));
    return text::Tokenizer::from_gguf_vocab(vocab);
  }
  return text::Tokenizer::from_dir(model.path);
}

Result<std::optional<std::string>> load_chat_template_source(const model::LoadedModel& model) {
  return load_chat_template_source(model.path, model.gguf_metadata());
}

Result<std::optional<std::string>> load_chat_template_source(const std::filesystem::path& path,
                                                             const format::GgufFile* gguf) {
  if (gguf != nullptr) {
    CELLM_ASSIGN_OR_RETURN(auto tmpl, gguf->get_string("tokenizer.chat_template"));
    return tmpl;
  }
  const auto jinja = path / "chat_template.jinja";
  if (std::filesystem::exists(jinja)) {
    CELLM_ASSIGN_OR_RETURN(std::string text, read_file(jinja));
    return std::optional<std::string>(std::move(text));
  }
  const auto config = path / "tokenizer_config.json";
  if (!std::filesystem::exists(config)) return std::optional<std::string>();
  CELLM_ASSIGN_OR_RETURN(nlohmann::json doc, read_json(config));
  auto it = doc.find("chat_template");
  if (it == doc.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (it->is_array()) {  // named templates: take "default"
    for (const auto& entry : *it) {
      if (entry.value("name", "") == "default" && entry.contains("template")) {
        return std::optional<std::string>(entry["template"].get<std::string>());
      }
    }
  }
  return data_loss("{}: chat_template has an unexpected form", config.string());
}

SpecialTokenText special_token_text(const text::Tokenizer& tokenizer) {
  SpecialTokenText out;
  if (auto bos = tokenizer.bos_id()) out.bos = tokenizer.id_to_token(*bos).value_or("");
  if (auto eos = tokenizer.eos_id()) out.eos = tokenizer.id_to_token(*eos).value_or("");
  return out;
}

std::vector<Token> stop_token_ids(const model::LoadedModel& model,
                                  const text::Tokenizer& tokenizer) {
  std::vector<Token> ids;
  auto add = [&](std::int64_t id) {
    if (id >= 0 && id < tokenizer.vocab_size() &&
        std::find(ids.begin(), ids.end(), static_cast<Token>(id)) == ids.end()) {
      ids.push_back(static_cast<Token>(id));
    }
  };
  for (std::int64_t id : model.spec.eos_token_ids) add(id);
  if (auto eos = tokenizer.eos_id()) add(*eos);
  // Chat models end a turn with a token the base EOS may not cover.
  for (const char* turn_end : {"<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>"}) {
    if (auto id = tokenizer.token_to_id(turn_end)) add(*id);
  }
  return ids;
}

}  // namespace cellm::app
