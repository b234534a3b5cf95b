// The attention phase of the decode stream (decode_stream.cuh): one token's
// attention over its history, as units of (kv head, key range), one unit per
// block. A unit rotates the q heads of its kv head, each warp takes every
// eighth key of the range and keeps an online softmax per head, the warps
// merge in shared memory, and the unit either writes the heads' output (one
// range per kv head) or its partial, which the last unit of the kv head to
// finish merges in a fixed order. The unit holding the newest key rotates it,
// uses it from shared memory and writes it and its value to the layer's pools.
//
// The first keys' cells and K/V rows belong to earlier steps, so a unit
// requests them (prefetch_keys) before it waits for this step's q/k/v.
//
// Thread-safety: device code, called by the 8 consumer warps of a block.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/bulk_copy.cuh"
#include "backend/cuda/kernels/decode_stream.cuh"
#include "backend/cuda/kernels/kv_write.cuh"

namespace cellm::cuda::decode_stream {

inline constexpr int kWarps = 8;        // consumer warps of a block
inline constexpr int kConsumers = kWarps * 32;
inline constexpr int kMaxGroup = 8;     // q heads per kv head
inline constexpr int kMaxSplits = 64;   // key ranges per kv head
inline constexpr int kMinKeys = 16;     // fewest keys a range is cut to
inline constexpr int kKeysPerWarp = 4;  // keys a warp has in flight

// Named barrier over the consumer warps (the producer warp never joins).
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumers) : "memory");
}

// How the keys 0..n_keys-1 of each kv head are cut into ranges; the same in
// every block of the launch.
struct KeySplit {
  int splits;
  int chunk;
};

__device__ __forceinline__ KeySplit key_split(int n_keys, int kv_heads, int grid) {
  int splits = (n_keys + kMinKeys - 1) / kMinKeys;
  splits = min(splits, max(1, grid / kv_heads));
  splits = min(splits, kMaxSplits);
  return KeySplit{splits, (n_keys + splits - 1) / splits};
}

// This block's unit: kv head g, keys [begin, end) of range `range`; blocks
// past kv_heads * splits have none.
struct Unit {
  bool active;
  int splits;
  int g;
  int range;
  int begin;
  int end;
};

__device__ __forceinline__ Unit unit_of_block(int pos, int kv_heads) {
  const int n_keys = pos + 1;
  const KeySplit split = key_split(n_keys, kv_heads, gridDim.x);
  Unit u;
  u.active = static_cast<int>(blockIdx.x) < kv_heads * split.splits;
  u.splits = split.splits;
  u.g = blockIdx.x / u.splits;
  u.range = blockIdx.x % u.splits;
  u.begin = u.range * split.chunk;
  u.end = min(n_keys, u.begin + split.chunk);
  return u;
}

// Floats of the phase's shared scratch for a group of `group` heads.
__host__ __device__ constexpr int attention_scratch_floats(int group, int head_dim) {
  return group * head_dim          // rotated q
         + 2 * head_dim            // newest key and value
         + 2 * kWarps * group      // per-warp max and sum
         + kWarps * group * head_dim  // per-warp output
         + 2 * group * kMaxSplits  // merge weights and sums
         + group + 4;              // merged sums, flags
}

// A warp's keys of one batch: E bf16 columns per lane of each key's K and
// V row, kept packed (two per register) until they are used.
template <int E>
struct KeyBatch {
  unsigned k[kKeysPerWarp][E / 2];
  unsigned v[kKeysPerWarp][E / 2];
};

template <int E>
__device__ __forceinline__ void load_row(const bf16* row, unsigned (&out)[E / 2]) {
  if constexpr (E == 2) {
    out[0] = __ldg(reinterpret_cast<const unsigned*>(row));
  } else {
    const uint2 raw = __ldg(reinterpret_cast<const uint2*>(row));
    out[0] = raw.x;
    out[1] = raw.y;
  }
}

template <int E>
__device__ __forceinline__ void unpack_row(const unsigned (&raw)[E / 2], float (&out)[E]) {
#pragma unroll
  for (int i = 0; i < E / 2; ++i) {
    out[2 * i] = __uint_as_float(raw[i] << 16);
    out[2 * i + 1] = __uint_as_float(raw[i] & 0xffff0000u);
  }
}

template <int E>
__device__ __forceinline__ void pack_row(const float* src, unsigned (&out)[E / 2]) {
#pragma unroll
  for (int i = 0; i < E / 2; ++i) {
    // src holds bf16 values widened exactly: their high halves are the bits.
    out[i] = (__float_as_uint(src[2 * i]) >> 16) | (__float_as_uint(src[2 * i + 1]) & 0xffff0000u);
  }
}

// This warp's keys of the batch starting at `first` (key j = first + warp +
// 8 t), from the pools; the newest key (position `pos`) is not in them yet
// and is filled in later from shared memory.
template <int E>
__device__ __forceinline__ void prefetch_keys(const DecodeStreamParams& p, int layer, int group,
                                              int first, int end, int pos, int slot,
                                              KeyBatch<E>& b) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int hd = p.head_dim;
  const std::int64_t pool = static_cast<std::int64_t>(p.max_cells) * p.num_kv_heads * hd;
  const bf16* k_pool = p.kv + 2 * layer * pool;
  const bf16* v_pool = k_pool + pool;
  const bool slot_ok = slot >= 0 && slot < p.max_seqs;
#pragma unroll
  for (int t = 0; t < kKeysPerWarp; ++t) {
    const int j = first + warp + kWarps * t;
    int cell = 0;  // the scratch cell: finite, and never the result (see the mask below)
    if (j < end && j < pos && slot_ok) {
      cell = p.cell_table[static_cast<std::int64_t>(slot) * p.table_stride + j];
      if (cell < 0 || cell >= p.max_cells) cell = 0;
    }
    const std::int64_t at = (static_cast<std::int64_t>(cell) * p.num_kv_heads + group) * hd +
                            lane * E;
    load_row<E>(k_pool + at, b.k[t]);
    load_row<E>(v_pool + at, b.v[t]);
  }
}

// The phase's work for an active unit; `batch` holds the unit's first keys
// (prefetch_keys with first = u.begin). E: columns per lane (head_dim / 32);
// G: heads per kv head the registers are sized for (at least the model's).
template <int E, int G>
__device__ __forceinline__ void attention_unit(const DecodeStreamParams& p, int layer, const Unit& u, int pos,
                               int slot, int cell, float* scratch, KeyBatch<E>& batch) {
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int hd = p.head_dim;
  const int half = hd / 2;
  const int kvh = p.num_kv_heads;
  const int group = p.num_heads / kvh;
  const int n_keys = pos + 1;
  const int g = u.g;
  const int begin = u.begin;
  const int end = u.end;
  const DecodeStreamLayer& lw = p.layers[layer];

  float* q_s = scratch;                   // [group][hd]
  float* k_new = q_s + group * hd;        // [hd]
  float* v_new = k_new + hd;              // [hd]
  float* warp_m = v_new + hd;             // [kWarps][group]
  float* warp_l = warp_m + kWarps * group;
  float* warp_o = warp_l + kWarps * group;  // [kWarps][group][hd]
  float* merge_w = warp_o + kWarps * group * hd;  // [group][kMaxSplits]
  float* merge_l = merge_w + group * kMaxSplits;  // [group][kMaxSplits]
  float* merged_l = merge_l + group * kMaxSplits;  // [group]
  int* flag = reinterpret_cast<int*>(merged_l + group);

  // Rotated q (rounded to bf16, as the stored q of the kernel chain), and the
  // newest key and value when this range ends at it (one rotation loop: the
  // full-precision sincosf is large code).
  const bool newest = end == n_keys && begin < end;
  const float fpos = static_cast<float>(pos);
  const int q_dim = p.num_heads * hd;
  const bool cell_ok = cell >= 0 && cell < p.max_cells;
  const std::int64_t pool = static_cast<std::int64_t>(p.max_cells) * kvh * hd;
  bf16* k_pool = p.kv + 2 * layer * pool + (static_cast<std::int64_t>(cell) * kvh + g) * hd;
  bf16* v_pool = k_pool + pool;
  const int rotated = group + (newest ? 1 : 0);  // q heads, then the newest key
  for (int idx = tid; idx < rotated * half; idx += kConsumers) {
    const int i = idx / half;
    const int d = idx % half;
    const bf16* x = p.qkv + (i < group ? (g * group + i) * hd : q_dim + g * hd);
    float r0;
    float r1;
    rope_rotate(__bfloat162float(__ldcg(x + d)), __bfloat162float(__ldcg(x + d + half)), fpos,
                lw.inv_freq[d], &r0, &r1);
    const bf16 y0 = __float2bfloat16_rn(r0);
    const bf16 y1 = __float2bfloat16_rn(r1);
    float* dst = i < group ? q_s + i * hd : k_new;
    dst[d] = __bfloat162float(y0);
    dst[d + half] = __bfloat162float(y1);
    if (i == group && cell_ok) {
      k_pool[d] = y0;
      k_pool[d + half] = y1;
    }
  }
  if (newest) {
    const bf16* v = p.qkv + q_dim + (kvh + g) * hd;
    for (int d = tid; d < hd; d += kConsumers) {
      const bf16 value = __ldcg(v + d);
      v_new[d] = __bfloat162float(value);
      if (cell_ok) v_pool[d] = value;
    }
    if (layer == 0 && g == 0 && tid == 0) {
      record_cell(p.cell_table, p.max_seqs, p.table_stride, p.max_cells, slot, pos, cell);
    }
  }
  consumers_sync();

  // This lane's q columns, in registers for up to four heads per kv head;
  // eight would crowd out the rest (they are read from shared memory).
  constexpr bool kQInRegisters = G <= 4;
  float q[kQInRegisters ? G : 1][E];
#pragma unroll
  for (int i = 0; i < (kQInRegisters ? G : 1); ++i) {
#pragma unroll
    for (int e = 0; e < E; ++e) q[i][e] = i < group ? q_s[i * hd + lane * E + e] : 0.0f;
  }
  float m[G];
  float l[G];
  float o[G][E];
#pragma unroll
  for (int i = 0; i < G; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) o[i][e] = 0.0f;
  }
#pragma unroll 1
  for (int first = begin; first < end; first += kWarps * kKeysPerWarp) {
    if (first != begin) prefetch_keys<E>(p, layer, g, first, end, pos, slot, batch);
    // Every (key, head) dot of a few keys first, reduced together: their
    // shuffles overlap instead of running one chain after another (eight
    // heads take the keys one at a time, to stay within the registers).
    constexpr int kT = G <= 4 ? kKeysPerWarp : 1;
#pragma unroll
    for (int t0 = 0; t0 < kKeysPerWarp; t0 += kT) {
      float vf[kT][E];
      float dot[kT][G];
#pragma unroll
      for (int t = 0; t < kT; ++t) {
        if (first + warp + kWarps * (t0 + t) == pos) {
          pack_row<E>(k_new + lane * E, batch.k[t0 + t]);
          pack_row<E>(v_new + lane * E, batch.v[t0 + t]);
        }
        float kf[E];
        unpack_row<E>(batch.k[t0 + t], kf);
        unpack_row<E>(batch.v[t0 + t], vf[t]);
#pragma unroll
        for (int i = 0; i < G; ++i) {
          dot[t][i] = 0.0f;
#pragma unroll
          for (int e = 0; e < E; ++e) {
            const float qe = kQInRegisters ? q[kQInRegisters ? i : 0][e]
                                           : (i < group ? q_s[i * hd + lane * E + e] : 0.0f);
            dot[t][i] = fmaf(qe, kf[e], dot[t][i]);
          }
        }
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) {
#pragma unroll
        for (int t = 0; t < kT; ++t) {
#pragma unroll
          for (int i = 0; i < G; ++i) dot[t][i] += __shfl_xor_sync(0xffffffffu, dot[t][i], offset);
        }
      }
#pragma unroll
      for (int t = 0; t < kT; ++t) {
        if (first + warp + kWarps * (t0 + t) >= end) break;
#pragma unroll
        for (int i = 0; i < G; ++i) {
          if (i >= group) break;
          const float sc = dot[t][i] * p.scale;
          const float m_new = fmaxf(m[i], sc);
          const float correction = expf(m[i] - m_new);
          const float weight = expf(sc - m_new);
          l[i] = fmaf(l[i], correction, weight);
#pragma unroll
          for (int e = 0; e < E; ++e) o[i][e] = fmaf(o[i][e], correction, weight * vf[t][e]);
          m[i] = m_new;
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < G; ++i) {
    if (i >= group) break;
    if (lane == 0) {
      warp_m[warp * group + i] = m[i];
      warp_l[warp * group + i] = l[i];
    }
#pragma unroll
    for (int e = 0; e < E; ++e) warp_o[(warp * group + i) * hd + lane * E + e] = o[i][e];
  }
  consumers_sync();

  // The unit's result per head and column, the warps in a fixed order (a
  // warp with no keys has m = -inf and weighs 0).
  const int width = hd + 2;  // partial record: m, l, then hd columns
  float* partial = p.partials + static_cast<std::int64_t>(g * u.splits + u.range) * group * width;
  for (int idx = tid; idx < group * hd; idx += kConsumers) {
    const int i = idx / hd;
    const int d = idx % hd;
    float mx = -INFINITY;
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, warp_m[w * group + i]);
    float sum = 0.0f;
    float acc = 0.0f;
    if (mx != -INFINITY) {
      for (int w = 0; w < kWarps; ++w) {
        const float f = expf(warp_m[w * group + i] - mx);
        sum = fmaf(warp_l[w * group + i], f, sum);
        acc = fmaf(warp_o[(w * group + i) * hd + d], f, acc);
      }
    }
    if (u.splits == 1) {
      p.attn[(g * group + i) * hd + d] = __float2bfloat16_rn(acc / sum);
    } else {
      if (d == 0) {
        partial[i * width] = mx;
        partial[i * width + 1] = sum;
      }
      partial[i * width + 2 + d] = acc;
    }
  }
  if (u.splits == 1) return;

  // The last range of this kv head to finish merges all of them.
  __threadfence();
  consumers_sync();
  if (tid == 0) {
    unsigned* counter = p.sync + 1 + g;
    const unsigned done = atomic_add_acq_rel(counter, 1u);
    const bool last = done == static_cast<unsigned>(u.splits - 1);
    if (last) {
      __threadfence();
      *counter = 0;  // for the next layer; every range of this one has counted
    }
    *flag = last ? 1 : 0;
  }
  consumers_sync();
  if (*flag == 0) return;
  const float* head = p.partials + static_cast<std::int64_t>(g * u.splits) * group * width;
  for (int idx = tid; idx < group * u.splits; idx += kConsumers) {
    const int i = idx / u.splits;
    const int r = idx % u.splits;
    merge_w[i * kMaxSplits + r] = __ldcg(head + (r * group + i) * width);
    merge_l[i * kMaxSplits + r] = __ldcg(head + (r * group + i) * width + 1);
  }
  consumers_sync();
  if (tid < group) {
    float mx = -INFINITY;
    for (int r = 0; r < u.splits; ++r) mx = fmaxf(mx, merge_w[tid * kMaxSplits + r]);
    float sum = 0.0f;
    for (int r = 0; r < u.splits; ++r) {
      const float mr = merge_w[tid * kMaxSplits + r];
      const float f = mr == -INFINITY ? 0.0f : expf(mr - mx);
      merge_w[tid * kMaxSplits + r] = f;
      sum = fmaf(merge_l[tid * kMaxSplits + r], f, sum);
    }
    merged_l[tid] = sum;
  }
  consumers_sync();
  for (int idx = tid; idx < group * hd; idx += kConsumers) {
    const int i = idx / hd;
    const int d = idx % hd;
    float acc = 0.0f;
    for (int r = 0; r < u.splits; ++r) {
      acc = fmaf(__ldcg(head + (r * group + i) * width + 2 + d), merge_w[i * kMaxSplits + r], acc);
    }
    p.attn[(g * group + i) * hd + d] = __float2bfloat16_rn(acc / merged_l[i]);
  }
}

}  // namespace cellm::cuda::decode_stream
