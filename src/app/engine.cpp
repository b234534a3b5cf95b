#include "app/engine.h"

#include <algorithm>

#include "app/backend_select.h"
#include "app/draft_factory.h"
#include "app/executor_factory.h"
#include "app/model_text.h"
#include "app/step_budget.h"
#include "cellm/decode_first_scheduler.h"
#include "chat/chat_template.h"
#include "core/log.h"
#include "executor/cuda_executor.h"
#include "grammar/vocab_from_tokenizer.h"
#include "model/loader.h"
#include "text/tokenizer.h"

namespace cellm::app {

struct Engine::Impl {
  model::LoadedModel model;
  std::optional<text::Tokenizer> tokenizer;
  std::optional<chat::ChatTemplate> chat_template;
  std::string chat_template_source;
  SpecialTokenText special_tokens;
  std::vector<Token> stop_tokens;
  std::shared_ptr<program::Program> program;
  std::unique_ptr<executor::CudaExecutor> executor;
  TokenBytesTable token_bytes;
  std::unique_ptr<Runner> runner;
  // Snapshots are sessions of the runner: released before it shuts down.
  std::string model_name;
  std::string backend_name;
  Sizing sizing;
  std::uint64_t cell_bytes = 0;
  std::int32_t prefix_cache_entries = 0;
  SamplingDefaults generation_defaults;
  std::int32_t prefill_chunk = 0;
  std::int32_t max_batch_tokens = 0;
};

namespace {

void report(const ProgressCallback& progress, std::string stage, double fraction) {
  CELLM_LOG_INFO("engine: {}", stage);
  if (progress) progress(LoadProgress{std::move(stage), fraction});
}

std::string name_of(const std::filesystem::path& path) {
  auto p = path;
  if (p.filename().empty()) p = p.parent_path();  // "folder/"
  return p.filename().string();
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::load(const EngineOptions& options,
                                             const ProgressCallback& progress) {
  if (options.max_sessions < 0 || options.max_session_tokens < 0 ||
      options.prefix_cache_entries < 0) {
    return invalid_argument(
        "max_sessions {}, max_session_tokens {} and prefix_cache_entries {} must not be negative "
        "(0 picks the default)",
        options.max_sessions, options.max_session_tokens, options.prefix_cache_entries);
  }
  if (options.prefill_chunk < 0 || options.max_batch_tokens < 0 ||
      options.max_decode_sequences < 0) {
    return invalid_argument(
        "prefill_chunk {}, max_batch_tokens {} and max_decode_sequences {} must not be negative "
        "(0 picks the default)",
        options.prefill_chunk, options.max_batch_tokens, options.max_decode_sequences);
  }
  CELLM_RETURN_IF_ERROR(check_speculation_options(options.speculate, options.draft_model));
  auto impl = std::make_unique<Impl>();
  impl->model_name = name_of(options.model);

  report(progress, fmt::format("reading {}", options.model.string()), 0.0);
  model::LoadOptions load_options;
  {
    CELLM_ASSIGN_OR_RETURN(BackendChoice backend, choose_backend(options.backend));
    load_options.dequant_dtype = dequant_dtype_for(backend);
    // What the GPU keeps in blocks is not dequantized on the host at all.
    load_options.gpu_keeps_blocks =
        backend.name == "cuda" &&
        (options.program.keep_quantized || options.quantize == model::Quantize::kFp8);
  }
  load_options.quantize = options.quantize;
  CELLM_ASSIGN_OR_RETURN(impl->model, model::load_model(options.model, load_options));

  report(progress, "loading tokenizer", 0.4);
  CELLM_ASSIGN_OR_RETURN(impl->tokenizer, load_tokenizer(impl->model));  // NOLINT
  impl->special_tokens = special_token_text(*impl->tokenizer);
  impl->stop_tokens = stop_token_ids(impl->model, *impl->tokenizer);
  CELLM_ASSIGN_OR_RETURN(auto template_source, load_chat_template_source(impl->model));
  if (template_source) {
    auto parsed = chat::ChatTemplate::parse(*template_source);
    if (!parsed.ok()) {
      // A model whose template we cannot run still serves completions.
      CELLM_LOG_WARN("engine: chat template unusable, chat is disabled: {}",
                     parsed.status().message());
    } else {
      impl->chat_template.emplace(std::move(parsed).value());
      impl->chat_template_source = *template_source;
    }
  }

  CELLM_ASSIGN_OR_RETURN(impl->generation_defaults, load_generation_defaults(impl->model));
  // Logged once: requests and CLI runs that leave a setting unset get these.
  CELLM_LOG_INFO("engine: the model's sampling defaults: {}",
                 describe_sampling_defaults(impl->generation_defaults));

  CudaExecutorConfig config;
  config.model_path = options.model.string();
  config.backend = options.backend;
  config.cpu_program = options.cpu_program;
  config.cpu_threads = options.threads;
  config.program = options.program;
  config.kv_dtype = options.kv_dtype;
  // What --quantize fp8 made stays FP8 on the GPU: that is what it is for.
  if (options.quantize == model::Quantize::kFp8) config.program.keep_quantized = true;
  if (options.speculate != "off") {
    if (options.speculate_tokens < 1 || options.speculate_tokens > 16) {
      return invalid_argument("speculate_tokens is {}; use 1 to 16 drafts",
                              options.speculate_tokens);
    }
    if (options.speculate == "draft") {
      // Before the target's executor: on CUDA the target's pool takes a
      // share of the memory left, so the draft's pool comes first.
      report(progress, fmt::format("loading draft model {}", options.draft_model.string()), 0.45);
      DraftModelOptions draft;
      draft.model = options.draft_model;
      draft.backend = options.backend;
      draft.cpu_program = options.cpu_program;
      draft.threads = options.threads;
      draft.program = options.program;
      draft.sessions = static_cast<std::int32_t>(config.speculation.max_batch);
      draft.session_tokens = std::min(options.max_session_tokens > 0 ? options.max_session_tokens
                                                                     : impl->model.spec.max_context,
                                      kDraftContextCap);
      CELLM_ASSIGN_OR_RETURN(config.speculation.proposer,
                             load_draft_proposer(draft, impl->model.spec.vocab_size));
    } else {
      CELLM_ASSIGN_OR_RETURN(config.speculation.proposer,
                             executor::make_proposer(options.speculate));
    }
    config.speculation.max_drafts = static_cast<std::size_t>(options.speculate_tokens);
  }
  report(progress, "building program", 0.5);
  SizingRequest sizing;
  sizing.sessions = options.max_sessions;
  sizing.session_tokens = options.max_session_tokens;
  // Each cache entry is a session, plus the new snapshot a request takes
  // before the oldest entry is evicted for it.
  sizing.fixed_snapshots =
      options.prefix_cache_entries + (options.prefix_cache_entries > 0 ? 1 : 0);
  sizing.per_request_snapshots = 0;
  CELLM_ASSIGN_OR_RETURN(SizedExecutor sized,
                         create_sized_executor(std::move(impl->model), config, sizing));
  LoadedExecutor& loaded = sized.loaded;
  impl->sizing = sized.sizing;
  impl->cell_bytes = sized.cell_bytes;
  CELLM_LOG_INFO("engine: {}", app::sizing_summary(impl->sizing, impl->cell_bytes));
  impl->program = std::move(loaded.program);
  impl->executor = std::move(loaded.executor);
  impl->backend_name = loaded.backend;
  impl->model = std::move(loaded.model);

  const std::size_t preferred = impl->executor->preferred_batch_tokens();
  const std::size_t decodes = options.max_decode_sequences > 0
                                  ? static_cast<std::size_t>(options.max_decode_sequences)
                                  : static_cast<std::size_t>(impl->sizing.sessions);
  CELLM_ASSIGN_OR_RETURN(const StepBudget budget,
                         step_budget(options.prefill_chunk, options.max_batch_tokens,
                                     static_cast<std::int64_t>(decodes),
                                     static_cast<std::int64_t>(preferred)));
  auto scheduler = make_scheduler(budget);
  if (!scheduler) {
    return invalid_argument("no valid scheduler for batch {} tokens, {} decodes, chunk {}",
                            budget.batch, budget.decodes, budget.chunk);
  }
  impl->prefill_chunk = static_cast<std::int32_t>(budget.chunk);
  impl->max_batch_tokens = static_cast<std::int32_t>(budget.batch);
  report(progress, "initializing", 0.9);
  RunnerOptions runner_options;
  runner_options.prefix_cache_entries = options.prefix_cache_entries;
  // What stop strings are matched on: the same bytes constrained decoding
  // masks by.
  impl->token_bytes = std::make_shared<const std::vector<std::string>>(
      grammar::token_bytes_from_tokenizer(*impl->tokenizer, impl->model.spec.vocab_size));
  runner_options.token_bytes = impl->token_bytes;
  impl->runner =
      std::make_unique<Runner>(*impl->executor, std::move(scheduler), std::move(runner_options));
  auto ready = impl->runner->open_session_async().get();  // waits for initialize()
  if (impl->runner->initialization_state() != InitializationState::kReady) {
    return internal_error("the {} backend failed to initialize (see the log above)",
                          impl->backend_name);
  }
  ready.reset();
  impl->prefix_cache_entries = options.prefix_cache_entries;
  report(progress, "ready", 1.0);
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() {
  if (!impl_) return;
  if (impl_->runner) impl_->runner->shutdown();
}

Runner& Engine::runner() {
  return *impl_->runner;
}
const text::Tokenizer& Engine::tokenizer() const {
  return *impl_->tokenizer;
}

const TokenBytesTable& Engine::token_bytes() const {
  return impl_->token_bytes;
}

const std::string& Engine::chat_template_source() const {
  return impl_->chat_template_source;
}

bool Engine::has_chat_template() const {
  return impl_->chat_template.has_value();
}

Result<std::string> Engine::render_chat(const nlohmann::ordered_json& messages,
                                        bool add_generation_prompt,
                                        const nlohmann::ordered_json& extra) const {
  if (!impl_->chat_template) {
    return not_found("model {} has no usable chat template: send a plain completion instead",
                     impl_->model_name);
  }
  nlohmann::ordered_json special = nlohmann::ordered_json::object();
  special["bos_token"] = impl_->special_tokens.bos;
  special["eos_token"] = impl_->special_tokens.eos;
  return chat::apply_chat_template(*impl_->chat_template, messages, add_generation_prompt, extra,
                                   special);
}

const std::vector<Token>& Engine::stop_tokens() const {
  return impl_->stop_tokens;
}

Result<std::vector<Token>> Engine::encode(std::string_view text, bool add_special) const {
  std::vector<std::int32_t> ids = impl_->tokenizer->encode(text, add_special);
  return std::vector<Token>(ids.begin(), ids.end());
}

const model::ModelSpec& Engine::spec() const {
  return impl_->model.spec;
}
const std::string& Engine::model_name() const {
  return impl_->model_name;
}
const std::string& Engine::backend_name() const {
  return impl_->backend_name;
}
std::int32_t Engine::max_session_tokens() const {
  return impl_->executor->max_session_tokens();
}
std::int32_t Engine::max_sessions() const {
  return impl_->sizing.sessions;
}
std::int32_t Engine::snapshot_sessions() const {
  return impl_->sizing.snapshot_sessions;
}
std::int32_t Engine::prefix_cache_entries() const {
  return impl_->prefix_cache_entries;
}
const Sizing& Engine::sizing() const {
  return impl_->sizing;
}
std::string Engine::sizing_summary() const {
  return app::sizing_summary(impl_->sizing, impl_->cell_bytes);
}
const SamplingDefaults& Engine::generation_defaults() const {
  return impl_->generation_defaults;
}
std::int32_t Engine::prefill_chunk() const {
  return impl_->prefill_chunk;
}
std::int32_t Engine::max_batch_tokens() const {
  return impl_->max_batch_tokens;
}
std::optional<Engine::SpeculationTotals> Engine::speculation() const {
  const std::optional<executor::SpeculationCounters> c = impl_->executor->speculation_counters();
  if (!c) return std::nullopt;
  return SpeculationTotals{static_cast<std::int64_t>(c->proposed),
                           static_cast<std::int64_t>(c->accepted)};
}
Engine::KvCells Engine::kv_cells() const {
  const executor::CudaExecutor::KvCells cells = impl_->executor->published_kv_cells();
  return {cells.used, cells.total};
}

}  // namespace cellm::app
