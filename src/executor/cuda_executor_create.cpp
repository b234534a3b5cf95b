// CudaExecutor::create: everything a program must satisfy before the
// executor trusts it (batching_spec §4.1, items translated to our program
// interface). Each check names the method or constant it refuses.
#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "core/log.h"
#include "executor/cuda_executor.h"
#include "executor/method_checks.h"

namespace cellm::executor {

namespace {

constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();

Result<std::int64_t> required_constant(const program::Program& program, std::string_view name) {
  const std::optional<std::int64_t> value = program.constant(name);
  if (!value || *value <= 0 || *value > kIntMax) {
    return invalid_program("program ({}) must publish a positive int constant {}{}",
                           program.backend_name(), name,
                           value ? fmt::format(", not {}", *value) : std::string());
  }
  return *value;
}

}  // namespace

Result<CudaExecutor::Plan> CudaExecutor::inspect(const program::Program& program, int max_sessions,
                                                 int max_session_tokens) {
  Plan plan;
  if (max_sessions <= 0 || max_session_tokens < 0) {
    return invalid_argument(
        "max_sessions {} must be positive and max_session_tokens {} non-negative (0 divides the "
        "pool)",
        max_sessions, max_session_tokens);
  }
  if (static_cast<std::int64_t>(max_sessions) * max_session_tokens > kIntMax) {
    return invalid_argument("max_sessions {} x max_session_tokens {} overflows int", max_sessions,
                            max_session_tokens);
  }
  CELLM_ASSIGN_OR_RETURN(const std::int64_t max_context,
                         required_constant(program, program::kMaxContextConstant));
  if (max_session_tokens > max_context) {
    return invalid_argument(
        "max_session_tokens {} exceeds the model's context of {} tokens; lower it (or pass 0)",
        max_session_tokens, max_context);
  }
  CELLM_ASSIGN_OR_RETURN(const std::int64_t max_cells,
                         required_constant(program, program::kMaxCellsConstant));
  if (max_cells < 2) {
    return invalid_program("{} is {}; the pool needs the scratch cell and at least one more",
                           program::kMaxCellsConstant, max_cells);
  }
  plan.max_cells = static_cast<std::int32_t>(max_cells);

  // Method discovery: forward_<N> is static, forward_others dynamic, anything
  // else (samplers, helpers) is not a forward.
  std::optional<std::string> backend;
  std::optional<program::ForwardMethod> dynamic;
  for (const std::string& name : program.method_names()) {
    const std::optional<std::int32_t> n = static_method_width(name);
    const bool is_dynamic = name == program::kDynamicMethod;
    if (!n && !is_dynamic) continue;
    auto meta = program.method_meta(name);
    if (!meta.ok()) {
      return invalid_program("method {} is listed but has no metadata: {}", name,
                             meta.status().to_string());
    }
    CELLM_ASSIGN_OR_RETURN(ForwardSignature sig,
                           check_forward(name, *meta, SelectorRule::kRequired));
    if (n && (sig.dynamic || sig.width != *n)) {
      return invalid_program(
          "method {}: a static method must take exactly {} tokens, but it "
          "exports {}{}",
          name, *n, sig.dynamic ? "a dynamic extent up to " : "", sig.width);
    }
    if (is_dynamic && !sig.dynamic) {
      return invalid_program("method {}: must have a dynamic token extent", name);
    }
    if (sig.width > kIntMax) {
      return invalid_program("method {}: width {} overflows int", name, sig.width);
    }
    if (backend && *backend != sig.backend) {
      return invalid_program("method {} runs on backend '{}' but other forwards run on '{}'", name,
                             sig.backend, *backend);
    }
    backend = sig.backend;
    if (plan.vocab != 0 && plan.vocab != sig.vocab) {
      return invalid_program("method {} returns a vocabulary of {} but other forwards return {}",
                             name, sig.vocab, plan.vocab);
    }
    plan.vocab = sig.vocab;
    const program::ForwardMethod method{name, static_cast<std::int32_t>(sig.width), !is_dynamic};
    if (is_dynamic) {
      dynamic = method;
    } else {
      plan.methods.push_back(method);
    }
  }
  if (plan.methods.empty()) {
    return invalid_program("program ({}) exports no static forward_<N> method",
                           program.backend_name());
  }
  std::sort(plan.methods.begin(), plan.methods.end(),
            [](const auto& a, const auto& b) { return a.max_tokens < b.max_tokens; });
  if (dynamic) {
    if (dynamic->max_tokens <= plan.methods.back().max_tokens) {
      return invalid_program("method {} takes at most {} tokens; it must be wider than {} ({})",
                             dynamic->name, dynamic->max_tokens, plan.methods.back().name,
                             plan.methods.back().max_tokens);
    }
    plan.methods.push_back(*dynamic);
  }
  const std::int32_t widest = plan.methods.back().max_tokens;
  if (widest >= plan.max_cells) {
    return invalid_program(
        "the widest method {} ({} tokens) must be narrower than the pool of {} "
        "cells",
        plan.methods.back().name, widest, plan.max_cells);
  }
  if (const auto min_rows = program.constant(program::kMinSelectedRowsConstant)) {
    plan.min_selected_rows = static_cast<int>(std::clamp<std::int64_t>(*min_rows, 1, kIntMax));
    if (plan.min_selected_rows > widest) {
      return invalid_program("{} is {}, wider than the widest method ({} tokens)",
                             program::kMinSelectedRowsConstant, *min_rows, widest);
    }
  }
  if (const auto vocab = program.constant(program::kVocabSizeConstant)) {
    if (*vocab != plan.vocab) {
      return invalid_program("{} is {} but the forwards return logits over {} tokens",
                             program::kVocabSizeConstant, *vocab, plan.vocab);
    }
  }

  const std::vector<std::string> names = program.method_names();
  const auto exports = [&](std::string_view n) {
    return std::find(names.begin(), names.end(), n) != names.end();
  };
  plan.has_sampler = exports(program::kSampleMethod);
  plan.has_argmax = exports(program::kArgmaxMethod);
  if (plan.has_argmax && !plan.has_sampler) {
    return invalid_program("method {} is exported without {}; export both or neither",
                           program::kArgmaxMethod, program::kSampleMethod);
  }
  if (plan.has_sampler) {
    CELLM_ASSIGN_OR_RETURN(program::MethodMeta meta, program.method_meta(program::kSampleMethod));
    CELLM_RETURN_IF_ERROR(check_sample_method(meta, plan.vocab));
    // check_sample_method allows two inputs or three, the third being the ids.
    plan.sampler_suppresses = meta.inputs.size() == 3;
  }
  plan.has_penalizer = exports(program::kPenalizeMethod);
  if (plan.has_penalizer) {
    CELLM_ASSIGN_OR_RETURN(program::MethodMeta meta, program.method_meta(program::kPenalizeMethod));
    CELLM_RETURN_IF_ERROR(check_penalize_method(meta, plan.vocab));
  }
  plan.has_masker = exports(program::kMaskMethod);
  if (plan.has_masker) {
    CELLM_ASSIGN_OR_RETURN(program::MethodMeta meta, program.method_meta(program::kMaskMethod));
    CELLM_RETURN_IF_ERROR(check_mask_method(meta, plan.vocab));
  }
  plan.has_logprobs = exports(program::kLogprobsMethod);
  if (plan.has_logprobs) {
    CELLM_ASSIGN_OR_RETURN(program::MethodMeta meta, program.method_meta(program::kLogprobsMethod));
    CELLM_RETURN_IF_ERROR(check_logprobs_method(meta, plan.vocab));
  }
  if (plan.has_argmax) {
    CELLM_ASSIGN_OR_RETURN(program::MethodMeta meta, program.method_meta(program::kArgmaxMethod));
    CELLM_RETURN_IF_ERROR(check_argmax_method(meta, plan.vocab));
  }

  CELLM_RETURN_IF_ERROR(check_cache_layout(program));
  if (const auto bytes = program.constant(program::kKvCellBytesConstant)) {
    if (*bytes < 0) {
      return invalid_program("{} is negative ({})", program::kKvCellBytesConstant, *bytes);
    }
    plan.kv_cell_bytes = static_cast<std::uint64_t>(*bytes);
  }

  // Capacity: every session may grow to max_session_tokens cells, and the
  // scratch cell is nobody's.
  const std::int64_t usable = plan.max_cells - 1;
  if (max_session_tokens == 0) {
    max_session_tokens =
        static_cast<int>(std::min<std::int64_t>(max_context, usable / max_sessions));
    if (max_session_tokens == 0) {
      return invalid_argument("{} sessions cannot share a pool of {} cells (one is scratch)",
                              max_sessions, plan.max_cells);
    }
  }
  if (static_cast<std::int64_t>(max_sessions) * max_session_tokens > usable) {
    return invalid_argument(
        "{} sessions x {} tokens need {} cells but the pool holds {} (one is scratch); lower "
        "either, or pass max_session_tokens 0 to divide the pool",
        max_sessions, max_session_tokens,
        static_cast<std::int64_t>(max_sessions) * max_session_tokens, usable);
  }
  plan.max_sessions = max_sessions;
  plan.max_session_tokens = max_session_tokens;
  return plan;
}

Result<std::unique_ptr<CudaExecutor>> CudaExecutor::create(
    std::shared_ptr<program::Program> program, int max_sessions, int max_session_tokens,
    SpeculationOptions speculation) {
  if (!program) return invalid_argument("CudaExecutor needs a program, got null");
  CELLM_ASSIGN_OR_RETURN(Plan plan, inspect(*program, max_sessions, max_session_tokens));
  cache::CellCacheConfig config;
  config.max_cells = plan.max_cells;
  config.max_sequences = plan.max_sessions;
  config.max_seq_len = plan.max_session_tokens;
  auto cache = cache::CellCache::create(config);
  if (!cache.ok()) return cache.status().with_context("building the cell cache");
  std::shared_ptr<cache::CellCache> shared(std::move(cache).value());
  CELLM_LOG_INFO("executor: {} forwards on {}, {} sessions x {} tokens over {} cells",
                 plan.methods.size(), program->backend_name(), plan.max_sessions,
                 plan.max_session_tokens, plan.max_cells);
  std::unique_ptr<CudaExecutor> made(new CudaExecutor(std::move(program), std::move(shared), plan));
  if (speculation.proposer) {
    CELLM_LOG_INFO("executor: speculative decoding, up to {} drafts for steps of at most {} outputs",
                   speculation.max_drafts, speculation.max_batch);
    made->speculation_ = std::make_unique<Speculation>(std::move(speculation));
  }
  return made;
}

}  // namespace cellm::executor
