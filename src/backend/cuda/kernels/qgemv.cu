#include <algorithm>

#include <cuda_fp16.h>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/qgemv.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = 2;
constexpr int kGroup = 256;         // weights of a row a warp decodes per step (8 per lane)
constexpr int kGroupsInFlight = 4;  // groups loaded before the first is multiplied

__device__ __forceinline__ std::uint32_t ld16(const std::uint8_t* p) {
  return __ldg(reinterpret_cast<const unsigned short*>(p));
}
__device__ __forceinline__ std::uint32_t ld32(const std::uint8_t* p) {
  return __ldg(reinterpret_cast<const unsigned int*>(p));
}
__device__ __forceinline__ float half_bits(std::uint32_t bits) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits & 0xffffu)));
}
__device__ __forceinline__ float bf16_lo(std::uint32_t two) { return __uint_as_float(two << 16); }
__device__ __forceinline__ float bf16_hi(std::uint32_t two) {
  return __uint_as_float(two & 0xffff0000u);
}

// Each decoder says, for group g of a row and a lane, which 8 weights the
// lane holds (kRuns runs of kRunLen consecutive positions), loads their raw
// bits (load) and turns them into floats in run order (decode).

// Q4_0: 32-weight blocks {f16 d; 16 bytes}: weight i is d * (nibble - 8), the
// low nibbles of the bytes holding weights 0..15 and the high ones 16..31.
// Lane: block 8g + lane / 4, bytes 4j..4j+3 (j = lane % 4) -> weights
// 4j..4j+3 and 16 + 4j..16 + 4j + 3.
struct Q4_0 {
  static constexpr int kBlockElems = 32, kBlockBytes = 18, kRuns = 2, kRunLen = 4;
  struct Raw {
    std::uint32_t d, q01, q23;
  };
  __device__ static bool valid(int g, int lane, int blocks) { return g * 8 + lane / 4 < blocks; }
  __device__ static int pos(int g, int lane, int run) {
    return (g * 8 + lane / 4) * 32 + 4 * (lane % 4) + 16 * run;
  }
  __device__ static void load(Raw& r, const std::uint8_t* row, int g, int lane) {
    const std::uint8_t* b = row + static_cast<std::int64_t>(g * 8 + lane / 4) * kBlockBytes;
    r.d = ld16(b);
    r.q01 = ld16(b + 2 + 4 * (lane % 4));
    r.q23 = ld16(b + 4 + 4 * (lane % 4));
  }
  __device__ static void decode(const Raw& r, int /*lane*/, float (&w)[8]) {
    const float d = half_bits(r.d);
    const std::uint32_t q = r.q01 | (r.q23 << 16);
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const int byte = static_cast<int>((q >> (8 * t)) & 0xffu);
      w[t] = d * static_cast<float>((byte & 0xf) - 8);
      w[4 + t] = d * static_cast<float>((byte >> 4) - 8);
    }
  }
};

// Q8_0: 32-weight blocks {f16 d; 32 int8}: weight i is d * q[i].
// Lane: block 8g + lane / 4, weights 8j..8j + 7 (j = lane % 4).
struct Q8_0 {
  static constexpr int kBlockElems = 32, kBlockBytes = 34, kRuns = 1, kRunLen = 8;
  struct Raw {
    std::uint32_t d, q[4];
  };
  __device__ static bool valid(int g, int lane, int blocks) { return g * 8 + lane / 4 < blocks; }
  __device__ static int pos(int g, int lane, int /*run*/) {
    return (g * 8 + lane / 4) * 32 + 8 * (lane % 4);
  }
  __device__ static void load(Raw& r, const std::uint8_t* row, int g, int lane) {
    const std::uint8_t* b = row + static_cast<std::int64_t>(g * 8 + lane / 4) * kBlockBytes;
    r.d = ld16(b);
#pragma unroll
    for (int t = 0; t < 4; ++t) r.q[t] = ld16(b + 2 + 8 * (lane % 4) + 2 * t);
  }
  __device__ static void decode(const Raw& r, int /*lane*/, float (&w)[8]) {
    const float d = half_bits(r.d);
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      w[2 * t] = d * static_cast<float>(static_cast<std::int8_t>(r.q[t] & 0xffu));
      w[2 * t + 1] = d * static_cast<float>(static_cast<std::int8_t>((r.q[t] >> 8) & 0xffu));
    }
  }
};

// Q4_K: 256-weight super-blocks {f16 d, dmin; 12 bytes of 6-bit scales and
// mins for 8 sub-blocks of 32; 128 bytes of nibbles}. Bytes 32c..32c+31
// hold sub-block 2c in their low nibbles and 2c + 1 in their high ones;
// weight = d * scale * q - dmin * min.
// Lane: bytes 4 lane..4 lane + 3 (c = lane / 8) -> weights 64c + l..+3 and
// 64c + 32 + l..+3 (l = 4 (lane % 8)).
struct Q4_K {
  static constexpr int kBlockElems = 256, kBlockBytes = 144, kRuns = 2, kRunLen = 4;
  struct Raw {
    std::uint32_t dm, s0, s1, s2, q;
  };
  __device__ static bool valid(int, int, int) { return true; }
  __device__ static int pos(int g, int lane, int run) {
    return g * 256 + 64 * (lane / 8) + 4 * (lane % 8) + 32 * run;
  }
  __device__ static void load(Raw& r, const std::uint8_t* row, int g, int lane) {
    const std::uint8_t* b = row + static_cast<std::int64_t>(g) * kBlockBytes;
    r.dm = ld32(b);
    r.s0 = ld32(b + 4);
    r.s1 = ld32(b + 8);
    r.s2 = ld32(b + 12);
    r.q = ld32(b + 16 + 4 * lane);
  }
  // Byte t (0..11) of the packed scales.
  __device__ static std::uint32_t scale_byte(const Raw& r, int t) {
    const std::uint32_t word = t < 4 ? r.s0 : (t < 8 ? r.s1 : r.s2);
    return (word >> (8 * (t & 3))) & 0xffu;
  }
  // Sub-block j's 6-bit scale and min.
  __device__ static void scale_min(const Raw& r, int j, std::uint32_t& sc, std::uint32_t& mn) {
    if (j < 4) {
      sc = scale_byte(r, j) & 63u;
      mn = scale_byte(r, j + 4) & 63u;
    } else {
      sc = (scale_byte(r, j + 4) & 0xfu) | ((scale_byte(r, j - 4) >> 6) << 4);
      mn = (scale_byte(r, j + 4) >> 4) | ((scale_byte(r, j) >> 6) << 4);
    }
  }
  __device__ static void decode(const Raw& r, int lane, float (&w)[8]) {
    const float d = half_bits(r.dm);
    const float dmin = half_bits(r.dm >> 16);
    const int c = lane / 8;
    std::uint32_t sc0, m0, sc1, m1;
    scale_min(r, 2 * c, sc0, m0);
    scale_min(r, 2 * c + 1, sc1, m1);
    const float d0 = d * static_cast<float>(sc0), o0 = dmin * static_cast<float>(m0);
    const float d1 = d * static_cast<float>(sc1), o1 = dmin * static_cast<float>(m1);
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const std::uint32_t byte = (r.q >> (8 * t)) & 0xffu;
      w[t] = d0 * static_cast<float>(byte & 0xfu) - o0;
      w[4 + t] = d1 * static_cast<float>(byte >> 4) - o1;
    }
  }
};

// Q6_K: 256-weight super-blocks {128 bytes ql (low 4 bits), 64 bytes qh
// (high 2 bits), 16 int8 scales, f16 d}, in two halves of 128 weights. In
// half h, for l in 0..31 the bytes ql[64h + l], ql[64h + l + 32] and
// qh[32h + l] give the weights 128h + l + {0, 32, 64, 96} with the scales
// sc[8h + l / 16 + {0, 2, 4, 6}]; weight = d * scale * (q - 32).
// Lane: h = lane / 16, l = 2 (lane % 16) and l + 1 -> four runs of two.
struct Q6_K {
  static constexpr int kBlockElems = 256, kBlockBytes = 210, kRuns = 4, kRunLen = 2;
  struct Raw {
    std::uint32_t qla, qlb, qh, sc01, sc23, d;
  };
  __device__ static bool valid(int, int, int) { return true; }
  __device__ static int pos(int g, int lane, int run) {
    return g * 256 + 128 * (lane / 16) + 2 * (lane % 16) + 32 * run;
  }
  __device__ static void load(Raw& r, const std::uint8_t* row, int g, int lane) {
    const std::uint8_t* b = row + static_cast<std::int64_t>(g) * kBlockBytes;
    const int h = lane / 16, l = 2 * (lane % 16);
    r.qla = ld16(b + 64 * h + l);
    r.qlb = ld16(b + 64 * h + l + 32);
    r.qh = ld16(b + 128 + 32 * h + l);
    // sc[8h + is + 2t] (is = l / 16) is byte `is` of the t-th 16-bit word.
    const std::uint8_t* s = b + 192 + 8 * h;
    r.sc01 = ld16(s) | (ld16(s + 2) << 16);
    r.sc23 = ld16(s + 4) | (ld16(s + 6) << 16);
    r.d = ld16(b + 208);
  }
  __device__ static void decode(const Raw& r, int lane, float (&w)[8]) {
    const float d = half_bits(r.d);
    const int is = (2 * (lane % 16)) / 16;
    float ds[4];
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const std::uint32_t word = t < 2 ? r.sc01 : r.sc23;
      const std::uint32_t byte = (word >> (16 * (t & 1) + 8 * is)) & 0xffu;
      ds[t] = d * static_cast<float>(static_cast<std::int8_t>(byte));
    }
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const std::uint32_t a = (r.qla >> (8 * e)) & 0xffu;
      const std::uint32_t b = (r.qlb >> (8 * e)) & 0xffu;
      const std::uint32_t h = (r.qh >> (8 * e)) & 0xffu;
      const int q0 = static_cast<int>((a & 0xfu) | ((h & 3u) << 4)) - 32;
      const int q1 = static_cast<int>((b & 0xfu) | (((h >> 2) & 3u) << 4)) - 32;
      const int q2 = static_cast<int>((a >> 4) | (((h >> 4) & 3u) << 4)) - 32;
      const int q3 = static_cast<int>((b >> 4) | (((h >> 6) & 3u) << 4)) - 32;
      // Run order: run r is at +32r, element e of it.
      w[0 * 2 + e] = ds[0] * static_cast<float>(q0);
      w[1 * 2 + e] = ds[1] * static_cast<float>(q1);
      w[2 * 2 + e] = ds[2] * static_cast<float>(q2);
      w[3 * 2 + e] = ds[3] * static_cast<float>(q3);
    }
  }
};

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

template <class D, int kM>
__global__ void __launch_bounds__(kThreads) qgemv_kernel(const __grid_constant__ QGemvParams p) {
  const int lane = threadIdx.x & 31;
  const int row0 = (blockIdx.x * kWarps + static_cast<int>(threadIdx.x >> 5)) * kRowsPerWarp;
  if (row0 >= p.n) {
    if (p.pdl) griddep_enter();
    return;
  }
  const bool second = row0 + 1 < p.n;
  const auto* w_bytes = static_cast<const std::uint8_t*>(p.w);
  const std::uint8_t* rows[kRowsPerWarp] = {w_bytes + row0 * p.ldw_bytes,
                                            w_bytes + (second ? row0 + 1 : row0) * p.ldw_bytes};
  const int blocks = p.k / D::kBlockElems;
  const int groups = (p.k + kGroup - 1) / kGroup;

  float acc[kRowsPerWarp][kM] = {};
  for (int g0 = 0; g0 < groups; g0 += kGroupsInFlight) {
    typename D::Raw raw[kGroupsInFlight][kRowsPerWarp];
    bool live[kGroupsInFlight];
#pragma unroll
    for (int u = 0; u < kGroupsInFlight; ++u) {
      const int g = g0 + u;
      live[u] = g < groups && D::valid(g, lane, blocks);
      if (live[u]) {
#pragma unroll
        for (int i = 0; i < kRowsPerWarp; ++i) D::load(raw[u][i], rows[i], g, lane);
      }
    }
    // The weights are constant: only the activations wait for the kernel before.
    if (g0 == 0 && p.pdl) griddep_enter();
#pragma unroll
    for (int u = 0; u < kGroupsInFlight; ++u) {
      if (!live[u]) continue;
      const int g = g0 + u;
      float w[kRowsPerWarp][8];
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) D::decode(raw[u][i], lane, w[i]);
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
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    if (i == 1 && !second) break;
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      if (m >= p.m) break;
      float sum = warp_sum(acc[i][m]);
      if (lane == 0) {
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
}

// One warp per (row, 256-weight group): each lane decodes its 8 weights and
// stores them as bf16 runs at their columns.
template <class D>
__global__ void __launch_bounds__(kThreads) dequantize_kernel(const __grid_constant__ DequantParams p) {
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

template <class D>
void launch_for(const QGemvParams& p, const LaunchConfig& config) {
  if (p.m <= 1) {
    launch(qgemv_kernel<D, 1>, config, p);
  } else if (p.m <= 2) {
    launch(qgemv_kernel<D, 2>, config, p);
  } else if (p.m <= 4) {
    launch(qgemv_kernel<D, 4>, config, p);
  } else {
    launch(qgemv_kernel<D, 8>, config, p);
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
    case QuantType::kQ8_0: launch_dequantize_as<Q8_0>(p, stream); break;
    case QuantType::kQ4_K: launch_dequantize_as<Q4_K>(p, stream); break;
    case QuantType::kQ6_K: launch_dequantize_as<Q6_K>(p, stream); break;
  }
}

int quant_block_elems(QuantType type) {
  switch (type) {
    case QuantType::kQ4_0: return Q4_0::kBlockElems;
    case QuantType::kQ8_0: return Q8_0::kBlockElems;
    case QuantType::kQ4_K: return Q4_K::kBlockElems;
    case QuantType::kQ6_K: return Q6_K::kBlockElems;
  }
  return 0;
}

int quant_block_bytes(QuantType type) {
  switch (type) {
    case QuantType::kQ4_0: return Q4_0::kBlockBytes;
    case QuantType::kQ8_0: return Q8_0::kBlockBytes;
    case QuantType::kQ4_K: return Q4_K::kBlockBytes;
    case QuantType::kQ6_K: return Q6_K::kBlockBytes;
  }
  return 0;
}

void launch_qgemv(const QGemvParams& p, cudaStream_t stream) {
  LaunchConfig config;
  const int warps = (p.n + kRowsPerWarp - 1) / kRowsPerWarp;
  config.grid = dim3(static_cast<unsigned>((warps + kWarps - 1) / kWarps));
  config.block = dim3(kThreads);
  config.stream = stream;
  config.pdl = p.pdl;
  switch (p.type) {
    case QuantType::kQ4_0: launch_for<Q4_0>(p, config); break;
    case QuantType::kQ8_0: launch_for<Q8_0>(p, config); break;
    case QuantType::kQ4_K: launch_for<Q4_K>(p, config); break;
    case QuantType::kQ6_K: launch_for<Q6_K>(p, config); break;
  }
}

}  // namespace cellm::cuda
