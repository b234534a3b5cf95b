// The device logprobs (sample_logprobs.cuh): one block a row.
#include <cmath>

#include <climits>

#include "backend/cuda/kernels/sample_logprobs.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// "a before b": larger value, then lower id (the host's rank order).
__device__ __forceinline__ bool ranks_before(float va, int ia, float vb, int ib) {
  return va > vb || (va == vb && ia < ib);
}

// Running max m and sum s of exp(z - m), merged with another pair.
__device__ __forceinline__ void merge_lse(float& m, float& s, float om, float os) {
  if (om == -INFINITY) return;
  if (m == -INFINITY) {
    m = om;
    s = os;
    return;
  }
  if (om > m) {
    s = s * expf(m - om) + os;
    m = om;
  } else {
    s += os * expf(om - m);
  }
}

__global__ void __launch_bounds__(kThreads)
    sample_logprobs_kernel(const __grid_constant__ LogprobsParams p) {
  __shared__ float list_v[kLogprobsTop][kThreads];
  __shared__ int list_i[kLogprobsTop][kThreads];
  __shared__ float red_m[kWarps];
  __shared__ float red_s[kWarps];
  __shared__ float pick_v[kWarps];
  __shared__ int pick_i[kWarps];
  __shared__ int banned[kLogprobsMaxSuppressed];
  const int r = static_cast<int>(blockIdx.x);
  const int tid = static_cast<int>(threadIdx.x);
  const float count_f = p.params[r * kLogprobsParamsPerRow + 1];
  if (!(count_f >= 0.0f)) return;  // uniform across the block
  const int count = min(static_cast<int>(count_f), min(kLogprobsTop, p.vocab));
  const float temperature = p.params[r * kLogprobsParamsPerRow];
  if (tid < kLogprobsMaxSuppressed) {
    banned[tid] = p.suppressed != nullptr ? p.suppressed[r * kLogprobsMaxSuppressed + tid] : -1;
  }
  __syncthreads();
  const float* row = p.logits + static_cast<std::int64_t>(r) * p.logits_stride;
  const auto scaled = [&](int i) {
    const float x = row[i];
    if (isnan(x)) return -INFINITY;
#pragma unroll
    for (int j = 0; j < kLogprobsMaxSuppressed; ++j) {
      if (banned[j] == i) return -INFINITY;
    }
    return temperature > 0.0f ? __fdiv_rn(x, temperature) : x;
  };

  // This thread's best `count` ids, sorted, in its column of the lists.
  for (int k = 0; k < count; ++k) {
    list_v[k][tid] = -INFINITY;
    list_i[k][tid] = INT_MAX;
  }
  float m = -INFINITY;
  float s = 0.0f;
  for (int i = tid; i < p.vocab; i += kThreads) {
    const float z = scaled(i);
    if (z != -INFINITY) merge_lse(m, s, z, 1.0f);
    if (count == 0 || !ranks_before(z, i, list_v[count - 1][tid], list_i[count - 1][tid])) {
      continue;
    }
    int at = count - 1;
    while (at > 0 && ranks_before(z, i, list_v[at - 1][tid], list_i[at - 1][tid])) {
      list_v[at][tid] = list_v[at - 1][tid];
      list_i[at][tid] = list_i[at - 1][tid];
      --at;
    }
    list_v[at][tid] = z;
    list_i[at][tid] = i;
  }

  // The row's max and sum.
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float om = __shfl_xor_sync(0xffffffffu, m, offset);
    const float os = __shfl_xor_sync(0xffffffffu, s, offset);
    merge_lse(m, s, om, os);
  }
  const int warp = tid >> 5;
  const int lane = tid & 31;
  if (lane == 0) {
    red_m[warp] = m;
    red_s[warp] = s;
  }
  __syncthreads();
  m = -INFINITY;
  s = 0.0f;
  for (int w = 0; w < kWarps; ++w) merge_lse(m, s, red_m[w], red_s[w]);
  const bool finite = isfinite(m);
  const float log_sum = finite ? logf(s) : 0.0f;
  const auto logprob_of = [&](float z) {
    if (!finite || z == -INFINITY) return -INFINITY;
    return __fsub_rn(__fsub_rn(z, m), log_sum);
  };

  float* values = p.values + static_cast<std::int64_t>(r) * (1 + kLogprobsTop);
  std::int32_t* ids = p.ids + static_cast<std::int64_t>(r) * kLogprobsTop;
  if (tid == 0) values[0] = finite ? logprob_of(scaled(p.tokens[r])) : 0.0f;
  if (tid < kLogprobsTop && tid >= count) ids[tid] = -1;

  // Merge: `count` rounds, each taking the best head of the threads' lists.
  int head = 0;
  for (int k = 0; k < count; ++k) {
    float v = head < count ? list_v[head][tid] : -INFINITY;
    int id = head < count ? list_i[head][tid] : INT_MAX;
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, v, offset);
      const int oi = __shfl_xor_sync(0xffffffffu, id, offset);
      if (ranks_before(ov, oi, v, id)) {
        v = ov;
        id = oi;
      }
    }
    if (lane == 0) {
      pick_v[warp] = v;
      pick_i[warp] = id;
    }
    __syncthreads();
    float best_v = pick_v[0];
    int best_i = pick_i[0];
    for (int w = 1; w < kWarps; ++w) {
      if (ranks_before(pick_v[w], pick_i[w], best_v, best_i)) {
        best_v = pick_v[w];
        best_i = pick_i[w];
      }
    }
    __syncthreads();  // pick_* are rewritten next round
    if (head < count && list_i[head][tid] == best_i) ++head;
    if (tid == 0) {
      ids[k] = best_i;
      values[1 + k] = logprob_of(best_v);
    }
  }
}

}  // namespace

void launch_sample_logprobs(const LogprobsParams& params, cudaStream_t stream) {
  if (params.rows <= 0) return;
  launch(sample_logprobs_kernel,
         LaunchConfig{dim3(static_cast<unsigned>(params.rows)), dim3(kThreads), 0, stream}, params);
}

}  // namespace cellm::cuda
