#include "backend/cuda/cuda_check.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace cellm::cuda {
namespace {
std::atomic<bool> g_debug_sync{false};
}  // namespace

void cuda_failed(cudaError_t error, const char* expr, std::source_location where) {
  std::fprintf(stderr, "%s:%u: CUDA error %s (%s) in %s [%s]\n", where.file_name(),
               static_cast<unsigned>(where.line()), cudaGetErrorName(error),
               cudaGetErrorString(error), expr, where.function_name());
  std::fflush(stderr);
  std::abort();
}

void check_launch(cudaStream_t stream, const char* kernel_name, std::source_location where) {
  const cudaError_t launch_error = cudaGetLastError();
  if (launch_error != cudaSuccess) {
    cuda_failed(launch_error, kernel_name, where);
  }
  if (!g_debug_sync.load(std::memory_order_relaxed)) {
    return;
  }
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  const cudaError_t query = cudaStreamIsCapturing(stream, &capture);
  if (query != cudaSuccess) {
    cuda_failed(query, "cudaStreamIsCapturing", where);
  }
  if (capture == cudaStreamCaptureStatusNone) {
    const cudaError_t sync_error = cudaStreamSynchronize(stream);
    if (sync_error != cudaSuccess) {
      cuda_failed(sync_error, kernel_name, where);
    }
  }
}

void set_debug_sync(bool on) {
  g_debug_sync.store(on, std::memory_order_relaxed);
}
bool debug_sync() {
  return g_debug_sync.load(std::memory_order_relaxed);
}

}  // namespace cellm::cuda
