// The quantized GEMV's wide-load kernels for one-row steps (decode at batch
// 1): Q4_K, Q6_K_R8 and FP8 rows on 16-byte boundaries, read with 16-byte
// loads and decoded a run at a time, where the generic decoder of qgemv.cu is
// bound by instructions. launch_wide_one_row picks one or declines.
#include <cuda_fp8.h>

#include "backend/cuda/kernels/qgemv_common.cuh"
#include "backend/cuda/kernels/quant_blocks_q6r8.h"

namespace cellm::cuda::qgemv_detail {
namespace {

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
  with_split(split, [&](auto s) { launch(qgemv_q6k_r8_kernel<1, decltype(s)::value>, config, p); });
  return true;
}

}  // namespace

bool launch_wide_one_row(const QGemvParams& p, LaunchConfig config, int pairs) {
  // One-row steps of Q4_K rows on 16-byte boundaries take the wide-load
  // kernel: 2x the generic decoder's speed at one row on an H100, 1.7x
  // slower at eight (bench/results/h100-2026-12-07-s30-qgemv-micro.jsonl;
  // two to seven rows not measured yet, so they keep the generic kernel).
  if (p.m == 1 && p.type == QuantType::kQ4_K && p.ldw_bytes % 16 == 0 &&
      reinterpret_cast<std::uintptr_t>(p.w) % 16 == 0) {
    // Four super-blocks a warp iteration.
    const int q4k_split = split_for(pairs, (p.k / 256 + kQ4kSupers - 1) / kQ4kSupers);
    config.grid = grid_for(pairs, q4k_split);
    with_split(q4k_split,
               [&](auto s) { launch(qgemv_q4k_kernel<1, decltype(s)::value>, config, p); });
    return true;
  }
  if (launch_q6k_r8_wide(p, config, pairs)) return true;
  if (p.m == 1 && p.type == QuantType::kF8_E4M3 && p.ldw_bytes % 16 == 0 &&
      reinterpret_cast<std::uintptr_t>(p.w) % 16 == 0 && p.scales.cols % kF8Chunk == 0) {
    // A warp iteration takes 32 chunks of kF8Chunk codes.
    const int f8_split = split_for(pairs, (p.k / kF8Chunk + 31) / 32);
    config.grid = grid_for(pairs, f8_split);
    with_split(f8_split,
               [&](auto s) { launch(qgemv_f8_kernel<1, decltype(s)::value>, config, p); });
    return true;
  }
  return false;
}

}  // namespace cellm::cuda::qgemv_detail
