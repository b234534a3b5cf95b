// The CPU program's `sample` and `sample_argmax` methods: thin wrappers over
// the host sampler, so a program-side ("device") sampling path can be driven
// and compared with per-session host sampling without a GPU.
#include <utility>

#include "backend/cpu/cpu_program.h"
#include "sampling/sampler.h"

namespace cellm::cpu {

Result<std::vector<Tensor>> CpuProgram::run_sampler(std::string_view name,
                                                    const program::MethodEntry& method,
                                                    std::span<const Tensor> inputs) {
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

}  // namespace cellm::cpu
