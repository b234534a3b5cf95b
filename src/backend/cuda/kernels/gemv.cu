#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/gemv.cuh"
#include "backend/cuda/kernels/ptx_utils.cuh"
#include "backend/cuda/launch.h"


namespace cellm::cuda {
namespace {

// A block owns a tile of 16 weight rows (8 gate and the 8 matching up rows
// when gated) and its four warps split k in batches. The products run on
// tensor cores (mma m16n8k16: weights as A, the activation rows as the 8
// columns of B), so no lane converts or multiplies weights itself: the
// CUDA-core version of this kernel was issue-bound at 2-2.8 TB/s on the H200
// (and far worse at 4 rows), as every weight cost a conversion and an FMA per
// activation row.
//
// Each lane loads 16 contiguous bytes of its rows g and g+8 at k offset
// 8 * (lane % 4) of a 32-wide step and the same 16 bytes of activation row
// g: the mma's k order is then a fixed permutation of memory order, the same
// for A and B, which a dot product does not see.
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kSteps = 8;             // 32-wide k steps per batch: 256 bytes per lane in flight
constexpr int kBatchK = 32 * kSteps;  // k per batch
constexpr int kTileRows = 16;

__host__ __device__ __forceinline__ bool is_gated(GemvEpilogue e) {
  return e == GemvEpilogue::kGatedSilu || e == GemvEpilogue::kGatedGeluTanh;
}

__host__ __device__ __forceinline__ int gemv_tiles(const GemvParams& p) {
  return is_gated(p.epilogue) ? (p.n + 7) / 8 : (p.n + kTileRows - 1) / kTileRows;
}

__device__ __forceinline__ void prefetch_l2(const void* ptr) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(ptr));
}

struct WeightBatch {
  uint4 lo[kSteps];  // row g
  uint4 hi[kSteps];  // row g + 8
};

__device__ __forceinline__ void load_batch(const bf16* row_lo, const bf16* row_hi, int batch,
                                           int t4, int k, WeightBatch& wb) {
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const int at = batch * kBatchK + s * 32 + 8 * t4;
    const bool ok = at < k;
    wb.lo[s] = ok ? __ldcs(reinterpret_cast<const uint4*>(row_lo + at)) : make_uint4(0, 0, 0, 0);
    wb.hi[s] = ok ? __ldcs(reinterpret_cast<const uint4*>(row_hi + at)) : make_uint4(0, 0, 0, 0);
  }
}

__device__ __forceinline__ void to_float8(const uint4& raw, float (&out)[8]) {
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(pairs[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

// x * inv_rms * (w + offset), rounded to bf16 as the norm kernel writes it.
__device__ __forceinline__ uint4 normalise(const uint4& x_raw, const uint4& w_raw, float inv_rms,
                                           float offset) {
  float x[8];
  float w[8];
  to_float8(x_raw, x);
  to_float8(w_raw, w);
  uint4 out;
  unsigned* words = reinterpret_cast<unsigned*>(&out);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    words[i] = pack_bf16x2(x[2 * i] * inv_rms * (w[2 * i] + offset),
                           x[2 * i + 1] * inv_rms * (w[2 * i + 1] + offset));
  }
  return out;
}

// Every block reduces the rows' sums of squares itself: a row is a few KiB
// and sits in L2, which is cheaper than another kernel. inv_rms[r] for r < m.
__device__ __forceinline__ void rms_scales(const GemvParams& p, float* inv_rms) {
  __shared__ float partial[kWarps][kGemvMaxRows];
  const int chunks = p.k >> 3;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  for (int r = 0; r < p.m; ++r) {
    float sum_sq = 0.0f;
    for (int c = threadIdx.x; c < chunks; c += kThreads) {
      float x[8];
      to_float8(__ldg(reinterpret_cast<const uint4*>(p.a + r * p.lda) + c), x);
#pragma unroll
      for (int e = 0; e < 8; ++e) sum_sq = fmaf(x[e], x[e], sum_sq);
    }
    sum_sq = warp_sum(sum_sq);
    if (lane == 0) partial[warp][r] = sum_sq;
  }
  __syncthreads();
  if (threadIdx.x < p.m) {
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) total += partial[w][threadIdx.x];
    inv_rms[threadIdx.x] = rsqrtf(total / static_cast<float>(p.k) + p.norm_eps);
  }
  __syncthreads();
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

__global__ void __launch_bounds__(kThreads) gemv_kernel(const __grid_constant__ GemvParams p) {
  __shared__ float inv_rms[kGemvMaxRows];
  __shared__ float4 partial[kWarps - 1][32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int t4 = lane & 3;
  const bool gated = is_gated(p.epilogue);
  // Fragment rows g and g + 8: two halves of 16 rows, or a gate and its up.
  int col_lo;
  int col_hi;
  std::int64_t row_lo;
  std::int64_t row_hi;
  if (gated) {
    col_lo = col_hi = blockIdx.x * 8 + g;
    row_lo = min(col_lo, p.n - 1);
    row_hi = p.n + row_lo;
  } else {
    col_lo = blockIdx.x * kTileRows + g;
    col_hi = col_lo + 8;
    row_lo = min(col_lo, p.n - 1);  // rows past n re-read the last; never stored
    row_hi = min(col_hi, p.n - 1);
  }
  const bf16* w_lo = p.w + row_lo * p.ldw;
  const bf16* w_hi = p.w + row_hi * p.ldw;
  const int batches = (p.k + kBatchK - 1) / kBatchK;

  // Weights never change: stream the first batch in (and touch the next in
  // L2) before waiting on the kernel that produces the activations.
  WeightBatch wb;
  if (warp < batches) {
    load_batch(w_lo, w_hi, warp, t4, p.k, wb);
    const int next = warp + kWarps;
    if (next < batches) {
#pragma unroll
      for (int s = 0; s < kSteps; s += 2) {
        const int at = next * kBatchK + s * 32 + 8 * t4;
        if (at < p.k) {
          prefetch_l2(w_lo + at);
          prefetch_l2(w_hi + at);
        }
      }
    }
  }
  griddep_wait();
  griddep_launch_dependents();

  const bool norm = p.prologue == GemvPrologue::kRmsNorm;
  if (norm) rms_scales(p, inv_rms);
  const bool has_row = g < p.m;  // this lane feeds activation row g as B's column g
  const bf16* a_row = p.a + static_cast<std::int64_t>(has_row ? g : 0) * p.lda;
  const float row_scale = norm && has_row ? inv_rms[g] : 1.0f;

  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int b = warp; b < batches; b += kWarps) {
    if (b != warp) load_batch(w_lo, w_hi, b, t4, p.k, wb);
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int at = b * kBatchK + s * 32 + 8 * t4;
      uint4 x = make_uint4(0, 0, 0, 0);
      if (has_row && at < p.k) {
        x = __ldg(reinterpret_cast<const uint4*>(a_row + at));
        if (norm) {
          x = normalise(x, __ldg(reinterpret_cast<const uint4*>(p.norm_weight + at)), row_scale,
                        p.norm_weight_offset);
        }
      }
      const unsigned a0[4] = {wb.lo[s].x, wb.hi[s].x, wb.lo[s].y, wb.hi[s].y};
      const unsigned a1[4] = {wb.lo[s].z, wb.hi[s].z, wb.lo[s].w, wb.hi[s].w};
      mma_bf16_16816(acc, a0, x.x, x.y);
      mma_bf16_16816(acc, a1, x.z, x.w);
    }
  }

  // Warps 1..3 hand their partial tiles to warp 0, which adds them in order.
  if (warp > 0) partial[warp - 1][lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int w = 0; w < kWarps - 1; ++w) {
    const float4 v = partial[w][lane];
    acc[0] += v.x;
    acc[1] += v.y;
    acc[2] += v.z;
    acc[3] += v.w;
  }
  // acc: (row g, activation rows 2 t4 and 2 t4 + 1), then (row g + 8, the same).
  const int r0 = 2 * t4;
  const int r1 = r0 + 1;
  if (gated) {
    if (col_lo >= p.n) return;
    if (r0 < p.m) store_gated(p, r0, col_lo, acc[0], acc[2]);
    if (r1 < p.m) store_gated(p, r1, col_lo, acc[1], acc[3]);
    return;
  }
  if (col_lo < p.n) {
    if (r0 < p.m) store_value(p, r0, col_lo, acc[0]);
    if (r1 < p.m) store_value(p, r1, col_lo, acc[1]);
  }
  if (col_hi < p.n) {
    if (r0 < p.m) store_value(p, r0, col_hi, acc[2]);
    if (r1 < p.m) store_value(p, r1, col_hi, acc[3]);
  }
}

}  // namespace

void launch_gemv(const GemvParams& params, cudaStream_t stream) {
  if (params.m < 1 || params.m > kGemvMaxRows) {
    cuda_failed(cudaErrorInvalidValue, "launch_gemv: unvalidated row count");
  }
  LaunchConfig config{dim3(static_cast<unsigned>(gemv_tiles(params))), dim3(kThreads), 0, stream};
  config.pdl = params.pdl;
  launch(gemv_kernel, config, params);
}

}  // namespace cellm::cuda
