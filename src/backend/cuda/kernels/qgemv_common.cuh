// Internal to the quantized GEMV's two translation units (qgemv.cu: the
// generic block decoder, dequantization and the dispatch; qgemv_wide.cu:
// the wide-load kernels for one-row steps): the launch shape, the activation
// loads, the warps' row pairs and the split-K sums they share. Device code
// and host launch arithmetic only; no state.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/qgemv.cuh"
#include "backend/cuda/kernels/quant_blocks.h"
#include "backend/cuda/launch.h"

namespace cellm::cuda::qgemv_detail {

using namespace qblocks;  // NOLINT(google-build-using-namespace): the block decoders

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = 2;
constexpr int kGroup = 256;         // weights of a row a warp decodes per step (8 per lane)
constexpr int kGroupsInFlight = 4;  // groups loaded before the first is multiplied

__device__ __forceinline__ float bf16_lo(std::uint32_t two) {
  return __uint_as_float(two << 16);
}
__device__ __forceinline__ float bf16_hi(std::uint32_t two) {
  return __uint_as_float(two & 0xffff0000u);
}

// The activations at one run: kRunLen bf16 values as floats.
template <int kLen>
__device__ __forceinline__ void load_run(const bf16* src, float* x) {
  if constexpr (kLen == 2) {
    const std::uint32_t v = __ldg(reinterpret_cast<const unsigned int*>(src));
    x[0] = bf16_lo(v);
    x[1] = bf16_hi(v);
  } else if constexpr (kLen == 4) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(src));
    x[0] = bf16_lo(v.x);
    x[1] = bf16_hi(v.x);
    x[2] = bf16_lo(v.y);
    x[3] = bf16_hi(v.y);
  } else {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(src));
    const std::uint32_t parts[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      x[2 * t] = bf16_lo(parts[t]);
      x[2 * t + 1] = bf16_hi(parts[t]);
    }
  }
}

// Multiplies a lane's 8 decoded weights of row `r` by their scale, for
// decoders whose blocks carry none (FP8); a no-op for the others.
template <class D>
__device__ __forceinline__ void apply_row_scale(const RowScales& s, std::int64_t r, int col,
                                                float (&w)[8]) {
  if constexpr (scaled_v<D>) {
    const float scale = __ldg(s.scales + r * s.ld + col / s.cols);
#pragma unroll
    for (int t = 0; t < 8; ++t) w[t] *= scale;
  }
}

// Each warp's sums for its row pair: reduced across the warp, added over
// the split's warps in shared memory in a fixed order, biased and stored.
template <int kM, int split>
__device__ __forceinline__ void store_sums(const QGemvParams& p,
                                           const float (&acc)[kRowsPerWarp][kM], int warp, int lane,
                                           int slice, int row0, bool active, bool second) {
  __shared__ float partial[split > 1 ? kWarps : 1][kRowsPerWarp][kM];
  float total[kRowsPerWarp][kM];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      total[i][m] = warp_sum(acc[i][m]);
      if constexpr (split > 1) {
        if (lane == 0) partial[warp][i][m] = total[i][m];
      }
    }
  }
  if constexpr (split > 1) __syncthreads();
  if (!active || slice != 0 || lane != 0) return;
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    if (i == 1 && !second) break;
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      if (m >= p.m) break;
      float sum = total[i][m];
#pragma unroll
      for (int s = 1; s < split; ++s) sum += partial[warp + s][i][m];
      if (p.bias != nullptr) sum += __bfloat162float(p.bias[row0 + i]);
      const std::int64_t at = static_cast<std::int64_t>(m) * p.ldc + row0 + i;
      if (p.out_f32) {
        static_cast<float*>(p.out)[at] = sum;
      } else {
        static_cast<bf16*>(p.out)[at] = __float2bfloat16(sum);
      }
    }
  }
}

// Where a warp works: its lane, its warp in the block and slice of the
// split, its row pair (row0, and whether the pair's rows exist) and the two
// weight rows (a missing second row reads the first again; nothing is
// stored for it).
template <int split>
struct WarpRows {
  int lane, warp, slice, row0;
  bool active, second;
  const std::uint8_t* rows[kRowsPerWarp];

  __device__ __forceinline__ explicit WarpRows(const QGemvParams& p)
      : lane(static_cast<int>(threadIdx.x & 31)),
        warp(static_cast<int>(threadIdx.x >> 5)),
        slice(warp % split),
        row0((static_cast<int>(blockIdx.x) * (kWarps / split) + warp / split) * kRowsPerWarp),
        active(row0 < p.n),
        second(row0 + 1 < p.n) {
    const auto* w_bytes = static_cast<const std::uint8_t*>(p.w);
    rows[0] = w_bytes + (active ? row0 : 0) * p.ldw_bytes;
    rows[1] = w_bytes + (second ? row0 + 1 : (active ? row0 : 0)) * p.ldw_bytes;
  }
};

// How many warps share a row pair (split-K): doubled while the row pairs
// alone leave the SMs short of 32 warps each and every warp still gets two
// of the `units` a row is walked in (groups, or the Q4_K kernel's
// iterations) in each of its two loads in flight.
inline int split_for(int pairs, int units) {
  const int target = multiprocessor_count() * 32;
  int split = 1;
  while (split < kWarps && pairs * split < target && units >= 4 * split) split *= 2;
  return split;
}

// Blocks for `pairs` row pairs, kWarps / split of them a block.
inline dim3 grid_for(int pairs, int split) {
  const int per_block = kWarps / split;
  return dim3(static_cast<unsigned>((pairs + per_block - 1) / per_block));
}

// Calls f(std::integral_constant<int, split>{}) for a split split_for
// chose (1, 2 or 4): each kernel takes its split as a template argument.
template <class F>
void with_split(int split, F&& f) {
  if (split == 4) {
    f(std::integral_constant<int, 4>{});
  } else if (split == 2) {
    f(std::integral_constant<int, 2>{});
  } else {
    f(std::integral_constant<int, 1>{});
  }
}

// Launches the wide-load kernel of a one-row step whose type and layout have
// one (Q4_K, Q6_K_R8, FP8 rows on 16-byte boundaries); false leaves the step
// to the generic decoder. `config` holds the block, stream and PDL flag.
bool launch_wide_one_row(const QGemvParams& p, LaunchConfig config, int pairs);

}  // namespace cellm::cuda::qgemv_detail
