// Host side of the tensor-core GEMV (gemv_mma.cuh): the block size, the
// grid and the shared memory of a call, and its launch. The kernel body is
// gemv_mma_kernel.cuh.
#include <algorithm>
#include <string>

#include "backend/cuda/kernels/gemv_mma.cuh"
#include "backend/cuda/kernels/gemv_mma_kernel.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

using namespace gemv_mma_detail;  // NOLINT(google-build-using-namespace): the kernel's helpers

[[maybe_unused]] std::string trace_label(const GemvParams& p) {
  const char* epilogue = epilogue_name(p.epilogue);
  return std::string("gemv/mma-") + epilogue + " m=" + std::to_string(p.m) +
         " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k);
}

// Sixteen warps a block where the groups alone would leave SMs empty and k
// is long enough for each warp to keep two batches (1B's down: 128 groups of
// 8192), eight otherwise (a block per SM for the o projection, so the next
// kernel's blocks find room beside it). Never from m: a row's bits must not
// depend on how many rows share the call.
bool wide_blocks(const GemvParams& p) {
  if (p.mma_warps != 0) return p.mma_warps == 16;
  return mma_groups(p) <= multiprocessor_count() && p.k >= 16 * kStepK * kSteps * 2;
}

// The grid of a launch of `warps`-warp blocks (at most one wave) and the
// most groups one of its blocks walks (from n, k and the epilogue only).
struct Walk {
  long long grid;
  long long rounds;
};

Walk walk(const GemvParams& p, int warps) {
  const long long groups = mma_groups(p);
  const long long wave = static_cast<long long>(kMaxWarpsPerSm / warps) * multiprocessor_count();
  const long long rounds = (groups + wave - 1) / wave;
  return Walk{(groups + rounds - 1) / rounds, rounds};
}

// The staged inputs (gemv_mma_kernel.cuh), then each row's sums of squares
// and partial sums of the block's groups.
std::int64_t smem_bytes(const GemvParams& p, int warps) {
  const std::int64_t floats = (walk(p, warps).rounds * kPartFloats + 1) * warps * p.m;
  return mma_staged_chunks(p) * static_cast<std::int64_t>(sizeof(uint4)) +
         floats * static_cast<std::int64_t>(sizeof(float));
}

template <int kW>
void launch_warps(const GemvParams& requested, cudaStream_t stream) {
  GemvParams params = requested;
  trace::assign_slot(params, gemv_mma_trace, [&] { return trace_label(params); });
  const long long grid = walk(params, kW).grid;
  LaunchConfig config{dim3(static_cast<unsigned>(grid)), dim3(kW * 32),
                      static_cast<std::size_t>(smem_bytes(params, kW)), stream};
  config.pdl = params.pdl;
  if (params.prologue == GemvPrologue::kRmsNorm) {
    launch(gemv_mma_kernel<kW, true>, config, params);
  } else {
    launch(gemv_mma_kernel<kW, false>, config, params);
  }
}

}  // namespace

int gemv_mma_rounds(const GemvParams& params) {
  return static_cast<int>(walk(params, wide_blocks(params) ? 16 : 8).rounds);
}

std::int64_t gemv_mma_smem_bytes(const GemvParams& params) {
  return smem_bytes(params, wide_blocks(params) ? 16 : 8);
}

bool gemv_uses_tensor_cores(const GemvParams& params) {
  if (!params.tensor_cores || params.m < 1 || params.m > kGemvMmaMaxRows) return false;
  if (params.epilogue == GemvEpilogue::kRopeScatter && params.rope.head_dim % 16 != 0) {
    return false;
  }
  return gemv_mma_smem_bytes(params) <= gemv_mma_max_smem_bytes(params.m);
}

std::int64_t gemv_mma_max_smem_bytes(std::int32_t m) {
  return m <= 1 ? kGemvMmaMaxSharedBytes
                : std::max<std::int64_t>(kGemvMmaMaxSharedBytes, max_smem_per_block_optin());
}

void launch_gemv_mma(const GemvParams& params, cudaStream_t stream) {
  if (wide_blocks(params)) {
    launch_warps<16>(params, stream);
  } else {
    launch_warps<8>(params, stream);
  }
}

}  // namespace cellm::cuda
