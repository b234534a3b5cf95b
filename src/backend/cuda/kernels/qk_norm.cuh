// Per-head RMSNorm of q and k in place (Qwen3, Gemma 3), before RoPE: each
// head vector of head_dim is normalised and multiplied by (w + offset), with
// separate weights for q and k. q and k may be column ranges of one fused
// qkv buffer (row strides in elements).
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

struct QkNormParams {
  bf16* q = nullptr;               // [num_tokens, q_stride], heads at [0, num_heads*head_dim)
  bf16* k = nullptr;               // [num_tokens, k_stride], heads at [0, num_kv_heads*head_dim)
  const bf16* q_weight = nullptr;  // [head_dim]
  const bf16* k_weight = nullptr;  // [head_dim]
  std::int64_t q_stride = 0;
  std::int64_t k_stride = 0;
  std::int32_t num_tokens = 0;
  std::int32_t num_heads = 0;
  std::int32_t num_kv_heads = 0;
  std::int32_t head_dim = 0;  // multiple of 8, at most 256
  float eps = 1e-6f;
  float weight_offset = 0.0f;  // 0 or 1

  // Programmatic dependent launch (launch.h): the kernel waits on the previous one itself.
  bool pdl = false;

  Status validate() const;
};

void launch_qk_norm(const QkNormParams& params, cudaStream_t stream);

}  // namespace cellm::cuda
