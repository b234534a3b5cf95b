#include <algorithm>

#include <cuda_fp8.h>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/qgemv.cuh"
#include "backend/cuda/kernels/quant_blocks.h"
#include "backend/cuda/kernels/quant_blocks_q6r8.h"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

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

// A block's four warps take kWarps / split row pairs; the `split` warps of
// a pair walk every split-th group of its rows (split-K), so that narrow
// projections still put enough loads in flight on every SM, and add their
// sums in shared memory in a fixed order (the same bits every run).
template <class D, int kM, int split>
__global__ void __launch_bounds__(kThreads) qgemv_kernel(const __grid_constant__ QGemvParams p) {
  const WarpRows<split> wr(p);
  const int lane = wr.lane, warp = wr.warp, slice = wr.slice, row0 = wr.row0;
  const bool active = wr.active, second = wr.second;
  const std::uint8_t* const* rows = wr.rows;
  const int blocks = p.k / D::kBlockElems;
  const int groups = active ? (p.k + kGroup - 1) / kGroup : 0;

  float acc[kRowsPerWarp][kM] = {};
  bool entered = false;
  for (int j0 = 0; slice + split * j0 < groups; j0 += kGroupsInFlight) {
    typename D::Raw raw[kGroupsInFlight][kRowsPerWarp];
    bool live[kGroupsInFlight];
#pragma unroll
    for (int u = 0; u < kGroupsInFlight; ++u) {
      const int g = slice + split * (j0 + u);
      live[u] = g < groups && D::valid(g, lane, blocks);
      if (live[u]) {
#pragma unroll
        for (int i = 0; i < kRowsPerWarp; ++i) D::load(raw[u][i], rows[i], g, lane);
      }
    }
    // The weights are constant: only the activations wait for the kernel before.
    if (!entered && p.pdl) griddep_enter();
    entered = true;
#pragma unroll
    for (int u = 0; u < kGroupsInFlight; ++u) {
      if (!live[u]) continue;
      const int g = slice + split * (j0 + u);
      float w[kRowsPerWarp][8];
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        D::decode(raw[u][i], lane, w[i]);
        apply_row_scale<D>(p.scales, second || i == 0 ? row0 + i : row0, D::pos(g, lane, 0), w[i]);
      }
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        if (m >= p.m) break;
        const bf16* a_row = p.a + static_cast<std::int64_t>(m) * p.lda;
#pragma unroll
        for (int run = 0; run < D::kRuns; ++run) {
          float x[D::kRunLen];
          load_run<D::kRunLen>(a_row + D::pos(g, lane, run), x);
#pragma unroll
          for (int t = 0; t < D::kRunLen; ++t) {
#pragma unroll
            for (int i = 0; i < kRowsPerWarp; ++i) {
              acc[i][m] = fmaf(w[i][run * D::kRunLen + t], x[t], acc[i][m]);
            }
          }
        }
      }
    }
  }
  if (!entered && p.pdl) griddep_enter();

  store_sums<kM, split>(p, acc, warp, lane, slice, row0, active, second);
}

// Q4_K rows on 16-byte boundaries (ldw_bytes a multiple of 16, as the
// uploads lay them out): a lane takes one 16-byte chunk of a super-block's
// quants, 32 weights (16 of sub-block 2c in the low nibbles, 16 of 2c + 1 in
// the high ones), and the block's 16-byte head, so a warp reads four
// super-blocks with two 16-byte loads a lane and decodes each scale pair once
// for 16 weights. The sums split as d * scale * sum(q x) - dmin * min *
// sum(x): a weight costs a byte permute, a subtraction and one multiply-add
// a row, where the generic decoder spent about ten instructions (bound by
// the ALU, not the memory: bench/results/h100-2026-12-07-s30-qgemv-micro).
constexpr int kQ4kSupers = 4;        // super-blocks a warp reads per iteration
constexpr int kQ4kInFlight = 2;      // iterations loaded before the first is used
constexpr int kQ4kBlockBytes = 144;  // d, dmin, 12 scale bytes, 128 quant bytes

// Byte t of v (a nibble) as a float: the bits of 2^23 + byte, less 2^23.
__device__ __forceinline__ float nibble_float(std::uint32_t v, int t) {
  return __uint_as_float(__byte_perm(v, 0x4B000000u, 0x7540u + static_cast<unsigned>(t))) -
         8388608.0f;
}

template <int kM, int split>
__global__ void __launch_bounds__(kThreads)
    qgemv_q4k_kernel(const __grid_constant__ QGemvParams p) {
  const WarpRows<split> wr(p);
  const int lane = wr.lane, warp = wr.warp, slice = wr.slice, row0 = wr.row0;
  const bool active = wr.active, second = wr.second;
  const std::uint8_t* const* rows = wr.rows;
  const int supers = active ? p.k / 256 : 0;
  const int iters = (supers + kQ4kSupers - 1) / kQ4kSupers;
  const int chunk = lane % 8;  // 16-byte chunk of the quants: sub-blocks 2c, 2c + 1
  const int c = chunk / 2;
  const int half = chunk % 2;  // weights 16 half.. of each of the two sub-blocks

  float acc[kRowsPerWarp][kM] = {};
  bool entered = false;
  for (int i0 = slice; i0 < iters; i0 += split * kQ4kInFlight) {
    uint4 head[kQ4kInFlight][kRowsPerWarp], qs[kQ4kInFlight][kRowsPerWarp];
    bool live[kQ4kInFlight];
#pragma unroll
    for (int u = 0; u < kQ4kInFlight; ++u) {
      const int it = i0 + u * split;
      const int sb = it * kQ4kSupers + lane / 8;
      live[u] = it < iters && sb < supers;
      if (live[u]) {
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
          const std::uint8_t* b = rows[r] + static_cast<std::int64_t>(sb) * kQ4kBlockBytes;
          head[u][r] = __ldg(reinterpret_cast<const uint4*>(b));
          qs[u][r] = __ldg(reinterpret_cast<const uint4*>(b + 16 + 16 * chunk));
        }
      }
    }
    if (!entered && p.pdl) griddep_enter();
    entered = true;
#pragma unroll
    for (int u = 0; u < kQ4kInFlight; ++u) {
      if (!live[u]) continue;
      const int sb = (i0 + u * split) * kQ4kSupers + lane / 8;
      const int pos = sb * 256 + 64 * c + 16 * half;  // the low run; the high one is at +32
      float ds[kRowsPerWarp][2], dm[kRowsPerWarp][2];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const KHead kh{head[u][r].x, head[u][r].y, head[u][r].z, head[u][r].w};
        scale_min(kh, 2 * c, ds[r][0], dm[r][0]);
        scale_min(kh, 2 * c + 1, ds[r][1], dm[r][1]);
      }
      float sq[kRowsPerWarp][kM][2] = {};  // sum(q x), low and high run
      float sx[kM][2] = {};                // sum(x)
#pragma unroll
      for (int w4 = 0; w4 < 4; ++w4) {
        float lo[kRowsPerWarp][4], hi[kRowsPerWarp][4];
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
          const std::uint32_t word = w4 == 0   ? qs[u][r].x
                                     : w4 == 1 ? qs[u][r].y
                                     : w4 == 2 ? qs[u][r].z
                                               : qs[u][r].w;
          const std::uint32_t low = word & 0x0f0f0f0fu, high = (word >> 4) & 0x0f0f0f0fu;
#pragma unroll
          for (int t = 0; t < 4; ++t) {
            lo[r][t] = nibble_float(low, t);
            hi[r][t] = nibble_float(high, t);
          }
        }
#pragma unroll
        for (int m = 0; m < kM; ++m) {
          if (m >= p.m) break;
          const bf16* a_row = p.a + static_cast<std::int64_t>(m) * p.lda + pos + 4 * w4;
          float xl[4], xh[4];
          load_run<4>(a_row, xl);
          load_run<4>(a_row + 32, xh);
#pragma unroll
          for (int t = 0; t < 4; ++t) {
            sx[m][0] += xl[t];
            sx[m][1] += xh[t];
#pragma unroll
            for (int r = 0; r < kRowsPerWarp; ++r) {
              sq[r][m][0] = fmaf(lo[r][t], xl[t], sq[r][m][0]);
              sq[r][m][1] = fmaf(hi[r][t], xh[t], sq[r][m][1]);
            }
          }
        }
      }
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
        for (int m = 0; m < kM; ++m) {
          acc[r][m] += ds[r][0] * sq[r][m][0] - dm[r][0] * sx[m][0] + ds[r][1] * sq[r][m][1] -
                       dm[r][1] * sx[m][1];
        }
      }
    }
  }
  if (!entered && p.pdl) griddep_enter();
  store_sums<kM, split>(p, acc, warp, lane, slice, row0, active, second);
}

// ---- Q6_K_R8 wide-load kernel (one-row steps) -------------------------------
// Q6_K rows the upload repacked in groups of eight blocks
// (quant_blocks_q6r8.h), on 16-byte boundaries: a warp walks a row a group
// (2048 weights, 1680 bytes) at a time, a lane one quarter of one block
// (Q6R8Wide): three 16-byte loads of quants, one 8-byte load of the half's
// scales and d, for 64 weights in four runs of 16 that each share a scale.
// A weight costs a byte permute and a subtraction (the 2^23 trick gives
// q - 32 at once) and one multiply-add a row; the bit surgery is done on
// 4-byte words, four weights at a time; the run sums take d * scale once,
// where the generic decoder (Q6_K: 2-byte loads, a scale multiply a
// weight) spends about ten instructions a weight, as Q4_K's did before
// qgemv_q4k_kernel. Sums are reduced in a fixed order (same bits every run).
// NOT YET RUN ON A GPU: compiled with nvcc (sm_90: 117 registers at split 1,
// 155 at 2 and 4, no spills); its lane map, loads and bit unpacking are
// checked on the host against the reference dequantizer
// (quant_blocks_q6r8_test), but its results on a device (qgemv_test's
// Q6_K_R8 cases) and its speed (backend_cuda_bench, type 1014 against 14)
// are unmeasured.
constexpr int kQ6r8InFlight = 2;  // groups loaded before the first is used

// Byte t of v (a six-bit quant q + 32) as the float q: 2^23 + byte, less 2^23 + 32.
__device__ __forceinline__ float q6_float(std::uint32_t v, int t) {
  return __uint_as_float(__byte_perm(v, 0x4B000000u, 0x7540u + static_cast<unsigned>(t))) -
         8388640.0f;
}

__device__ __forceinline__ std::uint32_t uint4_word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

template <int kM, int split>
__global__ void __launch_bounds__(kThreads)
    qgemv_q6k_r8_kernel(const __grid_constant__ QGemvParams p) {
  const WarpRows<split> wr(p);
  const int lane = wr.lane, warp = wr.warp, slice = wr.slice, row0 = wr.row0;
  const bool active = wr.active, second = wr.second;
  const std::uint8_t* const* rows = wr.rows;
  const int groups = active ? p.k / Q6R8::kElems : 0;
  const int ql_at = Q6R8Wide::ql_at(lane), qh_at = Q6R8Wide::qh_at(lane);
  const int sc_at = Q6R8Wide::scales_at(lane), d_at = Q6R8Wide::d_at(lane);

  float acc[kRowsPerWarp][kM] = {};
  bool entered = false;
  for (int g0 = slice; g0 < groups; g0 += split * kQ6r8InFlight) {
    uint4 qa[kQ6r8InFlight][kRowsPerWarp], qb[kQ6r8InFlight][kRowsPerWarp],
        qh[kQ6r8InFlight][kRowsPerWarp];
    uint2 sc[kQ6r8InFlight][kRowsPerWarp];
    std::uint32_t d[kQ6r8InFlight][kRowsPerWarp];
    bool live[kQ6r8InFlight];
#pragma unroll
    for (int u = 0; u < kQ6r8InFlight; ++u) {
      const int g = g0 + u * split;
      live[u] = g < groups;
      if (live[u]) {
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
          const std::uint8_t* b = rows[r] + static_cast<std::int64_t>(g) * Q6R8::kBytes;
          qa[u][r] = __ldg(reinterpret_cast<const uint4*>(b + ql_at));
          qb[u][r] = __ldg(reinterpret_cast<const uint4*>(b + ql_at + 32));
          qh[u][r] = __ldg(reinterpret_cast<const uint4*>(b + qh_at));
          sc[u][r] = __ldg(reinterpret_cast<const uint2*>(b + sc_at));
          d[u][r] = ld16(b + d_at);
        }
      }
    }
    // The weights are constant: only the activations wait for the kernel before.
    if (!entered && p.pdl) griddep_enter();
    entered = true;
#pragma unroll
    for (int u = 0; u < kQ6r8InFlight; ++u) {
      if (!live[u]) continue;
      const int g = g0 + u * split;
      float ds[kRowsPerWarp][4];  // d * scale of each run
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const float dr = half_bits(d[u][r]);
#pragma unroll
        for (int run = 0; run < 4; ++run) {
          const int i = Q6R8Wide::scale_index(lane, run);
          const std::uint32_t word = i < 4 ? sc[u][r].x : sc[u][r].y;
          ds[r][run] = dr * small_if(static_cast<std::int8_t>(byte_of(word, i % 4)));
        }
      }
      float sq[kRowsPerWarp][kM][4] = {};  // sum((q - 32) x) of each run
#pragma unroll
      for (int w8 = 0; w8 < 2; ++w8) {  // positions 8 w8 .. 8 w8 + 7 of each run
#pragma unroll
        for (int run = 0; run < 4; ++run) {
          float q[kRowsPerWarp][8];
#pragma unroll
          for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
            for (int hw = 0; hw < 2; ++hw) {  // the two 4-byte words of the 8 positions
              const int wi = 2 * w8 + hw;
              const std::uint32_t v =
                  Q6R8Wide::quants(uint4_word(qa[u][r], wi), uint4_word(qb[u][r], wi),
                                   uint4_word(qh[u][r], wi), run);
#pragma unroll
              for (int t = 0; t < 4; ++t) q[r][4 * hw + t] = q6_float(v, t);
            }
          }
#pragma unroll
          for (int m = 0; m < kM; ++m) {
            if (m >= p.m) break;
            float x[8];
            load_run<8>(
                p.a + static_cast<std::int64_t>(m) * p.lda + Q6R8Wide::pos(g, lane, run) + 8 * w8,
                x);
#pragma unroll
            for (int t = 0; t < 8; ++t) {
#pragma unroll
              for (int r = 0; r < kRowsPerWarp; ++r) {
                sq[r][m][run] = fmaf(q[r][t], x[t], sq[r][m][run]);
              }
            }
          }
        }
      }
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
        for (int m = 0; m < kM; ++m) {
          acc[r][m] += ds[r][0] * sq[r][m][0] + ds[r][1] * sq[r][m][1] + ds[r][2] * sq[r][m][2] +
                       ds[r][3] * sq[r][m][3];
        }
      }
    }
  }
  if (!entered && p.pdl) griddep_enter();
  store_sums<kM, split>(p, acc, warp, lane, slice, row0, active, second);
}
// ---- end of the Q6_K_R8 wide-load kernel ------------------------------------

// FP8 rows on 16-byte boundaries whose scale blocks span whole 16-column
// chunks: a lane takes 16 consecutive codes with one 16-byte load (a warp
// reads 512 weights of a row per iteration), converts them two at a time
// with the hardware's E4M3 conversion (exact: every E4M3 value is an f16),
// and multiplies the chunk's sum by its scale once.
constexpr int kF8Chunk = 16;    // codes a lane loads
constexpr int kF8InFlight = 2;  // iterations loaded before the first is used

template <int kM, int split>
__global__ void __launch_bounds__(kThreads) qgemv_f8_kernel(const __grid_constant__ QGemvParams p) {
  const WarpRows<split> wr(p);
  const int lane = wr.lane, warp = wr.warp, slice = wr.slice, row0 = wr.row0;
  const bool active = wr.active, second = wr.second;
  const int chunks = active ? p.k / kF8Chunk : 0;
  const int iters = (chunks + 31) / 32;

  float acc[kRowsPerWarp][kM] = {};
  bool entered = false;
  for (int i0 = slice; i0 < iters; i0 += split * kF8InFlight) {
    uint4 codes[kF8InFlight][kRowsPerWarp];
    bool live[kF8InFlight];
#pragma unroll
    for (int u = 0; u < kF8InFlight; ++u) {
      const int it = i0 + u * split;
      const int chunk = it * 32 + lane;
      live[u] = it < iters && chunk < chunks;
      if (live[u]) {
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
          codes[u][r] = __ldg(reinterpret_cast<const uint4*>(wr.rows[r] + kF8Chunk * chunk));
        }
      }
    }
    if (!entered && p.pdl) griddep_enter();
    entered = true;
#pragma unroll
    for (int u = 0; u < kF8InFlight; ++u) {
      if (!live[u]) continue;
      const int col = kF8Chunk * ((i0 + u * split) * 32 + lane);
      float w[kRowsPerWarp][kF8Chunk];
      float scale[kRowsPerWarp];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const int row = r == 0 || second ? row0 + r : row0;
        scale[r] = __ldg(p.scales.scales + static_cast<std::int64_t>(row) * p.scales.ld +
                         col / p.scales.cols);
        const std::uint32_t words[4] = {codes[u][r].x, codes[u][r].y, codes[u][r].z, codes[u][r].w};
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          const auto pair = static_cast<__nv_fp8x2_storage_t>(words[q / 2] >> (16 * (q % 2)));
          const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3)));
          w[r][2 * q] = f.x;
          w[r][2 * q + 1] = f.y;
        }
      }
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        if (m >= p.m) break;
        const bf16* a_row = p.a + static_cast<std::int64_t>(m) * p.lda + col;
        float x[kF8Chunk];
        load_run<8>(a_row, x);
        load_run<8>(a_row + 8, x + 8);
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
          float sum = 0.0f;
#pragma unroll
          for (int t = 0; t < kF8Chunk; ++t) sum = fmaf(w[r][t], x[t], sum);
          acc[r][m] = fmaf(scale[r], sum, acc[r][m]);
        }
      }
    }
  }
  if (!entered && p.pdl) griddep_enter();
  store_sums<kM, split>(p, acc, warp, lane, slice, row0, active, second);
}

// One warp per (row, 256-weight group): each lane decodes its 8 weights and
// stores them as bf16 runs at their columns.
template <class D>
__global__ void __launch_bounds__(kThreads)
    dequantize_kernel(const __grid_constant__ DequantParams p) {
  const int lane = threadIdx.x & 31;
  const int groups = (p.cols + kGroup - 1) / kGroup;
  const int blocks = p.cols / D::kBlockElems;
  const std::int64_t units = p.rows * groups;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kWarps;
  for (std::int64_t u = static_cast<std::int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
       u < units; u += stride) {
    const std::int64_t r = u / groups;
    const int g = static_cast<int>(u % groups);
    if (!D::valid(g, lane, blocks)) continue;
    typename D::Raw raw;
    D::load(raw, static_cast<const std::uint8_t*>(p.w) + r * p.ldw_bytes, g, lane);
    float w[8];
    D::decode(raw, lane, w);
    apply_row_scale<D>(p.scales, r, D::pos(g, lane, 0), w);
    bf16* row = p.out + r * p.ldo;
#pragma unroll
    for (int run = 0; run < D::kRuns; ++run) {
#pragma unroll
      for (int t = 0; t < D::kRunLen; ++t) {
        row[D::pos(g, lane, run) + t] = __float2bfloat16(w[run * D::kRunLen + t]);
      }
    }
  }
}

template <class D, int kSplit>
void launch_split(const QGemvParams& p, const LaunchConfig& config) {
  if (p.m <= 1) {
    launch(qgemv_kernel<D, 1, kSplit>, config, p);
  } else if (p.m <= 2) {
    launch(qgemv_kernel<D, 2, kSplit>, config, p);
  } else if (p.m <= 4) {
    launch(qgemv_kernel<D, 4, kSplit>, config, p);
  } else {
    launch(qgemv_kernel<D, 8, kSplit>, config, p);
  }
}

// One row only (launch_qgemv says why); the kernel itself takes up to 8.
template <int kSplit>
void launch_q4k_split(const QGemvParams& p, const LaunchConfig& config) {
  launch(qgemv_q4k_kernel<1, kSplit>, config, p);
}

// The Q6_K_R8 wide-load kernel at one row (launch_q6k_r8_wide says when).
template <int kSplit>
void launch_q6k_r8_split(const QGemvParams& p, const LaunchConfig& config) {
  launch(qgemv_q6k_r8_kernel<1, kSplit>, config, p);
}

// One row only, as the Q4_K one, until more are measured.
template <int kSplit>
void launch_f8_split(const QGemvParams& p, const LaunchConfig& config) {
  launch(qgemv_f8_kernel<1, kSplit>, config, p);
}

// The split is a template argument: wide projections (split 1) run the
// plain loop, with nothing of the split's bookkeeping.
template <class D>
void launch_for(const QGemvParams& p, const LaunchConfig& config, int split) {
  if (split == 4) {
    launch_split<D, 4>(p, config);
  } else if (split == 2) {
    launch_split<D, 2>(p, config);
  } else {
    launch_split<D, 1>(p, config);
  }
}

template <class D>
void launch_dequantize_as(const DequantParams& p, cudaStream_t stream) {
  const std::int64_t units = p.rows * ((p.cols + kGroup - 1) / kGroup);
  const std::int64_t wanted = (units + kWarps - 1) / kWarps;
  LaunchConfig config;
  config.grid = dim3(static_cast<unsigned>(
      std::min<std::int64_t>(wanted, std::int64_t{multiprocessor_count()} * 16)));
  config.block = dim3(kThreads);
  config.stream = stream;
  launch(dequantize_kernel<D>, config, p);
}

}  // namespace

void launch_dequantize(const DequantParams& p, cudaStream_t stream) {
  switch (p.type) {
    case QuantType::kQ4_0: launch_dequantize_as<Q4_0>(p, stream); break;
    case QuantType::kQ4_1: launch_dequantize_as<Q4_1>(p, stream); break;
    case QuantType::kQ5_0: launch_dequantize_as<Q5_0>(p, stream); break;
    case QuantType::kQ5_K: launch_dequantize_as<Q5_K>(p, stream); break;
    case QuantType::kQ5_1: launch_dequantize_as<Q5_1>(p, stream); break;
    case QuantType::kQ2_K: launch_dequantize_as<Q2_K>(p, stream); break;
    case QuantType::kQ3_K: launch_dequantize_as<Q3_K>(p, stream); break;
    case QuantType::kIQ4_XS: launch_dequantize_as<IQ4_XS>(p, stream); break;
    case QuantType::kF8_E4M3: launch_dequantize_as<F8_E4M3>(p, stream); break;
    case QuantType::kQ8_0: launch_dequantize_as<Q8_0>(p, stream); break;
    case QuantType::kQ4_K: launch_dequantize_as<Q4_K>(p, stream); break;
    case QuantType::kQ6_K: launch_dequantize_as<Q6_K>(p, stream); break;
    case QuantType::kQ6_K_R8: launch_dequantize_as<Q6_K_R8>(p, stream); break;
  }
}

int quant_block_elems(QuantType type) {
  switch (type) {
    case QuantType::kQ4_0: return Q4_0::kBlockElems;
    case QuantType::kQ4_1: return Q4_1::kBlockElems;
    case QuantType::kQ5_0: return Q5_0::kBlockElems;
    case QuantType::kQ5_K: return Q5_K::kBlockElems;
    case QuantType::kQ5_1: return Q5_1::kBlockElems;
    case QuantType::kQ2_K: return Q2_K::kBlockElems;
    case QuantType::kQ3_K: return Q3_K::kBlockElems;
    case QuantType::kIQ4_XS: return IQ4_XS::kBlockElems;
    case QuantType::kF8_E4M3: return F8_E4M3::kBlockElems;
    case QuantType::kQ8_0: return Q8_0::kBlockElems;
    case QuantType::kQ4_K: return Q4_K::kBlockElems;
    case QuantType::kQ6_K: return Q6_K::kBlockElems;
    case QuantType::kQ6_K_R8: return Q6_K_R8::kBlockElems;
  }
  return 0;
}

int quant_block_bytes(QuantType type) {
  switch (type) {
    case QuantType::kQ4_0: return Q4_0::kBlockBytes;
    case QuantType::kQ4_1: return Q4_1::kBlockBytes;
    case QuantType::kQ5_0: return Q5_0::kBlockBytes;
    case QuantType::kQ5_K: return Q5_K::kBlockBytes;
    case QuantType::kQ5_1: return Q5_1::kBlockBytes;
    case QuantType::kQ2_K: return Q2_K::kBlockBytes;
    case QuantType::kQ3_K: return Q3_K::kBlockBytes;
    case QuantType::kIQ4_XS: return IQ4_XS::kBlockBytes;
    case QuantType::kF8_E4M3: return F8_E4M3::kBlockBytes;
    case QuantType::kQ8_0: return Q8_0::kBlockBytes;
    case QuantType::kQ4_K: return Q4_K::kBlockBytes;
    case QuantType::kQ6_K: return Q6_K::kBlockBytes;
    case QuantType::kQ6_K_R8: return Q6_K_R8::kBlockBytes;
  }
  return 0;
}

namespace {

// How many warps share a row pair (split-K): doubled while the row pairs
// alone leave the SMs short of 32 warps each and every warp still gets two
// of the `units` a row is walked in (groups, or the Q4_K kernel's
// iterations) in each of its two loads in flight.
int split_for(int pairs, int units) {
  const int target = multiprocessor_count() * 32;
  int split = 1;
  while (split < kWarps && pairs * split < target && units >= 4 * split) split *= 2;
  return split;
}

// Blocks for `pairs` row pairs, kWarps / split of them a block.
dim3 grid_for(int pairs, int split) {
  const int per_block = kWarps / split;
  return dim3(static_cast<unsigned>((pairs + per_block - 1) / per_block));
}

// One-row steps of Q6_K_R8 rows on 16-byte boundaries (as the upload lays
// them out) take the wide-load kernel, split by its 2048-weight groups;
// false leaves the step to the generic kernel. Two to eight rows keep the
// generic decoder until the wide one is measured there (the kernel itself
// takes up to 8, as the Q4_K one does).
bool launch_q6k_r8_wide(const QGemvParams& p, LaunchConfig config, int pairs) {
  if (p.m != 1 || p.type != QuantType::kQ6_K_R8 || p.ldw_bytes % 16 != 0 ||
      reinterpret_cast<std::uintptr_t>(p.w) % 16 != 0) {
    return false;
  }
  const int split = split_for(pairs, p.k / Q6R8::kElems);
  config.grid = grid_for(pairs, split);
  if (split == 4) {
    launch_q6k_r8_split<4>(p, config);
  } else if (split == 2) {
    launch_q6k_r8_split<2>(p, config);
  } else {
    launch_q6k_r8_split<1>(p, config);
  }
  return true;
}

}  // namespace

void launch_qgemv(const QGemvParams& p, cudaStream_t stream) {
  LaunchConfig config;
  const int pairs = (p.n + kRowsPerWarp - 1) / kRowsPerWarp;
  const int split = split_for(pairs, (p.k + kGroup - 1) / kGroup);
  config.grid = grid_for(pairs, split);
  config.block = dim3(kThreads);
  config.stream = stream;
  config.pdl = p.pdl;
  // One-row steps of Q4_K rows on 16-byte boundaries take the wide-load
  // kernel: 2x the generic decoder's speed at one row on an H100, 1.7x
  // slower at eight (bench/results/h100-2026-12-07-s30-qgemv-micro.jsonl;
  // two to seven rows not measured yet, so they keep the generic kernel).
  if (p.m == 1 && p.type == QuantType::kQ4_K && p.ldw_bytes % 16 == 0 &&
      reinterpret_cast<std::uintptr_t>(p.w) % 16 == 0) {
    // Four super-blocks a warp iteration.
    const int q4k_split = split_for(pairs, (p.k / 256 + kQ4kSupers - 1) / kQ4kSupers);
    config.grid = grid_for(pairs, q4k_split);
    if (q4k_split == 4) {
      launch_q4k_split<4>(p, config);
    } else if (q4k_split == 2) {
      launch_q4k_split<2>(p, config);
    } else {
      launch_q4k_split<1>(p, config);
    }
    return;
  }
  if (launch_q6k_r8_wide(p, config, pairs)) return;
  if (p.m == 1 && p.type == QuantType::kF8_E4M3 && p.ldw_bytes % 16 == 0 &&
      reinterpret_cast<std::uintptr_t>(p.w) % 16 == 0 && p.scales.cols % kF8Chunk == 0) {
    // A warp iteration takes 32 chunks of kF8Chunk codes.
    const int f8_split = split_for(pairs, (p.k / kF8Chunk + 31) / 32);
    config.grid = grid_for(pairs, f8_split);
    if (f8_split == 4) {
      launch_f8_split<4>(p, config);
    } else if (f8_split == 2) {
      launch_f8_split<2>(p, config);
    } else {
      launch_f8_split<1>(p, config);
    }
    return;
  }
  switch (p.type) {
    case QuantType::kQ4_0: launch_for<Q4_0>(p, config, split); break;
    case QuantType::kQ4_1: launch_for<Q4_1>(p, config, split); break;
    case QuantType::kQ5_0: launch_for<Q5_0>(p, config, split); break;
    case QuantType::kQ5_K: launch_for<Q5_K>(p, config, split); break;
    case QuantType::kQ5_1: launch_for<Q5_1>(p, config, split); break;
    case QuantType::kQ2_K: launch_for<Q2_K>(p, config, split); break;
    case QuantType::kQ3_K: launch_for<Q3_K>(p, config, split); break;
    case QuantType::kIQ4_XS: launch_for<IQ4_XS>(p, config, split); break;
    case QuantType::kF8_E4M3: launch_for<F8_E4M3>(p, config, split); break;
    case QuantType::kQ8_0: launch_for<Q8_0>(p, config, split); break;
    case QuantType::kQ4_K: launch_for<Q4_K>(p, config, split); break;
    case QuantType::kQ6_K: launch_for<Q6_K>(p, config, split); break;
    case QuantType::kQ6_K_R8: launch_for<Q6_K_R8>(p, config, split); break;
  }
}

}  // namespace cellm::cuda
