#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/gemv.cuh"
#include "backend/cuda/kernels/ptx_utils.cuh"
#include "backend/cuda/launch.h"

#include <algorithm>

namespace cellm::cuda {
namespace {

// A warp owns a unit of two weight rows (two adjacent output columns, or the
// gate row and the up row of one column) and streams them through registers
// in batches of kChunks 16-byte pieces per lane and row, two batches in
// flight: the next batch is requested before the current one is multiplied.
// The grid is at most one resident wave; a warp walks its units and their
// batches as one sequence, so the loads of its next unit are already in
// flight while it finishes the current one, and the first two batches are
// requested before the kernel waits on its predecessor (programmatic
// dependent launch), so a small projection's weights stream in while the
// kernel before it still runs.
// Earlier versions on the H200, all slower than cuBLASLt: a cp.async
// pipeline of 16-row tiles feeding mma (1B batch 1: 1.257 against 1.167
// ms/step), persistent blocks over that pipeline (1.97), mma fed from
// 64-byte row pieces (1.53), and this layout with one batch in flight and
// the norm recomputed per piece (1.28; its batches waited one after another).
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kChunks = 4;                  // per lane and row in a batch: 64 bytes
constexpr int kBatchChunks = 32 * kChunks;  // of a row per batch: 1024 values
constexpr int kMaxBlocksPerSm = 4;          // 16 warps; two batches each ~ 128 KB in flight per SM
constexpr std::size_t kSmemPerSm = 220 * 1024;

__host__ __device__ __forceinline__ bool is_gated(GemvEpilogue e) {
  return e == GemvEpilogue::kGatedSilu || e == GemvEpilogue::kGatedGeluTanh;
}

__host__ __device__ __forceinline__ int gemv_units(const GemvParams& p) {
  return is_gated(p.epilogue) ? p.n : (p.n + 1) / 2;
}

// The normalised rows and the norm weights live in shared memory.
__host__ __device__ __forceinline__ std::size_t staged_bytes(const GemvParams& p) {
  return p.prologue == GemvPrologue::kRmsNorm
             ? static_cast<std::size_t>(p.m + 1) * p.k * sizeof(bf16)
             : 0;
}

__device__ __forceinline__ void to_float8(const uint4& raw, float (&out)[8]) {
  // bf16 -> float is a 16-bit shift: two integer ops per pair.
  const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = __uint_as_float(words[i] << 16);
    out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}

// Streamed once per step: keep the weights from evicting the activations.
__device__ __forceinline__ uint4 load_weights(const uint4* ptr) {
  return __ldcs(ptr);
}

struct Batch {
  uint4 w0[kChunks];
  uint4 w1[kChunks];
};

struct UnitRows {
  const uint4* row0;
  const uint4* row1;  // past an odd n, repeats row0 (never stored)
  int col;            // output column of row0
  bool second;        // row1 is output column col + 1
};

__device__ __forceinline__ UnitRows unit_rows(const GemvParams& p, int u) {
  UnitRows rows;
  const auto row = [&](std::int64_t r) { return reinterpret_cast<const uint4*>(p.w + r * p.ldw); };
  if (is_gated(p.epilogue)) {
    rows.col = u;
    rows.second = false;
    rows.row0 = row(u);
    rows.row1 = row(static_cast<std::int64_t>(p.n) + u);
  } else {
    rows.col = 2 * u;
    rows.second = 2 * u + 1 < p.n;
    rows.row0 = row(rows.col);
    rows.row1 = row(rows.second ? rows.col + 1 : rows.col);
  }
  return rows;
}

// RMS-normalises the m rows of `a` into shared memory (bf16, rounded as the
// norm kernel writes them): raw rows and norm weights are copied in with
// cp.async (all requested at once), each warp reduces whole rows, then every
// thread scales the pieces it copied. Every block does this itself: a row is
// a few KiB in L2, cheaper than a kernel of its own.
__device__ __forceinline__ void stage_normalised(const GemvParams& p, bf16* xs) {
  __shared__ float inv_rms[kGemvMaxRows];
  const int chunks = p.k >> 3;
  bf16* nw = xs + static_cast<std::int64_t>(p.m) * p.k;
  for (int i = threadIdx.x; i < (p.m + 1) * chunks; i += kThreads) {
    const int r = i / chunks;
    const int c = i - r * chunks;
    const bf16* src = r < p.m ? p.a + r * p.lda + 8 * c : p.norm_weight + 8 * c;
    cp_async16(xs + static_cast<std::int64_t>(i) * 8, src, true);
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  const int lane = threadIdx.x & 31;
  for (int r = threadIdx.x >> 5; r < p.m; r += kWarps) {
    float sum_sq = 0.0f;
    for (int c = lane; c < chunks; c += 32) {
      float x[8];
      to_float8(*reinterpret_cast<const uint4*>(xs + r * p.k + 8 * c), x);
#pragma unroll
      for (int e = 0; e < 8; ++e) sum_sq = fmaf(x[e], x[e], sum_sq);
    }
    sum_sq = warp_sum(sum_sq);
    if (lane == 0) inv_rms[r] = rsqrtf(sum_sq / static_cast<float>(p.k) + p.norm_eps);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < p.m * chunks; i += kThreads) {
    const int r = i / chunks;
    const int c = i - r * chunks;
    auto* x = reinterpret_cast<uint4*>(xs + static_cast<std::int64_t>(i) * 8);
    float xv[8];
    float wv[8];
    to_float8(*x, xv);
    to_float8(*reinterpret_cast<const uint4*>(nw + 8 * c), wv);
#pragma unroll
    for (int e = 0; e < 8; ++e) xv[e] = xv[e] * inv_rms[r] * (wv[e] + p.norm_weight_offset);
    store8(reinterpret_cast<bf16*>(x), xv);
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

// kM: activation rows the kernel is built for (p.m <= kM).
template <int kM>
__global__ void __launch_bounds__(kThreads, kMaxBlocksPerSm)
    gemv_kernel(const __grid_constant__ GemvParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int lane = threadIdx.x & 31;
  const int chunks = p.k >> 3;
  const int per_unit = (chunks + kBatchChunks - 1) / kBatchChunks;
  const int units = gemv_units(p);
  const int first = blockIdx.x * kWarps + (threadIdx.x >> 5);
  const int stride = gridDim.x * kWarps;
  const int my_units = first < units ? (units - 1 - first) / stride + 1 : 0;
  const int total = my_units * per_unit;  // this warp's batches

  // Which part of k the j-th batch covers. A unit starts at a part set by its
  // index: the warps of a wave then read different column ranges of their
  // rows at any moment, spread over all of memory, instead of all reading the
  // same column range of thousands of rows a row length apart.
  auto chunk_base = [&](int j) {
    const int u = first + (j / per_unit) * stride;
    return ((j % per_unit + u % per_unit) % per_unit) * kBatchChunks + lane;
  };
  auto load = [&](Batch& b, int j) {
    const UnitRows rows = unit_rows(p, first + (j / per_unit) * stride);
    const int base = chunk_base(j);
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int c = base + 32 * i;
      const bool ok = c < chunks;
      b.w0[i] = ok ? load_weights(rows.row0 + c) : make_uint4(0, 0, 0, 0);
      b.w1[i] = ok ? load_weights(rows.row1 + c) : make_uint4(0, 0, 0, 0);
    }
  };

  // Weights never change: request the first two batches before waiting on
  // the kernel that produces the activations.
  Batch next0;
  Batch next1;
  if (total > 0) load(next0, 0);
  if (total > 1) load(next1, 1);
  griddep_wait();
  griddep_launch_dependents();

  const bf16* x = p.a;
  std::int64_t ldx = p.lda;
  if (p.prologue == GemvPrologue::kRmsNorm) {
    bf16* xs = reinterpret_cast<bf16*>(smem_raw);
    stage_normalised(p, xs);
    x = xs;
    ldx = p.k;
  }

  float acc0[kM];
  float acc1[kM];
#pragma unroll
  for (int r = 0; r < kM; ++r) acc0[r] = acc1[r] = 0.0f;

  auto consume = [&](const Batch& b, int j) {
    const int base = chunk_base(j);
    // Pieces past k hold zero weights (see load): reading zeros for their
    // activations too keeps the loop free of branches, so each row's pieces
    // are requested together.
#pragma unroll
    for (int r = 0; r < kM; ++r) {
      if (r < p.m) {
        uint4 xr[kChunks];
#pragma unroll
        for (int i = 0; i < kChunks; ++i) {
          const int c = base + 32 * i;
          xr[i] = c < chunks ? *reinterpret_cast<const uint4*>(x + r * ldx + 8 * c)
                             : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int i = 0; i < kChunks; ++i) {
          float xv[8];
          float w0[8];
          float w1[8];
          to_float8(xr[i], xv);
          to_float8(b.w0[i], w0);
          to_float8(b.w1[i], w1);
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            acc0[r] = fmaf(xv[e], w0[e], acc0[r]);
            acc1[r] = fmaf(xv[e], w1[e], acc1[r]);
          }
        }
      }
    }
    if (j % per_unit != per_unit - 1) return;
    const UnitRows rows = unit_rows(p, first + (j / per_unit) * stride);
    const bool gated = is_gated(p.epilogue);
#pragma unroll
    for (int r = 0; r < kM; ++r) {
      const float s0 = warp_sum(acc0[r]);
      const float s1 = warp_sum(acc1[r]);
      acc0[r] = acc1[r] = 0.0f;
      if (lane == r && r < p.m) {
        if (gated) {
          store_gated(p, r, rows.col, s0, s1);
        } else {
          store_value(p, r, rows.col, s0);
          if (rows.second) store_value(p, r, rows.col + 1, s1);
        }
      }
    }
  };

  for (int j = 0; j < total; j += 2) {
    consume(next0, j);
    if (j + 2 < total) load(next0, j + 2);
    if (j + 1 < total) {
      consume(next1, j + 1);
      if (j + 3 < total) load(next1, j + 3);
    }
  }
}

template <int kM>
void launch_rows(const GemvParams& params, cudaStream_t stream) {
  const std::size_t smem = staged_bytes(params);
  const int units = gemv_units(params);
  const long long blocks = ceil_div(units, kWarps);
  const int per_sm = static_cast<int>(
      std::clamp<std::size_t>(kSmemPerSm / std::max<std::size_t>(smem, 1), 1, kMaxBlocksPerSm));
  const long long wave = static_cast<long long>(per_sm) * multiprocessor_count();
  // As many rounds as one wave needs, spread evenly so no warp walks an extra unit.
  const long long rounds = (blocks + wave - 1) / wave;
  const long long grid = (blocks + rounds - 1) / rounds;
  LaunchConfig config{dim3(static_cast<unsigned>(grid)), dim3(kThreads), smem, stream};
  config.pdl = params.pdl;
  launch(gemv_kernel<kM>, config, params);
}

}  // namespace

void launch_gemv(const GemvParams& params, cudaStream_t stream) {
  static_assert(kGemvMaxRows == 8, "one instantiation per power of two up to kGemvMaxRows");
  if (params.m < 1 || params.m > kGemvMaxRows) {
    cuda_failed(cudaErrorInvalidValue, "launch_gemv: unvalidated row count");
  }
  if (params.m == 1) {
    launch_rows<1>(params, stream);
  } else if (params.m == 2) {
    launch_rows<2>(params, stream);
  } else if (params.m <= 4) {
    launch_rows<4>(params, stream);
  } else {
    launch_rows<8>(params, stream);
  }
}

}  // namespace cellm::cuda
