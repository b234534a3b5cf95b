#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/gemv.cuh"
#include "backend/cuda/launch.h"

#include <algorithm>
#include <atomic>

namespace cellm::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
// 16-byte chunks each lane has in flight per weight row: with two rows per
// warp that is 128 bytes a lane, enough with a few warps per SM to cover
// HBM latency without double-buffering in registers.
constexpr int kBatch = 4;
constexpr int kBatchChunks = 32 * kBatch;
// Batches of a warp's first rows touched in L2 before the wait, on top of the
// one loaded into registers: the previous kernel rarely uses the bandwidth.
constexpr int kPrefetchBatches = 1;

__device__ __forceinline__ void to_float8(const uint4& raw, float (&out)[8]) {
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(pairs[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

__device__ __forceinline__ void prefetch_l2(const void* ptr) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(ptr));
}

__host__ __device__ __forceinline__ bool is_gated(GemvEpilogue e) {
  return e == GemvEpilogue::kGatedSilu || e == GemvEpilogue::kGatedGeluTanh;
}

// The two weight rows of a warp's unit and the output columns they feed:
// rows 2u and 2u+1 (the second repeats the first past an odd n and is not
// stored), or, gated, the gate row u and the up row n + u of one column.
struct Unit {
  const bf16* row0;
  const bf16* row1;
  int col0;
  int col1;  // -1: nothing to store
};

__device__ __forceinline__ Unit unit_rows(const GemvParams& p, int u) {
  Unit unit;
  if (is_gated(p.epilogue)) {
    unit.col0 = u;
    unit.col1 = -1;
    unit.row0 = p.w + static_cast<std::int64_t>(u) * p.ldw;
    unit.row1 = p.w + static_cast<std::int64_t>(p.n + u) * p.ldw;
  } else {
    unit.col0 = 2 * u;
    unit.col1 = 2 * u + 1 < p.n ? 2 * u + 1 : -1;
    unit.row0 = p.w + static_cast<std::int64_t>(unit.col0) * p.ldw;
    unit.row1 = p.w + static_cast<std::int64_t>(unit.col1 >= 0 ? unit.col1 : unit.col0) * p.ldw;
  }
  return unit;
}

__device__ __forceinline__ void load_batch(const Unit& unit, int base, int chunks, int lane,
                                           uint4 (&w0)[kBatch], uint4 (&w1)[kBatch]) {
#pragma unroll
  for (int i = 0; i < kBatch; ++i) {
    const int c = base + i * 32 + lane;
    const bool ok = c < chunks;
    w0[i] = ok ? __ldcs(reinterpret_cast<const uint4*>(unit.row0) + c) : make_uint4(0, 0, 0, 0);
    w1[i] = ok ? __ldcs(reinterpret_cast<const uint4*>(unit.row1) + c) : make_uint4(0, 0, 0, 0);
  }
}

__device__ __forceinline__ void store_value(const GemvParams& p, int r, int col, float sum) {
  const std::int64_t at = static_cast<std::int64_t>(r) * p.ldc + col;
  if (p.bias != nullptr) sum += __bfloat162float(p.bias[col]);
  if (p.epilogue == GemvEpilogue::kResidualAdd) {
    bf16* out = static_cast<bf16*>(p.out) + at;
    *out = __float2bfloat16_rn(__bfloat162float(*out) + round_bf16(sum));
  } else if (p.out_f32) {
    static_cast<float*>(p.out)[at] = sum;
  } else {
    static_cast<bf16*>(p.out)[at] = __float2bfloat16_rn(sum);
  }
}

__device__ __forceinline__ void store_gated(const GemvParams& p, int r, int col, float gate,
                                            float up) {
  const float g = round_bf16(gate);
  const float act = p.epilogue == GemvEpilogue::kGatedSilu ? silu(g) : gelu_tanh(g);
  static_cast<bf16*>(p.out)[static_cast<std::int64_t>(r) * p.ldc + col] =
      __float2bfloat16_rn(act * round_bf16(up));
}

// Every block reduces the rows' sums of squares itself: a is at most a few
// KiB per row and sits in L2, which is cheaper than another kernel.
template <int kM>
__device__ __forceinline__ void rms_scales(const GemvParams& p, int chunks, float (&inv_rms)[kM]) {
  __shared__ float partial[kWarps][kM];
  float sum_sq[kM];
#pragma unroll
  for (int r = 0; r < kM; ++r) sum_sq[r] = 0.0f;
  for (int c = threadIdx.x; c < chunks; c += kThreads) {
#pragma unroll
    for (int r = 0; r < kM; ++r) {
      if (r < p.m) {
        float x[8];
        to_float8(__ldg(reinterpret_cast<const uint4*>(p.a + r * p.lda) + c), x);
#pragma unroll
        for (int e = 0; e < 8; ++e) sum_sq[r] = fmaf(x[e], x[e], sum_sq[r]);
      }
    }
  }
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
#pragma unroll
  for (int r = 0; r < kM; ++r) {
    const float s = warp_sum(sum_sq[r]);
    if (lane == 0) partial[warp][r] = s;
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < kM; ++r) {
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) total += partial[w][r];
    inv_rms[r] = rsqrtf(total / static_cast<float>(p.k) + p.norm_eps);
  }
}

template <int kM>
__global__ void __launch_bounds__(kThreads) gemv_kernel(const __grid_constant__ GemvParams p) {
  const int lane = threadIdx.x & 31;
  const int units = is_gated(p.epilogue) ? p.n : (p.n + 1) / 2;
  const int chunks = p.k >> 3;
  const int stride = gridDim.x * kWarps;
  int u = blockIdx.x * kWarps + (threadIdx.x >> 5);

  // Weights never change: stream the first ones in before waiting.
  uint4 w0[kBatch];
  uint4 w1[kBatch];
  Unit unit{};
  if (u < units) {
    unit = unit_rows(p, u);
    load_batch(unit, 0, chunks, lane, w0, w1);
#pragma unroll
    for (int b = 1; b <= kPrefetchBatches; ++b) {
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const int c = b * kBatchChunks + i * 32 + lane;
        if (c < chunks) {
          prefetch_l2(reinterpret_cast<const uint4*>(unit.row0) + c);
          prefetch_l2(reinterpret_cast<const uint4*>(unit.row1) + c);
        }
      }
    }
  }
  griddep_wait();
  griddep_launch_dependents();

  const bool norm = p.prologue == GemvPrologue::kRmsNorm;
  float inv_rms[kM];
  if (norm) rms_scales<kM>(p, chunks, inv_rms);

  for (bool first = true; u < units; u += stride, first = false) {
    if (!first) {
      unit = unit_rows(p, u);
      load_batch(unit, 0, chunks, lane, w0, w1);
    }
    float acc0[kM];
    float acc1[kM];
#pragma unroll
    for (int r = 0; r < kM; ++r) acc0[r] = acc1[r] = 0.0f;
    for (int base = 0; base < chunks; base += kBatchChunks) {
      if (base > 0) load_batch(unit, base, chunks, lane, w0, w1);
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const int c = base + i * 32 + lane;
        if (c >= chunks) break;
        float f0[8];
        float f1[8];
        to_float8(w0[i], f0);
        to_float8(w1[i], f1);
        float nw[8];
        if (norm) {
          to_float8(__ldg(reinterpret_cast<const uint4*>(p.norm_weight) + c), nw);
#pragma unroll
          for (int e = 0; e < 8; ++e) nw[e] += p.norm_weight_offset;
        }
#pragma unroll
        for (int r = 0; r < kM; ++r) {
          if (r < p.m) {
            float x[8];
            to_float8(__ldg(reinterpret_cast<const uint4*>(p.a + r * p.lda) + c), x);
            if (norm) {
#pragma unroll
              for (int e = 0; e < 8; ++e) x[e] = round_bf16(x[e] * inv_rms[r] * nw[e]);
            }
#pragma unroll
            for (int e = 0; e < 8; ++e) {
              acc0[r] = fmaf(x[e], f0[e], acc0[r]);
              acc1[r] = fmaf(x[e], f1[e], acc1[r]);
            }
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kM; ++r) {
      const float s0 = warp_sum(acc0[r]);
      const float s1 = warp_sum(acc1[r]);
      if (lane == r && r < p.m) {
        if (is_gated(p.epilogue)) {
          store_gated(p, r, unit.col0, s0, s1);
        } else {
          store_value(p, r, unit.col0, s0);
          if (unit.col1 >= 0) store_value(p, r, unit.col1, s1);
        }
      }
    }
  }
}

// One resident wave: every block is on an SM from the start, so all of them
// load their first weights while the previous kernel finishes. Per device,
// as a host may hold different GPUs.
template <int kM>
int resident_blocks() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> blocks[kMaxDevices] = {};
  int device = 0;
  CELLM_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= kMaxDevices) device = 0;
  int known = blocks[device].load(std::memory_order_relaxed);
  if (known == 0) {
    int per_sm = 0;
    CELLM_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemv_kernel<kM>, kThreads, 0));
    known = (per_sm > 0 ? per_sm : 1) * multiprocessor_count();
    blocks[device].store(known, std::memory_order_relaxed);
  }
  return known;
}

template <int kM>
void launch_rows(const GemvParams& p, cudaStream_t stream) {
  const int units = is_gated(p.epilogue) ? p.n : (p.n + 1) / 2;
  const int blocks = std::min<int>(static_cast<int>(ceil_div(units, kWarps)), resident_blocks<kM>());
  LaunchConfig config{dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream};
  config.pdl = p.pdl;
  launch(gemv_kernel<kM>, config, p);
}

}  // namespace

void prepare_gemv() {
  resident_blocks<1>();
  resident_blocks<2>();
  resident_blocks<4>();
  resident_blocks<8>();
}

void launch_gemv(const GemvParams& params, cudaStream_t stream) {
  if (params.m < 1 || params.m > kGemvMaxRows) {
    cuda_failed(cudaErrorInvalidValue, "launch_gemv: unvalidated row count");
  }
  if (params.m <= 1) {
    launch_rows<1>(params, stream);
  } else if (params.m <= 2) {
    launch_rows<2>(params, stream);
  } else if (params.m <= 4) {
    launch_rows<4>(params, stream);
  } else {
    launch_rows<8>(params, stream);
  }
}

}  // namespace cellm::cuda
