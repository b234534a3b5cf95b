// The one CUDA error path: CELLM_CUDA_CHECK(call) stringifies the call and
// forwards a failure to a [[noreturn]] handler that reports the source
// location. A CUDA runtime error here means the device or the program is in
// an unknown state, so it aborts rather than returning a Status.
//
// Thread-safety: safe from any thread; the debug-sync switch is an atomic.
#pragma once

#include <source_location>

#include <cuda_runtime.h>

namespace cellm::cuda {

[[noreturn]] void cuda_failed(cudaError_t error, const char* expr,
                              std::source_location where = std::source_location::current());

// Checks the last launch error; with debug sync on (and the stream not
// capturing) also synchronises `stream` so a fault is blamed on its kernel.
void check_launch(cudaStream_t stream, const char* kernel_name,
                  std::source_location where = std::source_location::current());

// A debugging aid: off, and nothing in the product turns it on since the
// CELLM_CUDA_DEBUG_SYNC variable went (kept for a debugger or a local test).
void set_debug_sync(bool on);
bool debug_sync();

}  // namespace cellm::cuda

#define CELLM_CUDA_CHECK(call)                            \
  do {                                                    \
    const cudaError_t cellm_cuda_err_ = (call);           \
    if (cellm_cuda_err_ != cudaSuccess) [[unlikely]] {    \
      ::cellm::cuda::cuda_failed(cellm_cuda_err_, #call); \
    }                                                     \
  } while (false)
