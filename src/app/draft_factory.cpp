#include "app/draft_factory.h"

#include <algorithm>
#include <system_error>
#include <utility>

#include "app/executor_factory.h"
#include "core/log.h"
#include "model/loader.h"

namespace cellm::app {

namespace {

Status check_readable(const std::filesystem::path& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (path.empty() || ec || !std::filesystem::exists(status)) {
    return invalid_argument("draft model '{}' does not exist: give --draft-model the path of a "
                            "Hugging Face folder or .gguf file",
                            path.string());
  }
  const auto perms = status.permissions();
  if ((perms & (std::filesystem::perms::owner_read | std::filesystem::perms::group_read |
                std::filesystem::perms::others_read)) == std::filesystem::perms::none) {
    return invalid_argument("draft model '{}' is not readable: check its permissions",
                            path.string());
  }
  return Status::ok();
}

}  // namespace

Status check_speculation_options(const std::string& speculate,
                                 const std::filesystem::path& draft_model) {
  if (speculate == "draft") {
    if (draft_model.empty()) {
      return invalid_argument(
          "--speculate draft needs the draft model: give --draft-model PATH (a smaller model "
          "sharing the target's tokenizer)");
    }
    return check_readable(draft_model);
  }
  if (!draft_model.empty()) {
    return invalid_argument(
        "--draft-model {} is only used with --speculate draft (speculate is '{}'): add "
        "--speculate draft or drop --draft-model",
        draft_model.string(), speculate);
  }
  return Status::ok();
}

Result<std::shared_ptr<executor::DraftModelProposer>> load_draft_proposer(
    const DraftModelOptions& options, std::int64_t target_vocab) {
  const std::string label = options.model.string();
  CELLM_RETURN_IF_ERROR(check_readable(options.model));
  if (options.sessions < 1 || options.session_tokens < 0) {
    return invalid_argument("draft model: {} sessions of {} tokens; give at least 1 session",
                            options.sessions, options.session_tokens);
  }
  CELLM_ASSIGN_OR_RETURN(model::LoadedModel model, model::load_model(options.model));
  if (model.spec.vocab_size != target_vocab) {
    // Refused before the draft's weights reach a device.
    return invalid_argument(
        "draft model {} has a vocabulary of {} tokens but the target model's has {}: a draft "
        "must share the target's tokenizer (e.g. a smaller model of the same family)",
        label, model.spec.vocab_size, target_vocab);
  }
  std::int32_t tokens = options.session_tokens;
  if (tokens == 0) tokens = kDraftContextCap;
  tokens = std::min(tokens, std::max(model.spec.max_context, 1));
  CudaExecutorConfig config;
  config.model_path = label;
  config.backend = options.backend;
  config.cpu_program = options.cpu_program;
  config.cpu_threads = options.threads;
  config.max_sessions = options.sessions;
  config.max_session_tokens = tokens;
  config.program = options.program;
  config.program.taps = false;
  // An explicit pool: the draft never sizes itself from free memory.
  config.program.kv_cells = options.sessions * tokens + 1;
  // A step never holds more than a session (and must be narrower than the pool).
  config.program.max_step = std::min(config.program.max_step, tokens);
  CELLM_ASSIGN_OR_RETURN(LoadedExecutor loaded, create_executor(std::move(model), config));
  CELLM_LOG_INFO("speculation: draft model {} on {}, {} sessions of {} tokens", label,
                 loaded.backend, options.sessions, tokens);
  std::unique_ptr<RawStepExecutor> executor = std::move(loaded.executor);
  // The program and the weights it may borrow outlive the executor.
  auto resources = std::make_shared<LoadedExecutor>(std::move(loaded));
  return executor::DraftModelProposer::create(std::move(executor), std::move(resources),
                                              target_vocab, label);
}

}  // namespace cellm::app
