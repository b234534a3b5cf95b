// Log probabilities of drawn tokens on the device (the program's
// `sample_logprobs` method), run after the sampler on the same logits: per
// row, the drawn id's logprob and the `count` (<= kLogprobsTop) most likely
// ids with theirs, from log-softmax(z), z = x / T (x itself when T <= 0),
// NaN logits and suppressed ids at -inf. sampling/logprobs.h is the host
// reference and defines the order (value descending, ties to the lower id,
// -inf ids included when fewer finite ones exist). A row without a finite
// maximum reports 0 for the drawn id and -inf for the top ones.
//
// Arithmetic: z = __fdiv_rn(x, T) as the host; max and sum exp(z - max) by an
// online (rescaling) reduction in float32, so the values agree with the
// host's double-precision sum to float rounding (~1e-6 relative), not bit
// for bit. The top ids agree exactly: both rank by z, which rounds alike.
//
// One block a row; rows whose count is negative return at once, so a step
// pays only for the rows that asked. The block's threads each keep their own
// best ids over a strided slice, then `count` rounds of a block argmax over
// the lists' heads merge them.
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

inline constexpr int kLogprobsTop = 20;           // = program::kLogprobsMaxTop
inline constexpr int kLogprobsParamsPerRow = 2;   // temperature, count (-1: skip)
inline constexpr int kLogprobsMaxSuppressed = 8;  // = cellm::kMaxSuppressedTokens

struct LogprobsParams {
  const float* logits = nullptr;             // [rows, logits_stride]
  const float* params = nullptr;             // [rows, 2]
  const std::int32_t* tokens = nullptr;      // [rows] drawn ids
  const std::int32_t* suppressed = nullptr;  // [rows, 8] (-1: empty) or null
  float* values = nullptr;                   // [rows, 1 + kLogprobsTop]: drawn, then top
  std::int32_t* ids = nullptr;               // [rows, kLogprobsTop]; -1 past the count
  std::int64_t logits_stride = 0;
  std::int32_t rows = 0;
  std::int32_t vocab = 0;

  Status validate() const;
};

void launch_sample_logprobs(const LogprobsParams& params, cudaStream_t stream);

}  // namespace cellm::cuda
