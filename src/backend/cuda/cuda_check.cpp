#include "backend/cuda/cuda_check.h"

#include <cstdio>
#include <cstdlib>

namespace cellm::cuda {

void cuda_failed(cudaError_t error, const char* expr, std::source_location where) {
  std::fprintf(stderr, "%s:%u: CUDA error %s (%s) in %s [%s]\n", where.file_name(),
               static_cast<unsigned>(where.line()), cudaGetErrorName(error),
               cudaGetErrorString(error), expr, where.function_name());
  std::fflush(stderr);
  std::abort();
}

void check_launch(const char* kernel_name, std::source_location where) {
  const cudaError_t launch_error = cudaGetLastError();
  if (launch_error != cudaSuccess) {
    cuda_failed(launch_error, kernel_name, where);
  }
}

}  // namespace cellm::cuda
