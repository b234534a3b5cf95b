#include "backend/cuda/launch.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>

namespace cellm::cuda {

void ensure_dynamic_smem(const void* kernel, std::size_t bytes) {
  static std::mutex mutex;
  static std::unordered_map<const void*, std::size_t> raised;
  std::lock_guard<std::mutex> lock(mutex);
  std::size_t& current = raised[kernel];
  if (current >= bytes) {
    return;
  }
  CELLM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(bytes)));
  current = bytes;
}

namespace {

// A device attribute of the current device, read once per device.
int cached_attribute(cudaDeviceAttr attribute) {
  static std::mutex mutex;
  static std::unordered_map<long long, int> values;
  int device = 0;
  CELLM_CUDA_CHECK(cudaGetDevice(&device));
  const long long key = static_cast<long long>(device) << 32 | static_cast<int>(attribute);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = values.find(key);
  if (it != values.end()) {
    return it->second;
  }
  int value = 0;
  CELLM_CUDA_CHECK(cudaDeviceGetAttribute(&value, attribute, device));
  values.emplace(key, value);
  return value;
}

}  // namespace

int multiprocessor_count() {
  return cached_attribute(cudaDevAttrMultiProcessorCount);
}

int max_smem_per_block_optin() {
  return cached_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin);
}

int compute_capability_major() {
  return cached_attribute(cudaDevAttrComputeCapabilityMajor);
}

bool cluster_launch_supported() {
  return cached_attribute(cudaDevAttrClusterLaunch) != 0;
}

std::size_t one_block_per_sm_smem() {
  // Two blocks fit while 2 * (bytes + the per-block reservation) <= the SM's.
  const auto per_sm =
      static_cast<std::size_t>(cached_attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor));
  const auto reserved =
      static_cast<std::size_t>(cached_attribute(cudaDevAttrReservedSharedMemoryPerBlock));
  const std::size_t bytes = (per_sm / 2 - reserved + 16 + 15) / 16 * 16;
  return std::min(bytes, static_cast<std::size_t>(max_smem_per_block_optin()));
}

int blocks_per_sm_by_smem(std::size_t smem_bytes) {
  const auto per_sm =
      static_cast<std::size_t>(cached_attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor));
  const auto reserved =
      static_cast<std::size_t>(cached_attribute(cudaDevAttrReservedSharedMemoryPerBlock));
  return std::max(1, static_cast<int>(per_sm / (smem_bytes + reserved)));
}

}  // namespace cellm::cuda
