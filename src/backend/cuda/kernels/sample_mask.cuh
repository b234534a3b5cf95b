// Constrained decoding's vocabulary mask on device logits (the program's
// `sample_mask` method): every id whose bit is clear in its row's mask words
// (bit t % 32 of word t / 32; sampling/token_mask.h is the host reference)
// becomes -inf in place, before the logit adjustments and the sampler, so
// greedy and sampled draws alike can only pick allowed ids.
//
// Grid: (ceil(vocab / (kThreads * 4)), rows); each thread reads one mask word
// per 32 ids it covers and writes only the ids to drop; rows whose `active`
// flag is 0 (no constraint) return at once.
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

struct MaskParams {
  float* logits = nullptr;               // [rows, logits_stride], written in place
  const std::uint32_t* words = nullptr;  // [rows, words_per_row]
  const std::int32_t* active = nullptr;  // [rows]: 0 = leave the row alone
  std::int64_t logits_stride = 0;
  std::int32_t words_per_row = 0;  // >= ceil(vocab / 32)
  std::int32_t rows = 0;
  std::int32_t vocab = 0;

  Status validate() const;
};

void launch_sample_mask(const MaskParams& params, cudaStream_t stream);

}  // namespace cellm::cuda
