#include "backend/cuda/launch.h"

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

int multiprocessor_count() {
  static std::mutex mutex;
  static std::unordered_map<int, int> counts;
  int device = 0;
  CELLM_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mutex);
  auto it = counts.find(device);
  if (it != counts.end()) {
    return it->second;
  }
  int count = 0;
  CELLM_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  counts.emplace(device, count);
  return count;
}

}  // namespace cellm::cuda
