#include "executor/cuda_executor.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <variant>

#include "core/log.h"
#include "executor/program_loading.h"
#include "sampling/logprobs.h"
#include "sampling/sampler.h"

namespace cellm::executor {
namespace {

// Resets a flag when a scope ends, however it ends.
class FlagGuard {
 public:
  explicit FlagGuard(bool& flag) : flag_(flag) { flag_ = true; }
  ~FlagGuard() { flag_ = false; }
  FlagGuard(const FlagGuard&) = delete;
  FlagGuard& operator=(const FlagGuard&) = delete;

 private:
  bool& flag_;
};

std::vector<Token> to_tokens(const std::vector<std::int64_t>& ids) {
  return std::vector<Token>(ids.begin(), ids.end());
}

}  // namespace

CudaExecutor::CudaExecutor(std::shared_ptr<program::Program> program,
                           std::shared_ptr<cache::CellCache> cache, const Plan& plan)
    : program_(std::move(program)),
      cache_(std::move(cache)),
      vocab_size_(plan.vocab),
      max_session_tokens_(plan.max_session_tokens),
      methods_(plan.methods),
      calls_(plan.methods.size(), 0),
      min_selected_rows_(plan.min_selected_rows),
      kv_cell_bytes_(plan.kv_cell_bytes),
      sessions_(*cache_, plan.max_sessions, plan.max_session_tokens, plan.vocab),
      has_sampler_(plan.has_sampler),
      sampler_suppresses_(plan.sampler_suppresses),
      has_argmax_(plan.has_argmax),
      has_penalizer_(plan.has_penalizer),
      has_masker_(plan.has_masker),
      has_logprobs_(plan.has_logprobs),
      kv_cells_total_(cache_->metrics().cells_used + cache_->metrics().cells_free) {
  publish_kv_cells();
}

namespace {
// Publishes the cell count however the call it guards returns.
struct PublishOnExit {
  std::function<void()> publish;
  ~PublishOnExit() { publish(); }
};
}  // namespace

void CudaExecutor::publish_kv_cells() {
  kv_cells_used_.store(cache_->metrics().cells_used, std::memory_order_relaxed);
}

CudaExecutor::~CudaExecutor() {
  if (speculation_) {
    const SpeculationCounters c = speculation_->counters();
    CELLM_LOG_INFO("executor: speculation verified {} rounds, accepted {} of {} drafts ({:.0f}%)",
                   c.rounds, c.accepted, c.proposed,
                   c.proposed > 0 ? 100.0 * static_cast<double>(c.accepted) /
                                        static_cast<double>(c.proposed)
                                  : 0.0);
  }
}

bool CudaExecutor::initialize() {
  if (initialized_) return true;
  std::vector<std::string_view> names;
  for (const program::ForwardMethod& m : methods_) names.push_back(m.name);
  if (has_sampler_) names.push_back(program::kSampleMethod);
  if (has_argmax_) names.push_back(program::kArgmaxMethod);
  if (has_penalizer_) names.push_back(program::kPenalizeMethod);
  if (has_masker_) names.push_back(program::kMaskMethod);
  if (has_logprobs_) names.push_back(program::kLogprobsMethod);
  initialized_ = bind_and_load(*program_, cache_, names);
  // A proposer with forwards of its own loads them on this thread too.
  if (initialized_ && speculation_) speculation_->options().proposer->initialize();
  return initialized_;
}

std::optional<SessionId> CudaExecutor::open_session() {
  return sessions_.open();
}
void CudaExecutor::close_session(SessionId session) {
  sessions_.close(session);
  if (speculation_) speculation_->forget(session);
  pending_prompt_.erase(session);
  publish_kv_cells();
}
std::optional<SessionId> CudaExecutor::clone(SessionId source, Position upto) {
  std::optional<SessionId> id = sessions_.clone(source, upto);
  publish_kv_cells();
  return id;
}
void CudaExecutor::set_sampling(SessionId session, const SamplingParams& params,
                                std::optional<std::uint64_t> seed) {
  sessions_.set_sampling(session, params, seed);
}

Result<ForwardOutputs> CudaExecutor::run_slice(const program::StepSlice& slice,
                                               std::span<const std::int64_t> tokens,
                                               std::span<const std::int64_t> positions,
                                               std::span<const cache::SeqId> seq_ids,
                                               std::vector<std::int64_t> selector) {
  const program::ForwardMethod& method = methods_[slice.method];
  const auto rows = static_cast<std::int64_t>(selector.size());
  const std::int64_t padded_rows =
      method.is_static ? slice.width : std::max<std::int64_t>(rows, min_selected_rows_);
  selector = pad_selector(std::move(selector), padded_rows);
  const auto begin = static_cast<std::size_t>(slice.offset);
  const auto length = static_cast<std::size_t>(slice.length);
  ForwardInputs inputs;
  inputs.method = method.name;
  inputs.width = slice.width;
  inputs.tokens = tokens.subspan(begin, length);
  inputs.positions = positions.subspan(begin, length);
  inputs.seq_ids = seq_ids.subspan(begin, length);
  inputs.selector = selector;
  inputs.selects_rows = true;
  auto out = run_forward(*program_, *cache_, inputs, vocab_size_, &forward_scratch_);
  if (out.ok()) ++calls_[slice.method];
  return out;
}

Status CudaExecutor::check_logits_home(const Tensor& logits) {
  const bool on_device = logits.device() == Device::kCuda;
  if (on_device && !has_sampler_) {
    return invalid_program("forwards return device logits but the program exports no {} method",
                           program::kSampleMethod);
  }
  if (device_logits_ && *device_logits_ != on_device) {
    return internal_error("a forward returned {} logits after earlier ones returned {} logits",
                          on_device ? "device" : "host", on_device ? "host" : "device");
  }
  device_logits_ = on_device;
  return Status::ok();
}

Result<std::vector<Token>> CudaExecutor::run_device_sampler(
    const Tensor& logits, std::size_t rows, const std::vector<float>& params, bool all_greedy,
    const std::vector<std::int64_t>& suppressed) {
  if (!suppressed.empty() && !sampler_suppresses_) {
    // The runner checks can_suppress_tokens() first; this guards other callers.
    return invalid_program(
        "a session suppresses token ids (min_new_tokens) but the program's {} method takes no "
        "suppressed ids; sample without them or export a {} with the optional third input",
        program::kSampleMethod, program::kSampleMethod);
  }
  const Tensor view = logits.slice_rows(0, static_cast<std::int64_t>(rows));
  Result<std::vector<Tensor>> out = [&]() -> Result<std::vector<Tensor>> {
    // The argmax method knows nothing of suppressed ids; the sample method
    // handles greedy rows too.
    if (all_greedy && has_argmax_ && suppressed.empty()) {
      const std::vector<Tensor> inputs = {view};
      return program_->execute(program::kArgmaxMethod, inputs);
    }
    std::vector<Tensor> inputs = {
        view, Tensor::view(params.data(), DType::kF32,
                           {static_cast<std::int64_t>(rows), sampling::kNumParams})};
    if (!suppressed.empty()) {
      inputs.push_back(Tensor::view(
          suppressed.data(), DType::kI64,
          {static_cast<std::int64_t>(rows), static_cast<std::int64_t>(kMaxSuppressedTokens)}));
    }
    return program_->execute(program::kSampleMethod, inputs);
  }();
  if (!out.ok()) return out.status().with_context("device sampler");
  if (out->size() != 1 || (*out)[0].dtype() != DType::kI64 ||
      (*out)[0].numel() != static_cast<std::int64_t>(rows) || (*out)[0].device() != Device::kCpu ||
      (rows > 0 && (*out)[0].data() == nullptr)) {
    return internal_error("device sampler returned {} tensors ({}); expected host i64[{}]",
                          out->size(), out->empty() ? std::string("-") : (*out)[0].describe(),
                          rows);
  }
  std::vector<Token> tokens;
  tokens.reserve(rows);
  for (std::int64_t id : (*out)[0].span<const std::int64_t>()) {
    if (id < 0 || id >= vocab_size_) {
      return internal_error("device sampler drew token {} outside the vocabulary of {}", id,
                            vocab_size_);
    }
    tokens.push_back(static_cast<Token>(id));
  }
  return tokens;
}

Status CudaExecutor::penalize_on_device(const Tensor& logits,
                                        const std::vector<SessionId>& sessions) {
  // The common case: nobody asks, nothing to build or launch.
  if (std::none_of(sessions.begin(), sessions.end(),
                   [this](SessionId sid) { return sessions_.adjusts_logits(sid); })) {
    return Status::ok();
  }
  // Reused across steps, so a penalised step does not allocate once warm.
  std::vector<sampling::PenaltyEntry>& entries = penalty_entries_;
  std::vector<float>& rows = penalty_rows_;
  std::vector<std::int32_t>& offsets = penalty_offsets_;
  std::vector<sampling::PenaltyEntry>& row_entries = penalty_row_entries_;
  std::size_t first = 0;  // the group's first row
  bool any = false;
  const auto flush = [&](std::size_t end) -> Status {
    if (!any) return Status::ok();
    if (!has_penalizer_) {
      return invalid_program(
          "a session's sampling policy adjusts logits (logit_bias, a penalty or min_p) but the "
          "program exports no {} method for its device logits; drop those parameters or serve a "
          "program that exports it",
          program::kPenalizeMethod);
    }
    const auto n = static_cast<std::int64_t>(end - first);
    const auto count = static_cast<std::int64_t>(entries.size());
    const std::vector<Tensor> inputs = {
        logits.slice_rows(static_cast<std::int64_t>(first), static_cast<std::int64_t>(end)),
        Tensor::view(rows.data(), DType::kF32, {n, program::kPenalizeRowParams}),
        Tensor::view(offsets.data(), DType::kI32, {n + 1}),
        Tensor::view(entries.data(), DType::kI32, {count, 4})};
    auto out = program_->execute(program::kPenalizeMethod, inputs);
    if (!out.ok()) return out.status().with_context("logit adjustments");
    return Status::ok();
  };
  const auto reset = [&](std::size_t at) {
    first = at;
    any = false;
    entries.clear();
    rows.clear();
    offsets.assign(1, 0);
  };
  reset(0);
  for (std::size_t r = 0; r < sessions.size(); ++r) {
    row_entries.clear();
    const std::optional<DevicePenaltyRow> row =
        sessions_.device_penalties(sessions[r], row_entries);
    if (entries.size() + row_entries.size() >
        static_cast<std::size_t>(program::kPenalizeMaxEntries)) {
      CELLM_RETURN_IF_ERROR(flush(r));
      reset(r);
    }
    // A row past the vocabulary's worth of entries cannot occur: one entry an id.
    entries.insert(entries.end(), row_entries.begin(), row_entries.end());
    const DevicePenaltyRow p =
        row.value_or(DevicePenaltyRow{1.0f, 0.0f, -std::numeric_limits<float>::infinity()});
    rows.insert(rows.end(), {p.repetition, p.temperature, p.min_p_log_threshold});
    offsets.push_back(static_cast<std::int32_t>(entries.size()));
    any = any || row.has_value();
  }
  return flush(sessions.size());
}

Status CudaExecutor::mask_on_device(const Tensor& logits, const std::vector<SessionId>& sessions) {
  std::vector<TokenMaskPtr> masks(sessions.size());
  bool any = false;
  for (std::size_t r = 0; r < sessions.size(); ++r) {
    masks[r] = sessions_.token_mask(sessions[r]);
    any = any || masks[r] != nullptr;
  }
  if (!any) return Status::ok();
  if (!has_masker_) {
    return invalid_program(
        "a session decodes under a grammar (structured output) but the program exports no {} "
        "method for its device logits; serve a program that exports it",
        program::kMaskMethod);
  }
  const auto per_row = static_cast<std::size_t>((vocab_size_ + 31) / 32);
  const auto group = static_cast<std::size_t>(program::kMaskMaxRows);
  for (std::size_t first = 0; first < sessions.size(); first += group) {
    const std::size_t n = std::min(group, sessions.size() - first);
    mask_words_.assign(n * per_row, ~0u);
    bool group_any = false;
    for (std::size_t r = 0; r < n; ++r) {
      const TokenMaskPtr& m = masks[first + r];
      if (!m) continue;
      group_any = true;
      std::uint32_t* row = mask_words_.data() + r * per_row;
      std::fill(row, row + per_row, 0u);
      std::copy_n(m->words.begin(), std::min(per_row, m->words.size()), row);
    }
    if (!group_any) continue;
    const std::vector<Tensor> inputs = {
        logits.slice_rows(static_cast<std::int64_t>(first), static_cast<std::int64_t>(first + n)),
        Tensor::view(mask_words_.data(), DType::kI32,
                     {static_cast<std::int64_t>(n), static_cast<std::int64_t>(per_row)})};
    auto out = program_->execute(program::kMaskMethod, inputs);
    if (!out.ok()) return out.status().with_context("token mask");
  }
  return Status::ok();
}

Status CudaExecutor::logprobs_on_device(const Tensor& logits,
                                        const std::vector<SessionId>& sessions,
                                        const std::vector<Token>& tokens,
                                        const std::vector<std::int64_t>& suppressed,
                                        std::vector<std::optional<TokenLogprobs>>& logprobs) {
  // The common case: nobody asks, nothing to build or launch.
  if (std::none_of(sessions.begin(), sessions.end(),
                   [this](SessionId sid) { return sessions_.logprobs_wanted(sid) >= 0; })) {
    return Status::ok();
  }
  std::vector<float> params;
  params.reserve(sessions.size() * program::kLogprobsParams);
  std::vector<std::int64_t> ids;
  ids.reserve(sessions.size());
  for (std::size_t r = 0; r < sessions.size(); ++r) {
    const std::int32_t count = sessions_.logprobs_wanted(sessions[r]);
    const SamplingParams* policy = sessions_.policy(sessions[r]);
    const float temperature =
        policy != nullptr && policy->temperature > 0.0f ? policy->temperature : 0.0f;
    params.insert(params.end(), {temperature, static_cast<float>(count)});
    ids.push_back(static_cast<std::int64_t>(tokens[r]));
  }
  std::vector<std::optional<TokenLogprobs>> entries;
  CELLM_RETURN_IF_ERROR(run_logprobs_method(logits, params, ids, suppressed, entries));
  for (std::size_t r = 0; r < sessions.size(); ++r) {
    if (entries[r]) logprobs[r] = std::move(entries[r]);
  }
  return Status::ok();
}

Status CudaExecutor::run_logprobs_method(const Tensor& logits, const std::vector<float>& params,
                                         const std::vector<std::int64_t>& ids,
                                         const std::vector<std::int64_t>& suppressed,
                                         std::vector<std::optional<TokenLogprobs>>& logprobs) {
  if (!has_logprobs_) {
    return invalid_program(
        "a session asks for logprobs but the program exports no {} method for its device logits; "
        "drop logprobs from the request or serve a program that exports it",
        program::kLogprobsMethod);
  }
  const auto rows = static_cast<std::int64_t>(ids.size());
  logprobs.assign(ids.size(), std::nullopt);
  std::vector<Tensor> inputs = {
      logits.slice_rows(0, rows),
      Tensor::view(params.data(), DType::kF32, {rows, program::kLogprobsParams}),
      Tensor::view(ids.data(), DType::kI64, {rows})};
  if (!suppressed.empty()) {
    inputs.push_back(Tensor::view(suppressed.data(), DType::kI64,
                                  {rows, static_cast<std::int64_t>(kMaxSuppressedTokens)}));
  }
  auto out = program_->execute(program::kLogprobsMethod, inputs);
  if (!out.ok()) return out.status().with_context("logprobs");
  constexpr std::int64_t kTop = program::kLogprobsMaxTop;
  if (out->size() != 2 || (*out)[0].dtype() != DType::kF32 || (*out)[1].dtype() != DType::kI64 ||
      (*out)[0].device() != Device::kCpu || (*out)[1].device() != Device::kCpu ||
      (*out)[0].numel() != rows * (1 + kTop) || (*out)[1].numel() != rows * kTop ||
      (*out)[0].data() == nullptr || (*out)[1].data() == nullptr) {
    return internal_error("{} returned {} tensors; expected host f32[{}, {}] and i64[{}, {}]",
                          program::kLogprobsMethod, out->size(), rows, 1 + kTop, rows, kTop);
  }
  const std::span<const float> values = (*out)[0].span<const float>();
  const std::span<const std::int64_t> top_ids = (*out)[1].span<const std::int64_t>();
  for (std::size_t r = 0; r < ids.size(); ++r) {
    const float wanted = params[r * program::kLogprobsParams + 1];
    if (wanted < 0.0f) continue;
    const auto count = static_cast<std::size_t>(wanted);
    TokenLogprobs lp;
    lp.token = static_cast<Token>(ids[r]);
    lp.logprob = values[r * (1 + kTop)];
    for (std::size_t j = 0; j < count && j < static_cast<std::size_t>(vocab_size_); ++j) {
      const std::int64_t id = top_ids[r * kTop + j];
      if (id < 0 || id >= vocab_size_) {
        return internal_error("{} returned top id {} outside the vocabulary of {}",
                              program::kLogprobsMethod, id, vocab_size_);
      }
      lp.top.push_back({static_cast<Token>(id), values[r * (1 + kTop) + 1 + j]});
    }
    logprobs[r] = std::move(lp);
  }
  return Status::ok();
}

CudaExecutor::PromptRows CudaExecutor::prompt_rows(const BatchInput& batch, std::int64_t offset,
                                                   std::int64_t length) const {
  PromptRows p;
  std::int64_t start = 0;  // the input's first token on the step's axis
  for (const Input& in : batch.inputs) {
    const auto size = static_cast<std::int64_t>(in.size);
    const std::int64_t begin = start;
    start += size;
    if (begin >= offset + length || begin + size <= offset) continue;
    const SamplingParams* policy = sessions_.policy(in.sid);
    const auto* tokens = std::get_if<TokenInputPtr>(&in.payload);
    if (policy == nullptr || !policy->prompt_logprobs || tokens == nullptr || !*tokens) continue;
    const std::vector<Token>& payload = **tokens;
    const std::int32_t count =
        std::clamp<std::int32_t>(policy->logprobs, 0, static_cast<std::int32_t>(kMaxTopLogprobs));
    for (std::int64_t j = 0; j < size; ++j) {
      const std::int64_t row = begin + j;
      if (row < offset || row >= offset + length) continue;
      // The output row is sampled, not scored; a row whose next token the
      // payload does not hold has nothing to score.
      if (in.produce_output && j == size - 1) continue;
      const std::size_t next = in.offset + static_cast<std::size_t>(j) + 1;
      if (next >= payload.size()) continue;
      p.rows.push_back(row - offset);
      p.sessions.push_back(in.sid);
      p.next.push_back(payload[next]);
      p.counts.push_back(count);
    }
  }
  return p;
}

Status CudaExecutor::score_prompt(const Tensor& logits, std::size_t first, const PromptRows& p) {
  const std::size_t n = p.rows.size();
  std::vector<std::optional<TokenLogprobs>> scored(n);
  const Tensor rows = logits.slice_rows(static_cast<std::int64_t>(first),
                                        static_cast<std::int64_t>(first + n));
  if (rows.device() == Device::kCuda) {
    // The same method as the draws' logprobs, at temperature 0 (the raw row).
    std::vector<float> params;
    std::vector<std::int64_t> ids;
    for (std::size_t k = 0; k < n; ++k) {
      params.insert(params.end(), {0.0f, static_cast<float>(p.counts[k])});
      ids.push_back(static_cast<std::int64_t>(p.next[k]));
    }
    CELLM_RETURN_IF_ERROR(run_logprobs_method(rows, params, ids, {}, scored));
  } else {
    std::vector<float> row;
    for (std::size_t k = 0; k < n; ++k) {
      sampling::row_to_f32(rows, static_cast<std::int64_t>(k), row);
      TokenLogprobs lp;
      sampling::row_logprobs(row, 0.0f, {}, p.next[k], p.counts[k], lp);
      scored[k] = std::move(lp);
    }
  }
  for (std::size_t k = 0; k < n; ++k) {
    if (!scored[k]) return internal_error("prompt row {} was not scored", p.rows[k]);
    pending_prompt_[p.sessions[k]].push_back(std::move(*scored[k]));
  }
  return Status::ok();
}

Result<std::vector<Token>> CudaExecutor::sample_outputs(
    const Tensor& logits, const std::vector<SessionId>& sessions,
    std::vector<std::optional<TokenLogprobs>>& logprobs) {
  CELLM_RETURN_IF_ERROR(check_logits_home(logits));
  logprobs.assign(sessions.size(), std::nullopt);
  if (logits.device() == Device::kCuda) {
    CELLM_RETURN_IF_ERROR(mask_on_device(logits, sessions));
    CELLM_RETURN_IF_ERROR(penalize_on_device(logits, sessions));
    // Reused across steps, so a step allocates none of them once warm.
    std::vector<float>& params = sample_params_;
    std::vector<std::int64_t>& suppressed = sample_suppressed_;
    params.clear();
    suppressed.clear();
    bool all_greedy = true;
    bool any_suppressed = false;
    for (SessionId sid : sessions) {
      // A session without a policy samples greedily.
      const DeviceSamplingRow row = sessions_.device_sampling(sid).value_or(DeviceSamplingRow{});
      params.insert(params.end(), {row.temperature, row.top_p, row.top_k, row.coin});
      suppressed.insert(suppressed.end(), row.suppressed.begin(), row.suppressed.end());
      all_greedy = all_greedy && !(row.temperature > 0.0f);
      any_suppressed = any_suppressed || row.suppresses;
    }
    // Without suppression the sample method keeps its two-input form.
    if (!any_suppressed) suppressed.clear();
    auto drawn = run_device_sampler(logits, sessions.size(), params, all_greedy, suppressed);
    if (drawn.ok()) {
      for (std::size_t r = 0; r < sessions.size(); ++r)
        sessions_.note_draw(sessions[r], (*drawn)[r]);
      CELLM_RETURN_IF_ERROR(logprobs_on_device(logits, sessions, *drawn, suppressed, logprobs));
    }
    return drawn;
  }
  std::vector<Token> tokens;
  tokens.reserve(sessions.size());
  std::vector<float> row;
  for (std::size_t r = 0; r < sessions.size(); ++r) {
    const auto index = static_cast<std::int64_t>(r);
    TokenLogprobs lp;
    std::optional<Token> token = sessions_.sample(sessions[r], logits, index, &lp);
    if (token && sessions_.logprobs_wanted(sessions[r]) >= 0) logprobs[r] = std::move(lp);
    if (!token && sessions_.greedy(sessions[r])) {
      sampling::row_to_f32(logits, index, row);
      token = static_cast<Token>(sampling::argmax_row(row));
      sessions_.note_draw(sessions[r], *token);
    }
    if (!token) {
      return internal_error("session {}: sampling row {} of {} failed", sessions[r], r,
                            logits.describe());
    }
    tokens.push_back(*token);
  }
  return tokens;
}

bool CudaExecutor::execute(const BatchInput& batch, BatchOutput& out) {
  const PublishOnExit publish{[this] { publish_kv_cells(); }};
  out.outputs.assign(batch.inputs.size(), std::nullopt);
  if (!initialized_ || raw_executing_) {
    CELLM_LOG_ERROR("executor: execute() {}",
                    initialized_ ? "inside execute_raw()" : "before initialize()");
    return false;
  }
  Result<PackedStep> packed = sessions_.pack(batch);
  if (!packed.ok()) {
    CELLM_LOG_WARN("executor: batch refused: {}", packed.status().to_string());
    return false;
  }
  PackedStep& step = *packed;
  drafted_.clear();
  if (speculation_) plan_drafts(batch, step);
  std::vector<std::optional<TokenLogprobs>> logprobs;
  for (const program::StepSlice& slice :
       program::plan_slices(static_cast<std::int64_t>(step.tokens.size()), methods_)) {
    SliceRows rows = select_rows(step, slice.offset, slice.length);
    const std::vector<std::size_t>& wanted = rows.inputs;
    // Rows beyond the sampled ones: drafted rows (one slice, plan_drafts
    // made sure), each input's real token first, then prompt rows to score.
    // A slice nobody samples from loses its placeholder row.
    const PromptRows prompt = prompt_rows(batch, slice.offset, slice.length);
    if ((!drafted_.empty() || !prompt.rows.empty()) && wanted.empty()) rows.selector.clear();
    std::size_t draft_rows = 0;
    for (const DraftedInput& d : drafted_) {
      for (std::size_t i = 0; i <= d.drafts.size(); ++i) {
        const std::int64_t row =
            i == 0 ? d.token_row : d.first_draft_row + static_cast<std::int64_t>(i) - 1;
        rows.selector.push_back(row - slice.offset);
      }
      draft_rows += 1 + d.drafts.size();
    }
    rows.selector.insert(rows.selector.end(), prompt.rows.begin(), prompt.rows.end());
    auto forward =
        run_slice(slice, step.tokens, step.positions, step.seq_ids, std::move(rows.selector));
    if (!forward.ok()) {
      CELLM_LOG_ERROR("executor: forward at token {} failed: {}", slice.offset,
                      forward.status().to_string());
      return false;
    }
    if (!drafted_.empty()) {
      const Status resolved = resolve_drafts(forward->logits, wanted.size(), out);
      if (!resolved.is_ok()) {
        CELLM_LOG_ERROR("executor: speculative sampling failed: {}", resolved.to_string());
        return false;
      }
      if (forward->taps) hand_taps(*forward->taps, slice.offset, {}, step, out);
    }
    if (!prompt.rows.empty()) {
      if (const Status scored = score_prompt(forward->logits, wanted.size() + draft_rows, prompt);
          !scored.is_ok()) {
        CELLM_LOG_ERROR("executor: prompt logprobs failed: {}", scored.to_string());
        return false;
      }
    }
    if (wanted.empty()) continue;
    std::vector<SessionId>& sessions = step_sessions_;
    sessions.clear();
    for (std::size_t input : wanted) sessions.push_back(batch.inputs[input].sid);
    auto tokens = sample_outputs(forward->logits, sessions, logprobs);
    if (!tokens.ok()) {
      CELLM_LOG_ERROR("executor: sampling failed: {}", tokens.status().to_string());
      return false;
    }
    for (std::size_t r = 0; r < wanted.size(); ++r) {
      out.outputs[wanted[r]] = Output{sessions[r], {(*tokens)[r]}};
      if (logprobs[r]) out.outputs[wanted[r]]->logprobs.push_back(std::move(*logprobs[r]));
      if (auto it = pending_prompt_.find(sessions[r]); it != pending_prompt_.end()) {
        out.outputs[wanted[r]]->prompt_logprobs = std::move(it->second);
        pending_prompt_.erase(it);
      }
    }
    if (forward->taps) hand_taps(*forward->taps, slice.offset, wanted, step, out);
  }
  return true;
}

bool CudaExecutor::execute_raw(const RawTargetStep& step,
                               const std::function<bool(const RawTargetOutput&)>& consume) {
  if (!initialized_ || raw_executing_) {
    CELLM_LOG_ERROR("executor: execute_raw() {}",
                    initialized_ ? "called from its own callback" : "before initialize()");
    return false;
  }
  FlagGuard guard(raw_executing_);
  const PublishOnExit publish{[this] { publish_kv_cells(); }};
  const std::size_t n = step.tokens.size();
  if (n == 0 || step.positions.size() != n || step.seq_ids.size() != n) {
    CELLM_LOG_ERROR("executor: raw step has {} tokens, {} positions and {} sequence ids", n,
                    step.positions.size(), step.seq_ids.size());
    return false;
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (step.tokens[i] < 0 || step.tokens[i] >= vocab_size_ || step.positions[i] < 0 ||
        step.positions[i] >= std::numeric_limits<std::int32_t>::max()) {
      CELLM_LOG_ERROR("executor: raw step token {} ({} at position {}) is out of range", i,
                      step.tokens[i], step.positions[i]);
      return false;
    }
  }
  for (std::int64_t index : step.logit_indices) {
    if (index < -1 || index >= static_cast<std::int64_t>(n)) {
      CELLM_LOG_ERROR("executor: raw logit index {} is outside [-1, {})", index, n);
      return false;
    }
  }
  for (const program::StepSlice& slice :
       program::plan_slices(static_cast<std::int64_t>(n), methods_)) {
    std::vector<std::int64_t> selector;
    std::vector<std::size_t> selected;
    for (std::size_t j = 0; j < step.logit_indices.size(); ++j) {
      const std::int64_t index = step.logit_indices[j];
      if (index >= slice.offset && index < slice.offset + slice.length) {
        selector.push_back(index - slice.offset);
        selected.push_back(j);
      }
    }
    if (selector.empty()) selector.push_back(slice.length - 1);
    auto forward = run_slice(slice, step.tokens, step.positions, step.seq_ids, std::move(selector));
    if (!forward.ok()) {
      CELLM_LOG_ERROR("executor: raw forward at token {} failed: {}", slice.offset,
                      forward.status().to_string());
      return false;
    }
    const RawTargetOutput output{slice.offset, slice.length, forward->logits,
                                 forward->taps ? &*forward->taps : nullptr, selected};
    if (!consume(output)) return false;
  }
  return true;
}

std::optional<std::vector<Token>> CudaExecutor::argmax_rows(const Tensor& logits,
                                                            std::size_t rows) {
  if (!initialized_ || logits.rank() != 2 || logits.dim(1) != vocab_size_ || rows == 0 ||
      static_cast<std::int64_t>(rows) > logits.dim(0)) {
    return std::nullopt;
  }
  if (logits.device() == Device::kCuda) {
    if (!has_argmax_) return std::nullopt;
    auto tokens = run_device_sampler(logits, rows, {}, true);
    if (!tokens.ok()) return std::nullopt;
    return std::move(tokens).value();
  }
  auto ids = sampling::argmax_rows(logits.slice_rows(0, static_cast<std::int64_t>(rows)));
  if (!ids.ok()) return std::nullopt;
  return to_tokens(*ids);
}

std::optional<std::vector<Token>> CudaExecutor::sample_rows(const Tensor& logits, std::size_t rows,
                                                            const std::vector<float>& params) {
  if (!initialized_ || logits.rank() != 2 || logits.dim(1) != vocab_size_ || rows == 0 ||
      static_cast<std::int64_t>(rows) > logits.dim(0) ||
      params.size() != rows * sampling::kNumParams) {
    return std::nullopt;
  }
  if (logits.device() == Device::kCuda) {
    if (!has_sampler_) return std::nullopt;
    bool all_greedy = true;
    for (std::size_t r = 0; r < rows; ++r) {
      all_greedy = all_greedy && !(params[r * sampling::kNumParams] > 0.0f);
    }
    auto tokens = run_device_sampler(logits, rows, params, all_greedy);
    if (!tokens.ok()) return std::nullopt;
    return std::move(tokens).value();
  }
  const Tensor view = Tensor::view(params.data(), DType::kF32,
                                   {static_cast<std::int64_t>(rows), sampling::kNumParams});
  auto ids = sampling::sample_rows(logits.slice_rows(0, static_cast<std::int64_t>(rows)), view);
  if (!ids.ok()) return std::nullopt;
  return to_tokens(*ids);
}

OffGraphKVMetrics CudaExecutor::kv_metrics() const {
  return kv_metrics_of(*cache_, kv_cell_bytes_);
}

std::vector<ForwardMethodCalls> CudaExecutor::method_calls() const {
  std::vector<ForwardMethodCalls> calls;
  for (std::size_t i = 0; i < methods_.size(); ++i) calls.push_back({methods_[i].name, calls_[i]});
  return calls;
}

}  // namespace cellm::executor
