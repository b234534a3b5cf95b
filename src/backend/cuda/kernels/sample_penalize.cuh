// Logit adjustments in place before the device sampler (the program's
// `sample_penalize` method): per row a sparse list of entries (token, bias,
// subtract, flags) applied as x = x + bias, then x = x > 0 ? x / r : x * r
// for repeated ids, then x = x - subtract, suppressed ids set to -inf; then,
// on rows with a temperature and a min_p threshold, every id whose
// x / T - max(x / T) falls below the threshold set to -inf. Each operation is
// a separately rounded float32 op (__fadd_rn, __fdiv_rn, ...), so the result
// equals the host reference (sampling/penalties.h) bit for bit.
//
// One block a row; rows without entries or min_p return at once, so a step
// pays for the rows that asked. Entries of a row name distinct ids (the
// host builds them so): threads never write the same logit.
//
// Thread-safety: launch_* are reentrant; params are plain values.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

// Status is only declared here: .cu files must not pull fmt through nvcc
// (validate() is defined in the family's .cpp).
namespace cellm {
class Status;
}  // namespace cellm

namespace cellm::cuda {

// Entry flags (= sampling::kEntryRepeated / kEntrySuppressed).
inline constexpr std::int32_t kPenalizeRepeated = 1;
inline constexpr std::int32_t kPenalizeSuppressed = 2;
inline constexpr int kPenalizeRowParams = 3;  // repetition, temperature, min_p log threshold

struct PenalizeParams {
  float* logits = nullptr;                // [rows, logits_stride], written in place
  const float* row_params = nullptr;      // [rows, kPenalizeRowParams]
  const std::int32_t* offsets = nullptr;  // [rows + 1]: row r's entries
  const std::int32_t* entries = nullptr;  // [N, 4]: token, bias bits, subtract bits, flags
  std::int64_t logits_stride = 0;
  std::int32_t rows = 0;
  std::int32_t vocab = 0;

  Status validate() const;
};

void launch_sample_penalize(const PenalizeParams& params, cudaStream_t stream);

}  // namespace cellm::cuda
