#include "executor/module_executor.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "core/log.h"
#include "executor/forward_pass.h"
#include "executor/method_checks.h"
#include "executor/program_loading.h"
#include "sampling/sampler.h"

namespace cellm::executor {

Result<std::unique_ptr<ModuleExecutor>> ModuleExecutor::create(
    std::shared_ptr<program::Program> program, int max_sessions, int max_session_tokens,
    std::string method) {
  if (!program) return invalid_argument("ModuleExecutor needs a program, got null");
  if (max_sessions <= 0 || max_session_tokens <= 0) {
    return invalid_argument("max_sessions {} and max_session_tokens {} must be positive",
                            max_sessions, max_session_tokens);
  }
  const std::int64_t needed = static_cast<std::int64_t>(max_sessions) * max_session_tokens;
  if (needed >= std::numeric_limits<int>::max()) {
    return invalid_argument("max_sessions {} x max_session_tokens {} overflows int", max_sessions,
                            max_session_tokens);
  }
  if (const auto context = program->constant(program::kMaxContextConstant)) {
    if (max_session_tokens > *context) {
      return invalid_argument("max_session_tokens {} exceeds the model's context of {} tokens",
                              max_session_tokens, *context);
    }
  }
  const std::vector<std::string> names = program->method_names();
  if (std::find(names.begin(), names.end(), method) == names.end()) {
    return invalid_program("program ({}) exports no method {}", program->backend_name(), method);
  }
  CELLM_ASSIGN_OR_RETURN(program::MethodMeta meta, program->method_meta(method));
  CELLM_ASSIGN_OR_RETURN(ForwardSignature sig,
                         check_forward(method, meta, SelectorRule::kOptional));
  if (!sig.dynamic) {
    return invalid_program("method {}: must have a dynamic token extent (it runs unpadded)",
                           method);
  }
  if (sig.width > std::numeric_limits<int>::max()) {
    return invalid_program("method {}: width {} overflows int", method, sig.width);
  }
  if (const auto vocab = program->constant(program::kVocabSizeConstant);
      vocab && *vocab != sig.vocab) {
    return invalid_program("{} is {} but method {} returns logits over {} tokens",
                           program::kVocabSizeConstant, *vocab, method, sig.vocab);
  }
  CELLM_RETURN_IF_ERROR(check_cache_layout(*program));
  std::int64_t max_cells = needed + 1;
  if (const auto published = program->constant(program::kMaxCellsConstant)) {
    if (*published < 2 || *published > std::numeric_limits<std::int32_t>::max()) {
      return invalid_program("{} is {}; it must lie in [2, 2^31)", program::kMaxCellsConstant,
                             *published);
    }
    if (needed > *published - 1) {
      return invalid_argument(
          "{} sessions x {} tokens need {} cells but the pool holds {} (one is scratch)",
          max_sessions, max_session_tokens, needed, *published - 1);
    }
    max_cells = *published;
  }
  int min_rows = 1;
  if (const auto published = program->constant(program::kMinSelectedRowsConstant)) {
    min_rows = static_cast<int>(std::clamp<std::int64_t>(*published, 1, sig.width));
  }
  std::uint64_t cell_bytes = 0;
  if (const auto bytes = program->constant(program::kKvCellBytesConstant); bytes && *bytes > 0) {
    cell_bytes = static_cast<std::uint64_t>(*bytes);
  }
  auto cache = cache::CellCache::create(cache::CellCacheConfig{static_cast<std::int32_t>(max_cells),
                                                               max_sessions, max_session_tokens});
  if (!cache.ok()) return cache.status().with_context("building the cell cache");
  std::shared_ptr<cache::CellCache> shared(std::move(cache).value());
  return std::unique_ptr<ModuleExecutor>(new ModuleExecutor(
      std::move(program), std::move(shared), std::move(method), sig.width, sig.selects_rows,
      min_rows, sig.vocab, max_sessions, max_session_tokens, cell_bytes));
}

ModuleExecutor::ModuleExecutor(std::shared_ptr<program::Program> program,
                               std::shared_ptr<cache::CellCache> cache, std::string method,
                               std::int64_t width, bool selects_rows, int min_selected_rows,
                               std::int64_t vocab, int max_sessions, int max_session_tokens,
                               std::uint64_t kv_cell_bytes)
    : program_(std::move(program)),
      cache_(std::move(cache)),
      method_(std::move(method)),
      width_(width),
      selects_rows_(selects_rows),
      min_selected_rows_(min_selected_rows),
      vocab_size_(vocab),
      kv_cell_bytes_(kv_cell_bytes),
      sessions_(*cache_, max_sessions, max_session_tokens, vocab) {}

bool ModuleExecutor::initialize() {
  if (initialized_) return true;
  const std::string_view names[] = {method_};
  initialized_ = bind_and_load(*program_, cache_, names);
  return initialized_;
}

std::optional<SessionId> ModuleExecutor::open_session() {
  return sessions_.open();
}
void ModuleExecutor::close_session(SessionId session) {
  sessions_.close(session);
}
std::optional<SessionId> ModuleExecutor::clone(SessionId source, Position upto) {
  return sessions_.clone(source, upto);
}
void ModuleExecutor::set_sampling(SessionId session, const SamplingParams& params,
                                  std::optional<std::uint64_t> seed) {
  sessions_.set_sampling(session, params, seed);
}

bool ModuleExecutor::execute(const BatchInput& batch, BatchOutput& out) {
  out.outputs.assign(batch.inputs.size(), std::nullopt);
  if (!initialized_) {
    CELLM_LOG_ERROR("executor: execute() before initialize()");
    return false;
  }
  Result<PackedStep> packed = sessions_.pack(batch);
  if (!packed.ok()) {
    CELLM_LOG_WARN("executor: batch refused: {}", packed.status().to_string());
    return false;
  }
  const PackedStep& step = *packed;
  const auto total = static_cast<std::int64_t>(step.tokens.size());
  std::vector<float> row;
  for (std::int64_t offset = 0; offset < total; offset += width_) {
    const std::int64_t length = std::min(width_, total - offset);
    SliceRows rows = select_rows(step, offset, length);
    std::vector<std::int64_t> selector;
    if (selects_rows_) selector = pad_selector(rows.selector, min_selected_rows_);
    const auto begin = static_cast<std::size_t>(offset);
    const auto count = static_cast<std::size_t>(length);
    ForwardInputs inputs;
    inputs.method = method_;
    inputs.width = length;
    inputs.tokens = std::span(step.tokens).subspan(begin, count);
    inputs.positions = std::span(step.positions).subspan(begin, count);
    inputs.seq_ids = std::span(step.seq_ids).subspan(begin, count);
    inputs.selector = selector;
    inputs.selects_rows = selects_rows_;
    auto forward = run_forward(*program_, *cache_, inputs, vocab_size_);
    if (!forward.ok()) {
      CELLM_LOG_ERROR("executor: forward at token {} failed: {}", offset,
                      forward.status().to_string());
      return false;
    }
    ++calls_;
    const Tensor& logits = forward->logits;
    if (!rows.inputs.empty() && logits.device() != Device::kCpu) {
      CELLM_LOG_ERROR("executor: {} returned device logits; ModuleExecutor samples on the host",
                      method_);
      return false;
    }
    for (std::size_t r = 0; r < rows.inputs.size(); ++r) {
      const std::size_t input = rows.inputs[r];
      const SessionId sid = batch.inputs[input].sid;
      // Without a selector the logits hold one row per token.
      const std::int64_t logits_row =
          selects_rows_ ? static_cast<std::int64_t>(r) : rows.selector[r];
      TokenLogprobs logprobs;
      std::optional<Token> token = sessions_.sample(sid, logits, logits_row, &logprobs);
      if (!token && sessions_.greedy(sid)) {
        sampling::row_to_f32(logits, logits_row, row);
        token = static_cast<Token>(sampling::argmax_row(row));
        sessions_.note_draw(sid, *token);
      }
      if (!token) {
        CELLM_LOG_ERROR("executor: session {}: sampling row {} failed", sid, logits_row);
        return false;
      }
      out.outputs[input] = Output{sid, {*token}};
      if (sessions_.logprobs_wanted(sid) >= 0)
        out.outputs[input]->logprobs.push_back(std::move(logprobs));
    }
  }
  return true;
}

OffGraphKVMetrics ModuleExecutor::kv_metrics() const {
  return kv_metrics_of(*cache_, kv_cell_bytes_);
}

}  // namespace cellm::executor
