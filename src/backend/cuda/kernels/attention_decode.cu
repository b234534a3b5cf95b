#include "backend/cuda/dispatch.h"
#include "backend/cuda/kernels/attention.cuh"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxGroup = 8;  // q heads of one KV head handled by one block
constexpr float kLog2e = 1.4426950408889634f;

// A "stream" is the group of lanes that reads one key: head_dim/8 lanes for
// the bucket, 8 dims each. Streams run independent online softmaxes that are
// merged at the end in stream order.
template <int kMaxHd>
struct DecodeShape {
  static constexpr int kLanesPerKey = kMaxHd / 8;
  static constexpr int kKeysPerWarp = 32 / kLanesPerKey;
  static constexpr int kStreams = kWarps * kKeysPerWarp;
};

__device__ __forceinline__ float* partial_acc(const AttentionParams& p, int token, int head,
                                              int split) {
  return p.workspace +
         ((static_cast<std::int64_t>(token) * p.num_heads + head) * p.num_splits + split) *
             p.head_dim;
}

__device__ __forceinline__ float* partial_stats(const AttentionParams& p, int token, int head,
                                                int split) {
  const std::int64_t acc_floats =
      static_cast<std::int64_t>(p.num_tokens) * p.num_heads * p.num_splits * p.head_dim;
  return p.workspace + acc_floats +
         ((static_cast<std::int64_t>(token) * p.num_heads + head) * p.num_splits + split) * 2;
}

template <int kMaxHd>
__global__ void __launch_bounds__(kThreads)
    attention_decode_kernel(const __grid_constant__ AttentionParams p) {
  using S = DecodeShape<kMaxHd>;
  __shared__ float merge_acc[S::kStreams * kMaxGroup * kMaxHd];
  __shared__ float merge_m[S::kStreams * kMaxGroup];
  __shared__ float merge_l[S::kStreams * kMaxGroup];

  const int token = blockIdx.x;
  const int group = p.num_heads / p.num_kv_heads;
  const int head_groups = (group + kMaxGroup - 1) / kMaxGroup;
  const int kv_head = blockIdx.y / head_groups;
  const int first_head = kv_head * group + (blockIdx.y % head_groups) * kMaxGroup;
  const int heads = min(kMaxGroup, kv_head * group + group - first_head);
  const int split = blockIdx.z;
  const int hd = p.head_dim;

  const int slot = p.seq_slots[token];
  const int pos = p.positions[token];
  const bool active = slot >= 0 && slot < p.max_seqs && pos >= 0 && pos < p.table_stride;
  const int lo = p.window > 0 ? max(0, pos - p.window + 1) : 0;
  const int length = active ? pos - lo + 1 : 0;
  const int chunk = (length + p.num_splits - 1) / p.num_splits;
  const int begin = lo + split * chunk;
  const int end = min(lo + length, begin + chunk);
  const std::int32_t* table =
      p.cell_table + static_cast<std::int64_t>(active ? slot : 0) * p.table_stride;

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int sub = lane / S::kLanesPerKey;
  const int dim0 = (lane % S::kLanesPerKey) * 8;
  const bool dims_active = dim0 < hd;
  const int stream = warp * S::kKeysPerWarp + sub;

  float q[kMaxGroup][8];
#pragma unroll
  for (int h = 0; h < kMaxGroup; ++h) {
    if (h < heads && dims_active) {
      load8(p.q + static_cast<std::int64_t>(token) * p.q_stride +
                static_cast<std::int64_t>(first_head + h) * hd + dim0,
            q[h]);
#pragma unroll
      for (int i = 0; i < 8; ++i) q[h][i] *= p.scale;
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) q[h][i] = 0.0f;
    }
  }
  float m[kMaxGroup];
  float l[kMaxGroup];
  float acc[kMaxGroup][8];
#pragma unroll
  for (int h = 0; h < kMaxGroup; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[h][i] = 0.0f;
  }

  // The loop bound is warp-uniform so the shuffles below see every lane.
  constexpr int kUnroll = 2;
  for (int base = begin + warp * S::kKeysPerWarp; base < end; base += S::kStreams * kUnroll) {
    int cells[kUnroll];
    bool ok[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int kpos = base + u * S::kStreams + sub;
      ok[u] = kpos < end;
      cells[u] = ok[u] ? table[kpos] : -1;
      ok[u] = ok[u] && cells[u] >= 0 && cells[u] < p.max_cells;
    }
    float kv[kUnroll][8];
    float vv[kUnroll][8];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (ok[u] && dims_active) {
        const std::int64_t offset =
            (static_cast<std::int64_t>(cells[u]) * p.num_kv_heads + kv_head) * hd + dim0;
        load8(p.k_pool + offset, kv[u]);
        load8(p.v_pool + offset, vv[u]);
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) kv[u][i] = vv[u][i] = 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int h = 0; h < kMaxGroup; ++h) {
        if (h >= heads) continue;  // block-uniform
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) dot += q[h][i] * kv[u][i];
#pragma unroll
        for (int offset = S::kLanesPerKey / 2; offset > 0; offset >>= 1) {
          dot += __shfl_xor_sync(0xffffffffu, dot, offset);
        }
        if (!ok[u]) continue;
        float s = dot;
        if (p.softcap > 0.0f) s = p.softcap * tanhf(s / p.softcap);
        s *= kLog2e;
        const float m_new = fmaxf(m[h], s);
        const float alpha = exp2f(m[h] - m_new);
        const float prob = exp2f(s - m_new);
        l[h] = l[h] * alpha + prob;
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[h][i] = acc[h][i] * alpha + prob * vv[u][i];
        m[h] = m_new;
      }
    }
  }

#pragma unroll
  for (int h = 0; h < kMaxGroup; ++h) {
    if (h < heads) {
      if (dims_active) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          merge_acc[(stream * kMaxGroup + h) * kMaxHd + dim0 + i] = acc[h][i];
        }
      }
      if (dim0 == 0) {
        merge_m[stream * kMaxGroup + h] = m[h];
        merge_l[stream * kMaxGroup + h] = l[h];
      }
    }
  }
  __syncthreads();

  for (int idx = threadIdx.x; idx < heads * hd; idx += kThreads) {
    const int h = idx / hd;
    const int d = idx % hd;
    float m_max = -INFINITY;
    for (int s = 0; s < S::kStreams; ++s) m_max = fmaxf(m_max, merge_m[s * kMaxGroup + h]);
    float sum_l = 0.0f;
    float sum_acc = 0.0f;
    if (m_max != -INFINITY) {
      for (int s = 0; s < S::kStreams; ++s) {
        const float ms = merge_m[s * kMaxGroup + h];
        if (ms == -INFINITY) continue;
        const float w = exp2f(ms - m_max);
        sum_l += w * merge_l[s * kMaxGroup + h];
        sum_acc += w * merge_acc[(s * kMaxGroup + h) * kMaxHd + d];
      }
    }
    const int head = first_head + h;
    if (p.num_splits == 1) {
      p.out[static_cast<std::int64_t>(token) * p.out_stride + static_cast<std::int64_t>(head) * hd +
            d] = __float2bfloat16_rn(sum_l > 0.0f ? sum_acc / sum_l : 0.0f);
    } else {
      partial_acc(p, token, head, split)[d] = sum_acc;
      if (d == 0) {
        float* stats = partial_stats(p, token, head, split);
        stats[0] = m_max;
        stats[1] = sum_l;
      }
    }
  }
}

// Merges the splits of one (token, head) in split order.
__global__ void __launch_bounds__(kThreads)
    attention_decode_combine_kernel(const __grid_constant__ AttentionParams p) {
  const int token = blockIdx.x;
  const int head = blockIdx.y;
  float m_max = -INFINITY;
  for (int s = 0; s < p.num_splits; ++s) {
    const float* stats = partial_stats(p, token, head, s);
    if (stats[1] > 0.0f) m_max = fmaxf(m_max, stats[0]);
  }
  for (int d = threadIdx.x; d < p.head_dim; d += kThreads) {
    float num = 0.0f;
    float den = 0.0f;
    if (m_max != -INFINITY) {
      for (int s = 0; s < p.num_splits; ++s) {
        const float* stats = partial_stats(p, token, head, s);
        if (!(stats[1] > 0.0f)) continue;
        const float w = exp2f(stats[0] - m_max);
        den += w * stats[1];
        num += w * partial_acc(p, token, head, s)[d];
      }
    }
    p.out[static_cast<std::int64_t>(token) * p.out_stride +
          static_cast<std::int64_t>(head) * p.head_dim + d] =
        __float2bfloat16_rn(den > 0.0f ? num / den : 0.0f);
  }
}

}  // namespace

void launch_attention_decode(const AttentionParams& params, cudaStream_t stream) {
  if (params.rows != nullptr) {  // a row map is for prefill and v2 only
    cuda_failed(cudaErrorInvalidValue, "launch_attention_decode: the v1 kernel takes no row map");
  }
  const int group = params.num_heads / params.num_kv_heads;
  const int head_groups = (group + kMaxGroup - 1) / kMaxGroup;
  const dim3 grid(params.num_tokens, params.num_kv_heads * head_groups, params.num_splits);
  const bool dispatched = dispatch_head_dim(params.head_dim, [&]<int kMaxHd>() {
    launch(attention_decode_kernel<kMaxHd>, LaunchConfig{grid, dim3(kThreads), 0, stream}, params);
  });
  if (!dispatched) {
    cuda_failed(cudaErrorInvalidValue, "launch_attention_decode: unvalidated head_dim");
  }
  if (params.num_splits > 1) {
    launch(attention_decode_combine_kernel,
           LaunchConfig{dim3(params.num_tokens, params.num_heads), dim3(kThreads), 0, stream},
           params);
  }
}

}  // namespace cellm::cuda
