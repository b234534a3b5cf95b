// Decode attention v2's merges (attention_decode_v2.cu): where a split's
// partial lives in the float workspace, the output stores, and the merge of
// a token's splits through the distributed shared memory of their cluster.
//
// Thread-safety: device helpers; cluster_merge must be called by every thread
// of every block of the cluster (it holds two cluster barriers), merge_quad
// between those barriers.
#pragma once

#include <cooperative_groups.h>
#include <cstdint>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/attention.cuh"
#include "backend/cuda/kernels/attention_decode_v2_layout.cuh"
#include "backend/cuda/kernels/kernel_trace.cuh"

namespace cellm::cuda {
// Internal linkage, as when this lived in the .cu file: in a named namespace
// nvcc gave the kernel more registers (82 -> 86 at 64-wide heads).
namespace {

__device__ __forceinline__ std::int64_t partial_index(const AttentionParams& p, int token, int head,
                                                      int split) {
  return (static_cast<std::int64_t>(token) * p.num_heads + head) * p.num_splits + split;
}

__device__ __forceinline__ float* partial_acc(const AttentionParams& p, int token, int head,
                                              int split) {
  return p.workspace + partial_index(p, token, head, split) * p.head_dim;
}

__device__ __forceinline__ float* partial_stats(const AttentionParams& p, int token, int head,
                                                int split) {
  const std::int64_t acc_floats =
      static_cast<std::int64_t>(p.num_tokens) * p.num_heads * p.num_splits * p.head_dim;
  return p.workspace + acc_floats + partial_index(p, token, head, split) * 2;
}

// Release/acquire at device scope around the split counter: a lighter fence
// than __threadfence()'s sequentially consistent one, and all the
// message passing through the workspace needs.
__device__ __forceinline__ void fence_acq_rel_gpu() {
  asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
}

// Four consecutive outputs of a head row from their merged numerators and
// denominator, as bf16 (zeros where no key was attended: den 0), into `out`
// one scalar at a time (no alignment asked of it).
__device__ __forceinline__ void write_out4(bf16* out, float4 num, float den) {
  const bool any = den > 0.0f;
  out[0] = __float2bfloat16_rn(any ? num.x / den : 0.0f);
  out[1] = __float2bfloat16_rn(any ? num.y / den : 0.0f);
  out[2] = __float2bfloat16_rn(any ? num.z / den : 0.0f);
  out[3] = __float2bfloat16_rn(any ? num.w / den : 0.0f);
}

// Stores four consecutive outputs of a head row (no alignment asked of
// out_stride).
__device__ __forceinline__ void store_out4(const AttentionParams& p, int token, int head, int d,
                                           float4 num, float den) {
  write_out4(p.out + static_cast<std::int64_t>(token) * p.out_stride +
                 static_cast<std::int64_t>(head) * p.head_dim + d,
             num, den);
}

__device__ __forceinline__ float4 fma4(float w, float4 a, float4 acc) {
  return make_float4(fmaf(w, a.x, acc.x), fmaf(w, a.y, acc.y), fmaf(w, a.z, acc.z),
                     fmaf(w, a.w, acc.w));
}

// Quad `e` of a block's head rows: head `h` of the block, first column `d`.
struct HeadQuad {
  int h;
  int d;
};
template <int kMaxHd>
__device__ __forceinline__ HeadQuad head_quad(int e) {
  constexpr int kQuads = V2Layout<kMaxHd>::kQuads;
  return {e / kQuads, (e % kQuads) * 4};
}

// The merge of one quad of a head row over `used` partials, in split order:
// `load(j, m, l, a)` gives partial j's maximum, denominator and numerators.
// Every load is issued before any is used, so remote ones cost one round
// trip. num / den is the output (den 0: no keys). The pull and the push
// merge both go through here: the same sums in the same order, so the same
// bits.
struct MergedQuad {
  float4 num;
  float den;
};
template <class Load>
__device__ __forceinline__ MergedQuad merge_parts(int used, Load load) {
  float m[kAttentionMaxCluster];
  float l[kAttentionMaxCluster];
  float4 a[kAttentionMaxCluster];
#pragma unroll
  for (int j = 0; j < kAttentionMaxCluster; ++j) {
    if (j < used) load(j, m[j], l[j], a[j]);
  }
  float m_max = -INFINITY;
#pragma unroll
  for (int j = 0; j < kAttentionMaxCluster; ++j) {
    if (j < used && l[j] > 0.0f) m_max = fmaxf(m_max, m[j]);
  }
  MergedQuad out{make_float4(0.0f, 0.0f, 0.0f, 0.0f), 0.0f};
#pragma unroll
  for (int j = 0; j < kAttentionMaxCluster; ++j) {
    if (j < used) {
      const float weight = l[j] > 0.0f ? exp2f(m[j] - m_max) : 0.0f;
      out.den += weight * l[j];
      out.num = fma4(weight, a[j], out.num);
    }
  }
  return out;
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
// The merge of one quad (head `h`, columns d..d+3) from the partials in the
// cluster's shared memory.
template <int kMaxHd>
__device__ __forceinline__ MergedQuad merge_quad(cooperative_groups::cluster_group& cluster,
                                                 unsigned char* smem, int h, int d, int used) {
  using L = V2Layout<kMaxHd>;
  float* acc = reinterpret_cast<float*>(smem + L::kClusterAcc);
  float* ms = reinterpret_cast<float*>(smem + L::kClusterM);
  float* ls = reinterpret_cast<float*>(smem + L::kClusterL);
  return merge_parts(used, [&](int j, float& m, float& l, float4& a) {
    m = *cluster.map_shared_rank(ms + h, j);
    l = *cluster.map_shared_rank(ls + h, j);
    a = *cluster.map_shared_rank(reinterpret_cast<float4*>(acc + h * kMaxHd + d), j);
  });
}
#endif

// Block `rank` of the cluster writes its share of the token's outputs from
// the `used` partials in the cluster's shared memory (merge_quad), four
// columns per thread. The first barrier publishes every block's partial
// (release/acquire at cluster scope); the second keeps each block's shared
// memory alive until the others have read it.
template <int kMaxHd>
__device__ __forceinline__ void cluster_merge(unsigned long long* trace_table,
                                              const AttentionParams& p, int token, int first_head,
                                              int heads, int used, int rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  // Clusters need sm_90; the launch never asks for them below it.
  __trap();
#else
  using L = V2Layout<kMaxHd>;
  extern __shared__ __align__(128) unsigned char smem[];
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  for (int e = rank * kThreads + static_cast<int>(threadIdx.x); e < heads * L::kQuads;
       e += p.cluster * kThreads) {
    const auto [h, d] = head_quad<kMaxHd>(e);
    if (d >= p.head_dim) continue;
    const MergedQuad merged = merge_quad<kMaxHd>(cluster, smem, h, d, used);
    store_out4(p, token, first_head + h, d, merged.num, merged.den);
  }
  trace::mark(trace_table, trace::slot_of(p), kMergedStored);
  // The outputs are stored: the next kernel may launch while the cluster
  // waits for its last reader and the blocks leave (its wait still holds it
  // until this grid is complete). Earlier triggers cost more than they gain
  // (attention_decode_v2.cu, before the wait).
  griddep_launch_dependents();
  cluster.sync();
#endif
}

}  // namespace
}  // namespace cellm::cuda
