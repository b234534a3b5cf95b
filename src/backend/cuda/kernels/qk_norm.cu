#include "backend/cuda/kernels/qk_norm.cuh"

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

constexpr int kWarps = 4;

// One warp per (token, head) vector; lane l holds dims [8l, 8l + 8).
__global__ void __launch_bounds__(kWarps * 32)
    qk_norm_kernel(const __grid_constant__ QkNormParams p) {
  griddep_enter();
  const int heads_per_token = p.num_heads + p.num_kv_heads;
  const std::int64_t item = static_cast<std::int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (item >= static_cast<std::int64_t>(p.num_tokens) * heads_per_token) return;
  const int lane = threadIdx.x & 31;
  const std::int64_t token = item / heads_per_token;
  const int head = static_cast<int>(item % heads_per_token);
  const bool is_q = head < p.num_heads;
  bf16* vec =
      is_q ? p.q + token * p.q_stride + static_cast<std::int64_t>(head) * p.head_dim
           : p.k + token * p.k_stride + static_cast<std::int64_t>(head - p.num_heads) * p.head_dim;
  const bf16* weight = is_q ? p.q_weight : p.k_weight;
  const bool active = lane * 8 < p.head_dim;
  float v[8] = {};
  if (active) load8(vec + lane * 8, v);
  float sum_sq = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) sum_sq += v[i] * v[i];
  sum_sq = warp_sum(sum_sq);
  const float inv_rms = rsqrtf(sum_sq / static_cast<float>(p.head_dim) + p.eps);
  if (active) {
    float w[8];
    load8(weight + lane * 8, w);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = v[i] * inv_rms * (w[i] + p.weight_offset);
    store8(vec + lane * 8, v);
  }
}

}  // namespace

void launch_qk_norm(const QkNormParams& params, cudaStream_t stream) {
  const long long items =
      static_cast<long long>(params.num_tokens) * (params.num_heads + params.num_kv_heads);
  launch(qk_norm_kernel, LaunchConfig{dim3(ceil_div(items, kWarps)), dim3(kWarps * 32), 0, stream, params.pdl},
         params);
}

}  // namespace cellm::cuda
