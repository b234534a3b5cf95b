// Rotary position embedding applied in place to q and k, Hugging Face
// rotate_half layout: pair i couples dims i and i + rotary_dim/2 of every
// head; dims at and past rotary_dim pass through (partial rotary). The
// scaling variant (default, llama3, linear) and the layer's theta live in
// `inv_freq`, which the host computes once per layer type; the angle is
// position * inv_freq[i] in float32, as Hugging Face computes it.
//
// Thread-safety: launch_* are reentrant; params are plain values.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_types.h"
// Status is only declared here: .cu files must not pull fmt through nvcc
// (validate() is defined in the family's .cpp).
namespace cellm {
class Status;
}  // namespace cellm

namespace cellm::cuda {

struct RopeParams {
  bf16* q = nullptr;                        // [num_tokens, q_stride], heads first
  bf16* k = nullptr;                        // [num_tokens, k_stride], heads first
  const std::int32_t* positions = nullptr;  // [num_tokens]
  const float* inv_freq = nullptr;          // [rotary_dim / 2]
  std::int64_t q_stride = 0;
  std::int64_t k_stride = 0;
  std::int32_t num_tokens = 0;
  std::int32_t num_heads = 0;
  std::int32_t num_kv_heads = 0;
  std::int32_t head_dim = 0;
  std::int32_t rotary_dim = 0;  // even, <= head_dim, <= 512

  Status validate() const;
};

void launch_rope(const RopeParams& params, cudaStream_t stream);

}  // namespace cellm::cuda
