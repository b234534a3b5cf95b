// cellm::Engine (include/cellm/engine.h), the embedders' API, over
// app::Engine, which stays the one assembly of model, tokenizer, template,
// program, executor and runner that the CLI and the server use too. This
// file only translates: JSON and private types stay on this side.
#include "cellm/engine.h"

#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

#include "app/engine.h"
#include "core/log.h"
#include "text/detokenizer.h"
#include "text/tokenizer.h"

namespace cellm {

namespace {

// Token is 64-bit on the executor side; the tokenizer's ids are int32. An id
// beyond int32 is outside every vocabulary: -1 is skipped the same way.
std::int32_t tokenizer_id(Token token) {
  return token > static_cast<Token>(std::numeric_limits<std::int32_t>::max())
             ? -1
             : static_cast<std::int32_t>(token);
}

Result<nlohmann::ordered_json> parse_json(std::string_view text, std::string_view what,
                                          bool want_array) {
  nlohmann::ordered_json parsed =
      nlohmann::ordered_json::parse(text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    return invalid_argument("{} is not valid JSON", what);
  }
  if (want_array && !parsed.is_array()) {
    return invalid_argument("{} must be a JSON array of messages, got {}", what,
                            parsed.type_name());
  }
  if (!want_array && !parsed.is_object()) {
    return invalid_argument("{} must be a JSON object of template variables, got {}", what,
                            parsed.type_name());
  }
  return parsed;
}

}  // namespace

// ---- TextStream ----

struct TextStream::Impl {
  text::StreamingDetokenizer detokenizer;
};

TextStream::TextStream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TextStream::TextStream(TextStream&&) noexcept = default;
TextStream& TextStream::operator=(TextStream&&) noexcept = default;
TextStream::~TextStream() = default;

std::string TextStream::push(Token token) {
  return impl_->detokenizer.push(tokenizer_id(token));
}

std::string TextStream::finish() {
  return impl_->detokenizer.finish();
}

// ---- Engine ----

struct Engine::Impl {
  std::unique_ptr<app::Engine> engine;
};

Result<std::unique_ptr<Engine>> Engine::open(const EngineOptions& options,
                                             const Progress& progress) {
  if (options.model.empty()) {
    return invalid_argument("EngineOptions::model is empty: give the path of a .gguf file or "
                            "a Hugging Face model folder");
  }
  // app::Engine::load checks the rest (negative sizes, the path, the backend).
  app::EngineOptions app_options;
  app_options.model = options.model;
  app_options.backend = options.backend;
  app_options.max_sessions = options.max_sessions;
  app_options.max_session_tokens = options.max_session_tokens;
  app_options.prefix_cache_entries = options.prefix_cache_entries;
  app::ProgressCallback on_progress;
  if (progress) {
    on_progress = [&progress](const app::LoadProgress& p) { progress(p.stage, p.fraction); };
  }
  CELLM_ASSIGN_OR_RETURN(std::unique_ptr<app::Engine> engine,
                         app::Engine::load(app_options, on_progress));
  auto impl = std::make_unique<Impl>();
  impl->engine = std::move(engine);
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Runner& Engine::runner() {
  return impl_->engine->runner();
}

Result<std::vector<Token>> Engine::encode(std::string_view text, bool add_special) const {
  return impl_->engine->encode(text, add_special);
}

std::string Engine::decode(std::span<const Token> tokens, bool skip_special) const {
  std::vector<std::int32_t> ids;
  ids.reserve(tokens.size());
  for (Token t : tokens) ids.push_back(tokenizer_id(t));
  return impl_->engine->tokenizer().decode(ids, skip_special);
}

TextStream Engine::text_stream(bool skip_special) const {
  return TextStream(std::make_unique<TextStream::Impl>(
      TextStream::Impl{text::StreamingDetokenizer(impl_->engine->tokenizer(), skip_special)}));
}

bool Engine::has_chat_template() const {
  return impl_->engine->has_chat_template();
}

Result<std::string> Engine::render_chat(std::span<const ChatMessage> messages,
                                        bool add_generation_prompt) const {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) {
    list.push_back({{"role", m.role}, {"content", m.content}});
  }
  return impl_->engine->render_chat(list, add_generation_prompt);
}

Result<std::string> Engine::render_chat_json(std::string_view messages_json,
                                             bool add_generation_prompt,
                                             std::string_view variables_json) const {
  CELLM_ASSIGN_OR_RETURN(nlohmann::ordered_json messages,
                         parse_json(messages_json, "the messages", /*want_array=*/true));
  CELLM_ASSIGN_OR_RETURN(nlohmann::ordered_json variables,
                         parse_json(variables_json, "the template variables",
                                    /*want_array=*/false));
  return impl_->engine->render_chat(messages, add_generation_prompt, variables);
}

const std::vector<Token>& Engine::stop_tokens() const {
  return impl_->engine->stop_tokens();
}

const SamplingDefaults& Engine::sampling_defaults() const {
  return impl_->engine->generation_defaults();
}

GenConfig Engine::generation_config(std::int64_t max_new_tokens) const {
  GenConfig config;
  config.max_new_tokens = max_new_tokens;
  config.stop_tokens = stop_tokens();
  apply_sampling_defaults(sampling_defaults(), SamplingGiven{}, config.sampling);
  return config;
}

const std::string& Engine::model_name() const {
  return impl_->engine->model_name();
}

const std::string& Engine::backend_name() const {
  return impl_->engine->backend_name();
}

std::int32_t Engine::max_session_tokens() const {
  return impl_->engine->max_session_tokens();
}

std::int32_t Engine::max_sessions() const {
  return impl_->engine->max_sessions();
}

std::int32_t Engine::vocab_size() const {
  return impl_->engine->tokenizer().vocab_size();
}

Status set_log_level(std::string_view level) {
  CELLM_ASSIGN_OR_RETURN(LogLevel parsed, parse_log_level(level));
  set_log_level(parsed);
  return Status::ok();
}

}  // namespace cellm
