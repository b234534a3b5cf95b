// The CPU program's `sample` and `sample_argmax` methods: thin wrappers over
// the host sampler, so a program-side ("device") sampling path can be driven
// and compared with per-session host sampling without a GPU. Its
// `sample_penalize` adjusts host logits in place with the reference
// arithmetic of sampling/penalties.h, its `sample_mask` drops the ids a
// constrained row's mask excludes (sampling/token_mask.h), and its
// `sample_logprobs` reports sampling/logprobs.h's reference values.
#include <utility>

#include "backend/cpu/cpu_program.h"
#include "sampling/logprobs.h"
#include "sampling/penalties.h"
#include "sampling/sampler.h"
#include "sampling/token_mask.h"

namespace cellm::cpu {

Result<std::vector<Tensor>> CpuProgram::run_sampler(std::string_view name,
                                                    const program::MethodEntry& method,
                                                    std::span<const Tensor> inputs) {
  if (method.kind == program::MethodKind::kPenalize) return run_penalize(inputs);
  if (method.kind == program::MethodKind::kMask) return run_mask(inputs);
  if (method.kind == program::MethodKind::kLogprobs) return run_logprobs(inputs);
  const bool full = method.kind == program::MethodKind::kSample;
  // sample: logits, params and optionally the suppressed ids.
  if (full ? (inputs.size() != 2 && inputs.size() != 3) : inputs.size() != 1) {
    return invalid_argument("{}: takes {} inputs, got {}", name,
                            full ? "2 or 3 (logits, params[, suppressed])" : "1 (logits)",
                            inputs.size());
  }
  const Tensor& logits = inputs[0];
  if (logits.device() != Device::kCpu || logits.rank() != 2 || logits.dim(1) != spec().vocab_size ||
      logits.dim(0) < 1) {
    return invalid_argument("{}: logits {} must be a host [R, {}] tensor with R >= 1", name,
                            logits.describe(), spec().vocab_size);
  }
  Result<std::vector<std::int64_t>> tokens =
      full ? sampling::sample_rows(logits, inputs[1], inputs.size() == 3 ? &inputs[2] : nullptr)
           : sampling::argmax_rows(logits);
  if (!tokens.ok()) {
    return tokens.status().with_context(name);
  }
  sampled_ = std::move(tokens).value();
  std::vector<Tensor> out;
  out.push_back(
      Tensor::view(sampled_.data(), DType::kI64, {static_cast<std::int64_t>(sampled_.size())}));
  return out;
}

Result<std::vector<Tensor>> CpuProgram::run_penalize(std::span<const Tensor> inputs) {
  CELLM_ASSIGN_OR_RETURN(program::PenalizeCall call,
                         methods_.check_penalize(inputs, spec().vocab_size, Device::kCpu));
  // The method's contract: the logits are adjusted where they lie.
  auto* logits = const_cast<float*>(static_cast<const float*>(inputs[0].data()));
  const auto vocab = static_cast<std::size_t>(spec().vocab_size);
  std::vector<sampling::PenaltyEntry> entries;
  for (std::int32_t r = 0; r < call.rows; ++r) {
    const float* prm = call.row_params.data() + static_cast<std::size_t>(r) * 3;
    const auto begin = static_cast<std::size_t>(call.offsets[static_cast<std::size_t>(r)]);
    const auto end = static_cast<std::size_t>(call.offsets[static_cast<std::size_t>(r) + 1]);
    entries.clear();
    for (std::size_t e = begin; e < end; ++e) {
      entries.push_back(sampling::entry_from_words(call.entries.data() + e * 4));
    }
    const std::span<float> row(logits + static_cast<std::size_t>(r) * vocab, vocab);
    sampling::apply_entries(row, entries, prm[0]);
    sampling::apply_min_p(row, prm[1], prm[2]);
  }
  return std::vector<Tensor>{};
}

Result<std::vector<Tensor>> CpuProgram::run_mask(std::span<const Tensor> inputs) {
  CELLM_ASSIGN_OR_RETURN(program::MaskCall call,
                         methods_.check_mask(inputs, spec().vocab_size, Device::kCpu));
  // The method's contract: the logits are masked where they lie.
  auto* logits = const_cast<float*>(static_cast<const float*>(inputs[0].data()));
  const auto vocab = static_cast<std::size_t>(spec().vocab_size);
  const auto per_row = static_cast<std::size_t>(call.words_per_row);
  for (std::size_t r = 0; r < static_cast<std::size_t>(call.rows); ++r) {
    sampling::apply_token_mask(std::span<float>(logits + r * vocab, vocab),
                               call.words.subspan(r * per_row, per_row));
  }
  return std::vector<Tensor>{};
}

Result<std::vector<Tensor>> CpuProgram::run_logprobs(std::span<const Tensor> inputs) {
  CELLM_ASSIGN_OR_RETURN(program::LogprobsCall call,
                         methods_.check_logprobs(inputs, spec().vocab_size, Device::kCpu));
  constexpr auto kTop = static_cast<std::size_t>(program::kLogprobsMaxTop);
  const auto rows = static_cast<std::size_t>(call.rows);
  const auto vocab = static_cast<std::size_t>(spec().vocab_size);
  logprob_values_.assign(rows * (1 + kTop), 0.0f);
  logprob_ids_.assign(rows * kTop, -1);
  const auto* logits = static_cast<const float*>(inputs[0].data());
  std::vector<Token> banned;
  TokenLogprobs lp;
  for (std::size_t r = 0; r < rows; ++r) {
    const float count = call.params[r * program::kLogprobsParams + 1];
    if (count < 0.0f) continue;
    banned.clear();
    if (!call.suppressed.empty()) {
      for (std::size_t j = 0; j < kMaxSuppressedTokens; ++j) {
        const std::int64_t id = call.suppressed[r * kMaxSuppressedTokens + j];
        if (id >= 0) banned.push_back(static_cast<Token>(id));
      }
    }
    sampling::row_logprobs(std::span(logits + r * vocab, vocab),
                           call.params[r * program::kLogprobsParams], banned,
                           static_cast<Token>(call.tokens[r]), static_cast<int>(count), lp);
    float* values = logprob_values_.data() + r * (1 + kTop);
    values[0] = lp.logprob;
    for (std::size_t j = 0; j < lp.top.size(); ++j) {
      values[1 + j] = lp.top[j].logprob;
      logprob_ids_[r * kTop + j] = static_cast<std::int64_t>(lp.top[j].token);
    }
  }
  const auto r64 = static_cast<std::int64_t>(rows);
  std::vector<Tensor> out;
  out.push_back(
      Tensor::view(logprob_values_.data(), DType::kF32, {r64, 1 + program::kLogprobsMaxTop}));
  out.push_back(Tensor::view(logprob_ids_.data(), DType::kI64, {r64, program::kLogprobsMaxTop}));
  return out;
}

}  // namespace cellm::cpu
