#include "server/engine_service.h"

#include <algorithm>
#include <limits>
#include <mutex>

#include "core/log.h"
#include "grammar/vocab_from_tokenizer.h"
#include "server/runner_service.h"
#include "text/decoder.h"
#include "text/detokenizer.h"
#include "text/tokenizer.h"

namespace cellm::server {
namespace {

std::int32_t to_id(Token t) {
  // Ids beyond int32 cannot name a vocabulary entry; -1 decodes to nothing.
  return t > static_cast<Token>(std::numeric_limits<std::int32_t>::max())
             ? -1
             : static_cast<std::int32_t>(t);
}

class DetokenizerStream final : public TokenTextStream {
 public:
  explicit DetokenizerStream(const text::Tokenizer& tokenizer) : detok_(tokenizer, true) {}
  std::string push(Token token) override {
    const std::int32_t id = to_id(token);
    return id < 0 ? std::string() : detok_.push(id);
  }
  std::string finish() override { return detok_.finish(); }

 private:
  text::StreamingDetokenizer detok_;
};

// A RunnerService over the engine's runner, tokenizer and chat template.
class EngineService final : public GenerationService {
 public:
  explicit EngineService(app::Engine& engine) {
    const text::Tokenizer& tok = engine.tokenizer();
    ModelText t;
    t.tokenize = [&engine](std::string_view s, bool add_special) {
      return engine.encode(s, add_special);
    };
    t.render_chat = [&engine](const nlohmann::ordered_json& messages,
                              const nlohmann::ordered_json& extra, bool add_generation_prompt) {
      return engine.render_chat(messages, add_generation_prompt, extra);
    };
    t.detokenize = [tok](std::span<const Token> ids) {
      std::vector<std::int32_t> v;
      v.reserve(ids.size());
      for (Token id : ids) {
        if (to_id(id) >= 0) v.push_back(to_id(id));
      }
      return tok.decode(v, /*skip_special=*/true);
    };
    // A token's own bytes: its vocabulary string through the decoders as
    // mid-text (a byte-fallback piece stays the raw byte), an added token's
    // text as is.
    t.token_bytes = [tok](Token id) -> std::string {
      const std::int32_t i = to_id(id);
      const std::string* text = i >= 0 ? tok.token_text(i) : nullptr;
      if (text == nullptr) return {};
      if (tok.is_added(i)) return *text;
      return tok.decoder().decode({*text}, /*at_start=*/false);
    };
    t.text_stream = [tok] { return std::unique_ptr<TokenTextStream>(new DetokenizerStream(tok)); };
    // Built once, on the first request that constrains decoding, from the
    // byte table the runner matches stop strings on.
    t.vocabulary = [&engine, once = std::make_shared<std::once_flag>(),
                    vocab = std::make_shared<std::shared_ptr<const grammar::TokenVocabulary>>()] {
      std::call_once(*once,
                     [&] { *vocab = grammar::TokenVocabulary::create(*engine.token_bytes()); });
      return *vocab;
    };
    // Published by the engine thread; reading it never waits for a step.
    t.stats = [&engine] {
      const app::Engine::KvCells cells = engine.kv_cells();
      ServiceStats s{cells.used, cells.total};
      if (const auto spec = engine.speculation()) {
        s.spec_draft_tokens = spec->drafted;
        s.spec_accepted_tokens = spec->accepted;
      }
      return s;
    };
    RunnerServiceConfig c;
    c.model_name = engine.model_name();
    c.context_length = engine.max_session_tokens();
    c.vocab_size = engine.spec().vocab_size > 0 ? engine.spec().vocab_size : tok.vocab_size();
    c.max_sessions = engine.max_sessions();
    c.prefix_caching = engine.prefix_cache_entries() > 0;
    c.stop_tokens = engine.stop_tokens();
    c.sampling_defaults = engine.generation_defaults();
    c.tool_format = detect_tool_format(engine.chat_template_source(), engine.spec().arch_name);
    CELLM_LOG_INFO("server: tool calls in replies are parsed as: {}",
                   tool_format_name(c.tool_format));
    inner_ = std::make_unique<RunnerService>(engine.runner(), std::move(t), std::move(c));
  }

  std::string model_name() const override { return inner_->model_name(); }
  std::int32_t context_length() const override { return inner_->context_length(); }
  std::int32_t vocab_size() const override { return inner_->vocab_size(); }
  std::int32_t max_sequences() const override { return inner_->max_sequences(); }
  bool prefix_caching() const override { return inner_->prefix_caching(); }
  std::vector<Token> stop_tokens() const override { return inner_->stop_tokens(); }
  bool can_suppress_tokens() const override { return inner_->can_suppress_tokens(); }
  ToolFormat tool_format() const override { return inner_->tool_format(); }
  std::shared_ptr<const grammar::TokenVocabulary> token_vocabulary() const override {
    return inner_->token_vocabulary();
  }
  Result<std::vector<Token>> tokenize(std::string_view text, bool add_special) const override {
    return inner_->tokenize(text, add_special);
  }
  Result<std::string> render_chat(const nlohmann::ordered_json& messages,
                                  const nlohmann::ordered_json& extra,
                                  bool add_generation_prompt) const override {
    return inner_->render_chat(messages, extra, add_generation_prompt);
  }
  std::string detokenize(std::span<const Token> tokens) const override {
    return inner_->detokenize(tokens);
  }
  std::string token_bytes(Token token) const override { return inner_->token_bytes(token); }
  std::unique_ptr<TokenTextStream> text_stream() const override { return inner_->text_stream(); }
  Result<std::unique_ptr<GenerationJob>> start(const GenerationSpec& spec,
                                               EventSink sink) override {
    return inner_->start(spec, std::move(sink));
  }
  ServiceStats stats() const override { return inner_->stats(); }
  SamplingDefaults sampling_defaults() const override { return inner_->sampling_defaults(); }

 private:
  std::unique_ptr<RunnerService> inner_;
};

}  // namespace

std::shared_ptr<GenerationService> make_engine_service(app::Engine& engine) {
  return std::make_shared<EngineService>(engine);
}

}  // namespace cellm::server
