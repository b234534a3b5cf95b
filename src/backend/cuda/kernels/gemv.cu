#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/gemv.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kCols = 4;    // output columns per block
constexpr int kUnroll = 2;  // k steps each lane has in flight
constexpr int kStep = 32 * 8;

__device__ __forceinline__ void to_float8(const uint4& raw, float (&out)[8]) {
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(pairs[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

__device__ __forceinline__ void store_out(float* out, float value) {
  *out = value;
}
__device__ __forceinline__ void store_out(bf16* out, float value) {
  *out = __float2bfloat16_rn(value);
}

template <int kM, typename OutT>
__global__ void __launch_bounds__(kThreads) gemv_kernel(const __grid_constant__ GemvParams p) {
  __shared__ float partial[kWarps][kM][kCols];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int n0 = blockIdx.x * kCols;
  // Columns past n re-read the last one; their sums are dropped.
  const bf16* wrow[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    wrow[c] = p.w + static_cast<std::int64_t>(min(n0 + c, p.n - 1)) * p.ldw;
  }
  float acc[kM][kCols];
#pragma unroll
  for (int r = 0; r < kM; ++r) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[r][c] = 0.0f;
  }

  for (int base = warp * kStep + lane * 8; base < p.k; base += kWarps * kStep * kUnroll) {
    uint4 wv[kUnroll][kCols];
    uint4 av[kUnroll][kM];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int kk = base + u * kWarps * kStep;
      const bool ok = kk < p.k;
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        wv[u][c] =
            ok ? __ldcs(reinterpret_cast<const uint4*>(wrow[c] + kk)) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int r = 0; r < kM; ++r) {
        av[u][r] = ok && r < p.m ? __ldg(reinterpret_cast<const uint4*>(
                                       p.a + static_cast<std::int64_t>(r) * p.lda + kk))
                                 : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float wf[kCols][8];
#pragma unroll
      for (int c = 0; c < kCols; ++c) to_float8(wv[u][c], wf[c]);
#pragma unroll
      for (int r = 0; r < kM; ++r) {
        float af[8];
        to_float8(av[u][r], af);
#pragma unroll
        for (int c = 0; c < kCols; ++c) {
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[r][c] = fmaf(af[e], wf[c][e], acc[r][c]);
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kM; ++r) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const float sum = warp_sum(acc[r][c]);
      if (lane == 0) partial[warp][r][c] = sum;
    }
  }
  __syncthreads();
  const int t = threadIdx.x;
  if (t < kM * kCols) {
    const int r = t / kCols;
    const int c = t % kCols;
    const int col = n0 + c;
    if (r < p.m && col < p.n) {
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) sum += partial[w][r][c];
      if (p.bias != nullptr) sum += __bfloat162float(p.bias[col]);
      store_out(static_cast<OutT*>(p.out) + static_cast<std::int64_t>(r) * p.ldc + col, sum);
    }
  }
}

template <typename OutT>
void launch_rows(const GemvParams& p, const LaunchConfig& config) {
  if (p.m <= 1) {
    launch(gemv_kernel<1, OutT>, config, p);
  } else if (p.m <= 2) {
    launch(gemv_kernel<2, OutT>, config, p);
  } else if (p.m <= 4) {
    launch(gemv_kernel<4, OutT>, config, p);
  } else {
    launch(gemv_kernel<8, OutT>, config, p);
  }
}

}  // namespace

void launch_gemv(const GemvParams& params, cudaStream_t stream) {
  if (params.m < 1 || params.m > kGemvMaxRows) {
    cuda_failed(cudaErrorInvalidValue, "launch_gemv: unvalidated row count");
  }
  const LaunchConfig config{dim3(ceil_div(params.n, kCols)), dim3(kThreads), 0, stream};
  if (params.out_f32) {
    launch_rows<float>(params, config);
  } else {
    launch_rows<bf16>(params, config);
  }
}

}  // namespace cellm::cuda
