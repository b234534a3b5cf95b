#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/gemv.cuh"
#include "backend/cuda/kernels/ptx_utils.cuh"
#include "backend/cuda/launch.h"


namespace cellm::cuda {
namespace {

// A block owns a tile of 16 weight rows (8 gate rows and their 8 up rows
// when gated) and streams it over k through a cp.async pipeline of kStages
// shared-memory stages, so tens of KB per block stay in flight without
// holding registers; the weights of the first stages are requested before
// the kernel waits on its predecessor. Each stage also carries the
// activation rows (zero past m) and, for the norm, the norm weights.
// The products run on tensor cores (mma m16n8k16: the 16 weight rows as A,
// up to 8 activation rows as the columns of B); the four warps take
// interleaved 16-wide k steps of every stage and add their tiles at the end.
// Still slower than cuBLASLt on the H200 (1B batch 1: 1.257 against 1.167
// ms/step), so off by default (CELLM_GEMV). Tried there and slower still:
// per-lane FMAs (issue-bound), mma fed from 64-byte row pieces loaded into
// registers (2.3 TB/s), and persistent blocks running one pipeline over
// several tiles (1.97 ms/step; 32 stages slower than 8 for the same tile).
// Each stage moves only 4 KB of weights per block iteration, against 16 KB
// for cuBLASLt's TMA-fed tiles: the next version should move more per
// barrier (wider stages, TMA bulk copies).
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kTileRows = 16;
constexpr int kStageK = 128;                   // k per stage: 256 bytes of each row
constexpr int kChunksPerRow = kStageK / 8;     // 16-byte pieces of a row per stage
constexpr int kLd = kStageK + 8;               // padded row: ldmatrix rows hit distinct banks
constexpr int kWeightElems = kTileRows * kLd;  // per stage
constexpr int kActElems = kGemvMaxRows * kLd;  // per stage
constexpr int kStageElems = kWeightElems + kActElems + kStageK;

// A layer with few tiles (1B's o and down projections: 128 tiles on 132 SMs)
// gets one block per SM, which must keep as many bytes in flight as four
// blocks of a wide layer: the pipeline deepens as the grid thins, so every
// SM holds ~120 KB of weight requests whatever the shape, and a thin layer's
// whole tile is requested before the kernel waits on its predecessor.
template <int kStages>
constexpr std::size_t smem_bytes() {
  return sizeof(bf16) * kStages * kStageElems;
}
static_assert(smem_bytes<32>() <= 220 * 1024, "the deepest pipeline fits one block per SM");
static_assert(kThreads == (kTileRows / 2) * kChunksPerRow, "one row pair per thread per stage");
static_assert(kThreads == kGemvMaxRows * kChunksPerRow, "one activation piece per thread");
static_assert(kStageK == 16 * 2 * kWarps, "each warp takes two k16 steps per stage");

__host__ __device__ __forceinline__ bool is_gated(GemvEpilogue e) {
  return e == GemvEpilogue::kGatedSilu || e == GemvEpilogue::kGatedGeluTanh;
}

__host__ __device__ __forceinline__ int gemv_tiles(const GemvParams& p) {
  return is_gated(p.epilogue) ? (p.n + 7) / 8 : (p.n + kTileRows - 1) / kTileRows;
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

// x * inv_rms * (w + offset) for one bf16 pair, rounded to bf16 as the norm
// kernel writes it.
__device__ __forceinline__ unsigned normalise_pair(unsigned x_pair, unsigned w_pair, float inv_rms,
                                                   float offset) {
  const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&x_pair));
  const float2 w = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w_pair));
  return pack_bf16x2(x.x * inv_rms * (w.x + offset), x.y * inv_rms * (w.y + offset));
}

// Every block reduces the rows' sums of squares itself: a row is a few KiB
// and sits in L2, which is cheaper than another kernel. inv_rms[r] for r < m.
__device__ __forceinline__ void rms_scales(const GemvParams& p, float* inv_rms) {
  __shared__ float partial[kWarps][kGemvMaxRows];
  const int chunks = p.k >> 3;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  // All rows' loads in one pass, so their latencies overlap.
  float sum_sq[kGemvMaxRows];
#pragma unroll
  for (int r = 0; r < kGemvMaxRows; ++r) sum_sq[r] = 0.0f;
  for (int c = threadIdx.x; c < chunks; c += kThreads) {
#pragma unroll
    for (int r = 0; r < kGemvMaxRows; ++r) {
      if (r < p.m) {
        float x[8];
        to_float8(__ldg(reinterpret_cast<const uint4*>(p.a + r * p.lda) + c), x);
#pragma unroll
        for (int e = 0; e < 8; ++e) sum_sq[r] = fmaf(x[e], x[e], sum_sq[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kGemvMaxRows; ++r) {
    if (r < p.m) {
      const float total = warp_sum(sum_sq[r]);
      if (lane == 0) partial[warp][r] = total;
    }
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

template <int kStages>
__global__ void __launch_bounds__(kThreads) gemv_kernel(const __grid_constant__ GemvParams p) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* smem = reinterpret_cast<bf16*>(smem_raw);
  __shared__ float inv_rms[kGemvMaxRows];
  __shared__ float4 partial[kWarps - 1][32];
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const bool gated = is_gated(p.epilogue);
  const bool norm = p.prologue == GemvPrologue::kRmsNorm;
  const int stages_total = (p.k + kStageK - 1) / kStageK;

  // Tile rows i and i + 8 (i < 8): two halves of 16 rows, or gate i and its up.
  const int base_col = blockIdx.x * (gated ? 8 : kTileRows);
  auto weight_row = [&](int i) -> std::int64_t {
    if (gated) {
      const int col = min(base_col + (i & 7), p.n - 1);
      return i < 8 ? col : p.n + col;
    }
    return min(base_col + i, p.n - 1);  // rows past n re-read the last; never stored
  };
  // Copy assignment: thread copies piece `chunk` of tile rows `pair` and
  // `pair` + 8, and of activation row `pair`.
  const int pair = tid / kChunksPerRow;
  const int chunk = tid % kChunksPerRow;
  const bf16* w_lo = p.w + weight_row(pair) * p.ldw + chunk * 8;
  const bf16* w_hi = p.w + weight_row(pair + 8) * p.ldw + chunk * 8;
  auto stage_ptr = [&](int stage) { return smem + stage * kStageElems; };
  auto issue_weights = [&](int s) {
    bf16* dst = stage_ptr(s % kStages);
    const int at = s * kStageK + chunk * 8;
    const bool ok = at < p.k;
    cp_async16(dst + pair * kLd + chunk * 8, ok ? w_lo + s * kStageK : p.w, ok);
    cp_async16(dst + (pair + 8) * kLd + chunk * 8, ok ? w_hi + s * kStageK : p.w, ok);
  };
  auto issue_inputs = [&](int s) {
    bf16* dst = stage_ptr(s % kStages) + kWeightElems;
    const int at = s * kStageK + chunk * 8;
    const bool ok = at < p.k && pair < p.m;
    cp_async16(dst + pair * kLd + chunk * 8,
               ok ? p.a + static_cast<std::int64_t>(pair) * p.lda + at : p.a, ok);
    if (norm && tid < kChunksPerRow) {
      const int nat = s * kStageK + tid * 8;
      cp_async16(dst + kActElems + tid * 8, nat < p.k ? p.norm_weight + nat : p.norm_weight,
                 nat < p.k);
    }
  };

  // Weights never change: request the first stages before waiting on the
  // kernel that produces the activations.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < stages_total) issue_weights(s);
    cp_async_commit();
  }
  griddep_wait();
  griddep_launch_dependents();
  for (int s = 0; s < kStages - 1 && s < stages_total; ++s) issue_inputs(s);
  cp_async_commit();
  if (norm) rms_scales(p, inv_rms);

  const int g = lane >> 2;
  const int t4 = lane & 3;
  const float row_scale = norm && g < p.m ? inv_rms[g] : 1.0f;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int s = 0; s < stages_total; ++s) {
    // The first stage also needs the inputs' group, committed last.
    if (s == 0) {
      cp_async_wait<0>();
    } else {
      cp_async_wait<kStages - 2>();
    }
    __syncthreads();  // stage s is visible; the stage refilled below is consumed
    const int ahead = s + kStages - 1;
    if (ahead < stages_total) {
      issue_weights(ahead);
      issue_inputs(ahead);
    }
    cp_async_commit();

    const bf16* ws = stage_ptr(s % kStages);
    const bf16* xs = ws + kWeightElems;
    const bf16* nws = xs + kActElems;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int kk = (2 * warp + j) * 16;
      unsigned a[4];
      unsigned b[4];
      ldmatrix_x4(a, ws + (lane & 15) * kLd + kk + (lane >> 4) * 8);
      ldmatrix_x4(b, xs + (lane & 7) * kLd + kk + ((lane >> 3) & 1) * 8);
      if (norm) {
        const auto* nw = reinterpret_cast<const unsigned*>(nws + kk + 2 * t4);
        b[0] = normalise_pair(b[0], nw[0], row_scale, p.norm_weight_offset);
        b[1] = normalise_pair(b[1], nw[4], row_scale, p.norm_weight_offset);
      }
      mma_bf16_16816(acc, a, b[0], b[1]);
    }
  }
  cp_async_wait<0>();

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
  // acc: (tile row g, activation rows 2 t4 and 2 t4 + 1), then tile row g + 8.
  const int r0 = 2 * t4;
  const int r1 = r0 + 1;
  if (gated) {
    const int col = base_col + g;
    if (col >= p.n) return;
    if (r0 < p.m) store_gated(p, r0, col, acc[0], acc[2]);
    if (r1 < p.m) store_gated(p, r1, col, acc[1], acc[3]);
    return;
  }
  const int col_lo = base_col + g;
  const int col_hi = col_lo + 8;
  if (col_lo < p.n) {
    if (r0 < p.m) store_value(p, r0, col_lo, acc[0]);
    if (r1 < p.m) store_value(p, r1, col_lo, acc[1]);
  }
  if (col_hi < p.n) {
    if (r0 < p.m) store_value(p, r0, col_hi, acc[2]);
    if (r1 < p.m) store_value(p, r1, col_hi, acc[3]);
  }
}

template <int kStages>
void launch_stages(const GemvParams& params, int tiles, cudaStream_t stream) {
  LaunchConfig config{dim3(static_cast<unsigned>(tiles)), dim3(kThreads), smem_bytes<kStages>(),
                      stream};
  config.pdl = params.pdl;
  launch(gemv_kernel<kStages>, config, params);
}

}  // namespace

void launch_gemv(const GemvParams& params, cudaStream_t stream) {
  if (params.m < 1 || params.m > kGemvMaxRows) {
    cuda_failed(cudaErrorInvalidValue, "launch_gemv: unvalidated row count");
  }
  const int tiles = gemv_tiles(params);
  const int per_sm = (tiles + multiprocessor_count() - 1) / multiprocessor_count();
  if (per_sm <= 1) {
    launch_stages<32>(params, tiles, stream);
  } else if (per_sm <= 2) {
    launch_stages<16>(params, tiles, stream);
  } else {
    launch_stages<8>(params, tiles, stream);
  }
}

}  // namespace cellm::cuda
