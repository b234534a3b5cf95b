#include "backend/cuda/kernels/kernel_choice.h"

#include <iterator>

#include <fmt/format.h>

#include "backend/cuda/kernels/attention.cuh"

namespace cellm::cuda {
namespace {

std::string describe_mma(std::uint32_t bits) {
  if (bits == 0) return "0";
  if (bits == kMmaAll) return "1";
  std::string out;
  for (std::size_t i = 0; i < std::size(kGemvMmaProjections); ++i) {
    if ((bits & (1u << i)) == 0) continue;
    if (!out.empty()) out += ',';
    out += kGemvMmaProjections[i];
  }
  return out;
}

}  // namespace

// kernel_choice.h stays free of CUDA headers (the app includes it), so its
// constants are checked against the kernels' limits here.
static_assert(valid_attention_cluster(kDecodeCluster) && kDecodeCluster <= kAttentionMaxCluster);

std::string describe(const KernelChoice& choice) {
  return fmt::format("gemv_max_rows={} mma={}", choice.gemv_max_rows,
                     describe_mma(choice.gemv_mma));
}

}  // namespace cellm::cuda
