// The int8 quantized GEMV (qgemv_dp4a.cuh): the activation quantization,
// the GEMV kernel over every type of qgemv_dp4a_blocks.h and the launches.
//
// Tiling. A warp owns two weight rows (each activation load then serves two
// rows' dot products) and walks them in iterations of 32 units, one a lane
// (a unit is 32 weights of the 32-weight types, 64 of the K-quants: 1024 or
// 2048 weights an iteration). Each lane loads two iterations of both rows
// before it multiplies any (144 to 320 bytes a lane in flight); the
// activations, read by every warp, come from L1/L2. Narrow projections
// split k over up to four warps of a block (split-K), which add their sums
// in shared memory in a fixed order, until the grid holds about 8 warps per
// SM (dp4a_split): Q4_K at n = 640, k = 14336 runs 320 row pairs x 2 = 640
// warps.
#include <type_traits>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/qgemv_common.cuh"
#include "backend/cuda/kernels/qgemv_dp4a.cuh"
#include "backend/cuda/kernels/qgemv_dp4a_blocks.h"
#include "backend/cuda/kernels/qgemv_dp4a_blocks_q6.h"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

using qgemv_detail::kRowsPerWarp;
using qgemv_detail::kThreads;
using qgemv_detail::kWarps;
constexpr int kInFlight = 2;  // iterations loaded before the first is multiplied
constexpr int kQuantThreads = 256;

// ---- activation quantization ---------------------------------------------
// A thread takes 8 consecutive values (one 16-byte load), four threads a
// 32-block: the block's largest magnitude and its sum of codes are exact
// (max, integer adds) whatever order the shuffles take.
__global__ void __launch_bounds__(kQuantThreads)
    quantize_q8_kernel(const __grid_constant__ QuantizeQ8Params p) {
  // The GEMV after this kernel may start streaming its weights now; it
  // waits for this grid's end before it reads the codes.
  griddep_launch_dependents();
  griddep_wait();
  const int per_row = p.k / 8;
  const std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * kQuantThreads + threadIdx.x;
  // Threads past the end take part in the shuffles with zeros (whole
  // four-thread groups, as k / 8 is a multiple of 4).
  const bool live = t < static_cast<std::int64_t>(p.m) * per_row;
  const int row = live ? static_cast<int>(t / per_row) : 0;
  const int c8 = live ? static_cast<int>(t % per_row) : 0;
  float x[8] = {};
  if (live) load8(p.a + static_cast<std::int64_t>(row) * p.lda + 8 * c8, x);
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(x[i]));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
  const float d = amax / 127.0f;
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  int sum = 0;
  std::uint32_t packed[2] = {0u, 0u};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int q = __float2int_rn(__fmul_rn(x[i], inv));
    sum += q;
    packed[i / 4] |= (static_cast<std::uint32_t>(q) & 0xffu) << (8 * (i % 4));
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  if (!live) return;
  *reinterpret_cast<uint2*>(p.out.q + row * p.out.ldq + 8 * c8) = make_uint2(packed[0], packed[1]);
  if (c8 % 4 == 0) {
    const std::int64_t at = row * p.out.lds + c8 / 4;
    p.out.d[at] = d;
    p.out.s[at] = __fmul_rn(d, static_cast<float>(sum));
  }
}

// ---- the GEMV ------------------------------------------------------------
// The warps' row pairs, the split-K slices and the stores (a fixed
// butterfly across the warp, then the slices in order in shared memory) are
// the generic kernel's (qgemv_common.cuh).
struct GemvArgs {
  QGemvParams p;
  Q8Rows x;
};

template <class T, int A, int kM, int split>
__global__ void __launch_bounds__(kThreads) qgemv_dp4a_kernel(const __grid_constant__ GemvArgs g) {
  const QGemvParams& p = g.p;
  const qgemv_detail::WarpRows<split> wr(p);
  const int lane = wr.lane;
  const int units = wr.active ? p.k / T::kUnit : 0;
  const int iters = (units + 31) / 32;

  float acc[kRowsPerWarp][kM] = {};
  bool waited = false;
  for (int i0 = wr.slice; i0 < iters; i0 += split * kInFlight) {
    typename T::Raw raw[kInFlight][kRowsPerWarp];
    bool live[kInFlight];
#pragma unroll
    for (int f = 0; f < kInFlight; ++f) {
      const int it = i0 + f * split;
      const int u = it * 32 + lane;
      live[f] = it < iters && u < units;
      if (live[f]) {
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) T::template load<A>(raw[f][r], wr.rows[r], u);
      }
    }
    // The weights are constant: only the activations wait for the kernel before.
    if (!waited) griddep_enter();
    waited = true;
#pragma unroll
    for (int f = 0; f < kInFlight; ++f) {
      if (!live[f]) continue;
      const int u = (i0 + f * split) * 32 + lane;
      typename T::Scales sc[kRowsPerWarp];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) sc[r] = T::prep(raw[f][r], u);
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        if (m >= p.m) break;
        const dp4a::ActRow x{g.x.q + m * g.x.ldq, g.x.d + m * g.x.lds, g.x.s + m * g.x.lds};
        typename T::Act a;
        T::load_act(a, x, u);
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) acc[r][m] = T::dot(raw[f][r], sc[r], a, acc[r][m]);
      }
    }
  }
  if (!waited) griddep_enter();
  qgemv_detail::store_sums<kM, split>(p, acc, wr.warp, lane, wr.slice, wr.row0, wr.active,
                                      wr.second);
}

// The largest alignment (16, 4 or 2 bytes) that the rows' start and stride
// share, capped by what the type's field offsets keep.
int row_alignment(const QGemvParams& p, int max_align) {
  const auto at = reinterpret_cast<std::uintptr_t>(p.w) | static_cast<std::uintptr_t>(p.ldw_bytes);
  for (const int a : {16, 4}) {
    if (a <= max_align && at % static_cast<std::uintptr_t>(a) == 0) return a;
  }
  return 2;
}

// Row pairs per split: doubled while the grid holds fewer than 8 warps per
// SM and every slice still gets an iteration. Why 8, not the 32 of
// qgemv_common.cuh: a warp here keeps 4.5 to 10 KB of weights in flight
// (two iterations of two rows), so 4 to 8 warps an SM already cover the
// memory latency, and more splitting only adds waves: n = 4096 at k = 4096
// (Q4_K) runs as 512 blocks of 4 warps, within one wave at 4 blocks an SM
// (105 registers at one row: 528 resident), where split 2 would make 1024
// blocks in two waves. A guess until measured (bench: BM_QGemvDp4a).
int dp4a_split(int pairs, int iters) {
  const int target = multiprocessor_count() * 8;
  int split = 1;
  while (split < kWarps && pairs * split < target && iters >= 2 * split) split *= 2;
  return split;
}

template <class T, int A, int split>
void launch_rows(const GemvArgs& g, const LaunchConfig& config) {
  if (g.p.m <= 1) {
    launch(qgemv_dp4a_kernel<T, A, 1, split>, config, g);
  } else if (g.p.m <= 2) {
    launch(qgemv_dp4a_kernel<T, A, 2, split>, config, g);
  } else if (g.p.m <= 4) {
    launch(qgemv_dp4a_kernel<T, A, 4, split>, config, g);
  } else {
    launch(qgemv_dp4a_kernel<T, A, 8, split>, config, g);
  }
}

template <class T, int A>
void launch_split(const GemvArgs& g, const LaunchConfig& config, int split) {
  qgemv_detail::with_split(split,
                           [&](auto s) { launch_rows<T, A, decltype(s)::value>(g, config); });
}

template <class T>
void launch_type(const QGemvParams& p, const Q8Rows& x, bool pdl, cudaStream_t stream) {
  const int pairs = (p.n + kRowsPerWarp - 1) / kRowsPerWarp;
  const int split = dp4a_split(pairs, (p.k / T::kUnit + 31) / 32);
  const GemvArgs g{p, x};
  LaunchConfig config;
  config.grid = qgemv_detail::grid_for(pairs, split);
  config.block = dim3(kThreads);
  config.stream = stream;
  config.pdl = pdl;
  const int align = row_alignment(p, T::kMaxAlign);
  if constexpr (T::kMaxAlign >= 16) {
    if (align == 16) return launch_split<T, 16>(g, config, split);
  }
  if constexpr (T::kMaxAlign >= 4) {
    if (align == 4) return launch_split<T, 4>(g, config, split);
  }
  // Q4_K and Q5_K rows are 4-byte aligned (validate_qgemv_dp4a).
  if constexpr (!std::is_same_v<T, dp4a::Q4_K> && !std::is_same_v<T, dp4a::Q5_K>) {
    launch_split<T, 2>(g, config, split);
  }
}

void launch_gemv(const QGemvParams& p, const Q8Rows& x, bool pdl, cudaStream_t stream) {
  switch (p.type) {
    case QuantType::kQ4_0: launch_type<dp4a::Q4_0>(p, x, pdl, stream); break;
    case QuantType::kQ4_1: launch_type<dp4a::Q4_1>(p, x, pdl, stream); break;
    case QuantType::kQ8_0: launch_type<dp4a::Q8_0>(p, x, pdl, stream); break;
    case QuantType::kQ4_K: launch_type<dp4a::Q4_K>(p, x, pdl, stream); break;
    case QuantType::kQ5_K: launch_type<dp4a::Q5_K>(p, x, pdl, stream); break;
    case QuantType::kQ6_K: launch_type<dp4a::Q6_K>(p, x, pdl, stream); break;
    case QuantType::kQ6_K_R8: launch_type<dp4a::Q6_K_R8>(p, x, pdl, stream); break;
    default: break;  // validate_qgemv_dp4a refuses the rest
  }
}

}  // namespace

void launch_quantize_q8(const QuantizeQ8Params& p, cudaStream_t stream) {
  LaunchConfig config;
  const std::int64_t threads = static_cast<std::int64_t>(p.m) * (p.k / 8);
  config.grid = dim3(ceil_div(threads, kQuantThreads));
  config.block = dim3(kQuantThreads);
  config.stream = stream;
  config.pdl = p.pdl;
  launch(quantize_q8_kernel, config, p);
}

void launch_qgemv_dp4a(const QGemvParams& p, const Q8Rows& act, cudaStream_t stream) {
  QuantizeQ8Params q;
  q.a = p.a;
  q.lda = p.lda;
  q.m = p.m;
  q.k = p.k;
  q.out = act;
  q.pdl = p.pdl;
  launch_quantize_q8(q, stream);
  // Always PDL: the kernel before it is the quantization, whose end the
  // GEMV waits for (and that waited for everything before it).
  launch_gemv(p, act, true, stream);
}

void launch_qgemv_dp4a_quantized(const QGemvParams& p, const Q8Rows& act, cudaStream_t stream) {
  launch_gemv(p, act, p.pdl, stream);
}

}  // namespace cellm::cuda
