// The quantized GEMV (qgemv.cuh): the generic block decoder for every kept
// type and row count, the bf16 dequantization of wide steps, the block sizes
// and the dispatch, which gives one-row steps of the wide-load types to
// qgemv_wide.cu.
#include <algorithm>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/qgemv_common.cuh"
#include "backend/cuda/kernels/quant_blocks.h"
#include "backend/cuda/kernels/quant_blocks_q6r8.h"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

using namespace qgemv_detail;  // NOLINT(google-build-using-namespace): the shared launch shape

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

// The split is a template argument: wide projections (split 1) run the
// plain loop, with nothing of the split's bookkeeping.
template <class D>
void launch_for(const QGemvParams& p, const LaunchConfig& config, int split) {
  with_split(split, [&](auto s) { launch_split<D, decltype(s)::value>(p, config); });
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

void launch_qgemv(const QGemvParams& p, cudaStream_t stream) {
  LaunchConfig config;
  const int pairs = (p.n + kRowsPerWarp - 1) / kRowsPerWarp;
  const int split = split_for(pairs, (p.k + kGroup - 1) / kGroup);
  config.grid = grid_for(pairs, split);
  config.block = dim3(kThreads);
  config.stream = stream;
  config.pdl = p.pdl;
  // One-row steps of the wide-load types (qgemv_wide.cu).
  if (launch_wide_one_row(p, config, pairs)) return;
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
