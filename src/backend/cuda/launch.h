// The single kernel-launch path: launch(kernel, LaunchConfig, args...) wraps
// cudaLaunchKernelEx, raises a kernel's dynamic shared-memory limit the first
// time it needs more than the default 48 KiB, and checks the launch. No raw
// <<<>>> launches exist outside this header.
//
// Thread-safety: launch() is safe from any thread; the shared-memory limit
// registry is guarded by a mutex (it is touched once per kernel).
#pragma once

#include <cstddef>
#include <source_location>
#include <utility>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"

namespace cellm::cuda {

struct LaunchConfig {
  dim3 grid;
  dim3 block;
  std::size_t smem_bytes = 0;
  cudaStream_t stream = nullptr;
  // Programmatic dependent launch: lets this kernel start while the previous
  // one finishes. Only for kernels that call griddep_wait()
  // (device_utils.cuh) in every block before touching shared data.
  bool pdl = false;
  // Thread block clusters of (1, 1, cluster_z) blocks (sm_90); 1 = none. The
  // grid's z must be a multiple, and the kernel may then share shared memory
  // across the cluster's blocks.
  unsigned cluster_z = 1;
};

// Raises `kernel`'s dynamic shared-memory limit to at least `bytes`, once.
void ensure_dynamic_smem(const void* kernel, std::size_t bytes);

// The device's multiprocessor count (cached per device).
int multiprocessor_count();

// The current device's opt-in shared memory per block and its compute
// capability's major version (cached per device).
int max_smem_per_block_optin();
int compute_capability_major();

// Whether the current device launches thread block clusters (sm_90 on;
// cached per device).
bool cluster_launch_supported();

// Dynamic shared memory per block that leaves no room on a multiprocessor for
// a second block asking as much (the current device; at most the opt-in limit).
std::size_t one_block_per_sm_smem();

// Blocks asking `smem_bytes` of dynamic shared memory each that fit on one
// multiprocessor by shared memory alone (at least 1; the current device).
// Registers and threads may allow fewer: callers use it for kernels they
// know are bound by shared memory.
int blocks_per_sm_by_smem(std::size_t smem_bytes);

template <typename... KernelArgs, typename... Args>
void launch(void (*kernel)(KernelArgs...), const LaunchConfig& config, Args&&... args) {
  if (config.grid.x == 0 || config.grid.y == 0 || config.grid.z == 0) {
    return;  // an empty problem is not an error
  }
  if (config.smem_bytes > 48 * 1024) {
    ensure_dynamic_smem(reinterpret_cast<const void*>(kernel), config.smem_bytes);
  }
  cudaLaunchAttribute attributes[2];
  cudaLaunchConfig_t raw{};
  raw.gridDim = config.grid;
  raw.blockDim = config.block;
  raw.dynamicSmemBytes = config.smem_bytes;
  raw.stream = config.stream;
  raw.numAttrs = 0;
  raw.attrs = attributes;
  if (config.pdl) {
    cudaLaunchAttribute& pdl = attributes[raw.numAttrs++];
    pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pdl.val.programmaticStreamSerializationAllowed = 1;
  }
  if (config.cluster_z > 1) {
    cudaLaunchAttribute& cluster = attributes[raw.numAttrs++];
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = 1;
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = config.cluster_z;
  }
  CELLM_CUDA_CHECK(cudaLaunchKernelEx(&raw, kernel, std::forward<Args>(args)...));
  check_launch("cudaLaunchKernelEx");
}

inline unsigned ceil_div(long long a, long long b) {
  return static_cast<unsigned>((a + b - 1) / b);
}

}  // namespace cellm::cuda
