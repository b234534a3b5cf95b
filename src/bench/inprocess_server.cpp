#include "bench/inprocess_server.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "app/backend_select.h"
#include "app/engine.h"
#include "app/executor_factory.h"
#include "app/step_budget.h"
#include "bench/random_model.h"
#include "cellm/decode_first_scheduler.h"
#include "core/log.h"
#include "executor/cuda_executor.h"
#include "model/shapes.h"
#include "server/engine_service.h"
#include "server/http_server.h"
#include "server/runner_service.h"
#ifdef CELLM_HAVE_CUDA
#include "backend/cuda/device_probe.h"
#endif

namespace cellm::bench {
namespace {

// Token ids as text: " 17 4052 9".
class NumericStream final : public server::TokenTextStream {
 public:
  std::string push(Token token) override { return fmt::format(" {}", token); }
  std::string finish() override { return {}; }
};

Result<std::vector<Token>> parse_ids(std::string_view text, std::int32_t vocab) {
  std::vector<Token> ids;
  std::size_t i = 0;
  while (i < text.size()) {
    if (text[i] == ' ' || text[i] == '\n' || text[i] == '\t') {
      ++i;
      continue;
    }
    std::int64_t v = -1;
    auto [end, ec] = std::from_chars(text.data() + i, text.data() + text.size(), v);
    const std::size_t used = static_cast<std::size_t>(end - (text.data() + i));
    if (ec != std::errc() || used == 0 || v < 0 || v >= vocab ||
        (i + used < text.size() && text[i + used] != ' ' && text[i + used] != '\n' &&
         text[i + used] != '\t')) {
      return invalid_argument(
          "this model has random weights and no tokenizer: a text prompt must be token ids in "
          "[0, {}) separated by spaces (or send the prompt as a list of ids)",
          vocab);
    }
    ids.push_back(static_cast<Token>(v));
    i += used;
  }
  return ids;
}

server::ModelText numeric_text(std::int32_t vocab, const executor::CudaExecutor* executor) {
  server::ModelText t;
  t.tokenize = [vocab](std::string_view s, bool) { return parse_ids(s, vocab); };
  t.render_chat = [](const nlohmann::ordered_json&, const nlohmann::ordered_json&,
                     bool) -> Result<std::string> {
    return not_found(
        "this model has random weights and no chat template: use /v1/completions with token "
        "ids");
  };
  t.detokenize = [](std::span<const Token> ids) {
    std::string s;
    for (Token id : ids) s += fmt::format(" {}", id);
    return s;
  };
  t.text_stream = [] { return std::unique_ptr<server::TokenTextStream>(new NumericStream()); };
  t.stats = [executor] {
    const auto cells = executor->published_kv_cells();
    return server::ServiceStats{cells.used, cells.total};
  };
  return t;
}

}  // namespace

struct InProcessServer::Impl {
  // Model-path form.
  std::unique_ptr<app::Engine> engine;
  // Shape form (declared in construction order; torn down by hand).
  std::shared_ptr<program::Program> program;
  std::unique_ptr<executor::CudaExecutor> executor;
  std::unique_ptr<Runner> runner;

  std::shared_ptr<server::GenerationService> service;
  std::unique_ptr<server::Server> server;
  std::thread serving;
  Status served;
  std::string model_name;
  std::string backend;
  std::string device = "cpu";
  std::int32_t vocab_size = 0;

  ~Impl() {
    if (server) server->stop();
    if (serving.joinable()) serving.join();
    service.reset();
    if (runner) runner->shutdown();
    runner.reset();
    executor.reset();
    program.reset();
    engine.reset();
  }
};

namespace {

int concurrency_of(const ServeBenchOptions& o) {
  return o.max_concurrency > 0 ? std::min(o.max_concurrency, o.requests) : o.requests;
}

Status load_path(const HttpBenchOptions& o, const PoolNeed& need, InProcessServer::Impl& s) {
  const ServeBenchOptions& l = o.load;
  app::EngineOptions eo;
  eo.model = l.model;
  eo.backend = l.backend;
  eo.max_sessions = concurrency_of(l);
  eo.max_session_tokens = need.session_tokens;
  eo.prefix_cache_entries = o.prefix_cache_entries;
  eo.prefill_chunk = l.prefill_chunk;
  eo.max_batch_tokens = l.max_batch_tokens;
  eo.program.kv_memory_fraction = l.gpu_memory_fraction;
  eo.program.keep_quantized = l.keep_quantized;
  eo.quantize = l.quantize;
  eo.kv_dtype = l.kv_dtype;  // as `cellm serve --kv-dtype`
  // As `cellm serve --speculate ... --draft-model ... --speculate-tokens ...`.
  eo.speculate = o.speculate;
  eo.speculate_tokens = o.speculate_tokens;
  eo.draft_model = o.draft_model;
  CELLM_ASSIGN_OR_RETURN(s.engine, app::Engine::load(eo));
  // A dataset's need is a loose bound (a byte a token): the server itself
  // refuses a request longer than the context it holds.
  if (o.dataset.empty() && s.engine->max_session_tokens() < need.session_tokens) {
    return out_of_resources(
        "the server holds {} tokens per session but a request may need {}: shorten the lengths",
        s.engine->max_session_tokens(), need.session_tokens);
  }
  s.service = server::make_engine_service(*s.engine);
  s.model_name = s.engine->model_name();
  s.backend = s.engine->backend_name();
  s.vocab_size = s.engine->spec().vocab_size;
  return Status::ok();
}

Status load_shape(const HttpBenchOptions& o, const model::ModelSpec& spec, const PoolNeed& need,
                  InProcessServer::Impl& s) {
  const ServeBenchOptions& l = o.load;
  CELLM_ASSIGN_OR_RETURN(app::BackendChoice backend, app::choose_backend(l.backend));
  CELLM_RETURN_IF_ERROR(app::check_kv_dtype(l.kv_dtype, backend));
  s.backend = backend.name;
  const int cap = concurrency_of(l);
  const int entries = o.prefix_cache_entries;
  // As the Engine sizes it: the runner's cache entries, and the snapshot a
  // request takes before the oldest is evicted, get sessions of their own.
  const int sessions = cap + (entries > 0 ? entries + 1 : 0);
  program::ProgramOptions popts;
  popts.kv_memory_fraction = l.gpu_memory_fraction;
  popts.keep_quantized = l.keep_quantized || l.quantize == model::Quantize::kFp8;
  popts.kv_dtype = app::program_kv_dtype(l.kv_dtype);
  // The widest forward `cellm serve` builds (a wider step runs as several).
  // Cache entries keep finished prompts' cells; snapshots of running ones share theirs.
  const std::int64_t cells = need.cells + std::int64_t{entries} * need.session_tokens;
  if (!backend.sizes_pool_from_memory) {
    if (cells > std::numeric_limits<std::int32_t>::max()) {
      return out_of_resources("{} KV cells are more than a pool can index", cells);
    }
    popts.kv_cells = static_cast<std::int32_t>(cells);
    popts.max_step = std::min<std::int32_t>(popts.max_step, popts.kv_cells - 1);
  }
#ifdef CELLM_HAVE_CUDA
  if (backend.sizes_pool_from_memory) {
    CELLM_ASSIGN_OR_RETURN(s.device, cuda::device_name());
  }
#endif
  if (need.session_tokens > spec.max_context) {
    return out_of_resources("a request of up to {} tokens exceeds {}'s context of {}",
                            need.session_tokens, l.model, spec.max_context);
  }
  CELLM_ASSIGN_OR_RETURN(s.program, random_program(spec, l.seed, popts, backend.name));
  const std::int64_t pool = s.program->constant(program::kMaxCellsConstant).value_or(0);
  if (pool < cells) {
    return out_of_resources(
        "{} sessions x {} tokens need {} KV cells but the pool holds {}: lower "
        "--max-concurrency or the lengths, or raise --gpu-memory-fraction",
        cap, need.session_tokens, cells, pool);
  }
  CELLM_ASSIGN_OR_RETURN(s.executor,
                         executor::CudaExecutor::create(s.program, sessions, need.session_tokens));
  // The budget cellm serve's Engine takes (app/step_budget.h).
  CELLM_ASSIGN_OR_RETURN(
      const app::StepBudget budget,
      app::step_budget(l.prefill_chunk, l.max_batch_tokens, cap,
                       static_cast<std::int64_t>(s.executor->preferred_batch_tokens())));
  auto scheduler = app::make_scheduler(budget);
  if (!scheduler) {
    return invalid_argument("no scheduler holds {} decodes beside a chunk of {} in {} tokens",
                            budget.decodes, budget.chunk, budget.batch);
  }
  s.runner = std::make_unique<Runner>(*s.executor, std::move(scheduler), RunnerOptions{entries});
  if (!s.runner->open_session_async().get()) {  // waits for initialize()
    return internal_error("the {} executor failed to initialize (see the log)", s.backend);
  }
  server::RunnerServiceConfig c;
  c.model_name = l.model;
  c.context_length = s.executor->max_session_tokens();
  c.vocab_size = spec.vocab_size;
  c.max_sessions = cap;
  c.prefix_caching = entries > 0;
  // Random weights have no EOS worth stopping on: every request runs to its
  // max_tokens, with or without ignore_eos.
  s.service = std::make_shared<server::RunnerService>(
      *s.runner, numeric_text(spec.vocab_size, s.executor.get()), c);
  s.model_name = l.model;
  s.vocab_size = spec.vocab_size;
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<InProcessServer>> InProcessServer::start(const HttpBenchOptions& o) {
  const ServeBenchOptions& l = o.load;
  PoolNeed need = pool_need(l);
  if (!o.dataset.empty()) need.session_tokens = dataset_session_tokens(o.dataset);
  auto impl = std::make_unique<Impl>();
  if (std::filesystem::exists(l.model)) {
    CELLM_RETURN_IF_ERROR(load_path(o, need, *impl));
  } else {
    auto shape = model::named_shape(l.model);
    if (!shape.ok()) {
      return invalid_argument("--model {}: no such file or folder, and not a shape name ({})",
                              l.model, fmt::join(model::shape_names(), ", "));
    }
    if (!o.dataset.empty() || o.speculate != "off") {
      return invalid_argument(
          "{} needs a model with a tokenizer, loaded as cellm serve loads it; the shape {} has "
          "random weights and none: pass a model file, e.g. --model "
          "models/gemma-3-270m-q4_k_m.gguf",
          o.dataset.empty() ? "--speculate" : "--dataset", l.model);
    }
    if (!o.json_schema.empty()) {
      return invalid_argument(
          "--json-schema needs a model with a tokenizer to build the grammar's masks; the shape "
          "{} has random weights and none: pass a model file, e.g. --model "
          "models/SmolLM2-135M-Instruct.Q4_1.gguf --prompt-format text",
          l.model);
    }
    CELLM_RETURN_IF_ERROR(load_shape(o, *shape, need, *impl));
  }
#ifdef CELLM_HAVE_CUDA
  if (impl->backend == "cuda" && impl->device == "cpu") {
    CELLM_ASSIGN_OR_RETURN(impl->device, cuda::device_name());
  }
#endif
  server::ServerOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  const int cap = concurrency_of(l);
  so.max_queue = std::max(256, cap + 16);  // the client never queues more than cap
  so.drain_timeout = std::chrono::milliseconds(2000);
  impl->server = std::make_unique<server::Server>(so);
  CELLM_RETURN_IF_ERROR(impl->server->bind());
  impl->server->set_service(impl->service);
  Impl* raw = impl.get();
  impl->serving = std::thread([raw] { raw->served = raw->server->serve(); });
  return std::unique_ptr<InProcessServer>(new InProcessServer(std::move(impl)));
}

InProcessServer::InProcessServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
InProcessServer::~InProcessServer() = default;

std::string InProcessServer::url() const {
  return fmt::format("http://127.0.0.1:{}", impl_->server->port());
}
const std::string& InProcessServer::model_name() const {
  return impl_->model_name;
}
const std::string& InProcessServer::backend() const {
  return impl_->backend;
}
const std::string& InProcessServer::device() const {
  return impl_->device;
}
std::int32_t InProcessServer::vocab_size() const {
  return impl_->vocab_size;
}

}  // namespace cellm::bench
