// The one CUDA error path: CELLM_CUDA_CHECK(call) stringifies the call and
// forwards a failure to a [[noreturn]] handler that reports the source
// location. A CUDA runtime error here means the device or the program is in
// an unknown state, so it aborts rather than returning a Status.
//
// Thread-safety: safe from any thread (no state).
#pragma once

#include <source_location>

#include <cuda_runtime.h>

namespace cellm::cuda {

[[noreturn]] void cuda_failed(cudaError_t error, const char* expr,
                              std::source_location where = std::source_location::current());

// Checks the last launch error (a bad configuration, not a fault in the
// kernel: that surfaces at the stream's next synchronisation).
void check_launch(const char* kernel_name,
                  std::source_location where = std::source_location::current());

}  // namespace cellm::cuda

#define CELLM_CUDA_CHECK(call)                            \
  do {                                                    \
    const cudaError_t cellm_cuda_err_ = (call);           \
    if (cellm_cuda_err_ != cudaSuccess) [[unlikely]] {    \
      ::cellm::cuda::cuda_failed(cellm_cuda_err_, #call); \
    }                                                     \
  } while (false)
