// Logit soft cap in place: x = cap * tanh(x / cap) over float32 logits
// (Gemma 2 style final_logit_softcapping).
//
// Thread-safety: launch_* are reentrant; params are plain values.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

// Status is only declared here: .cu files must not pull fmt through nvcc
// (validate() is defined in the family's .cpp).
namespace cellm {
class Status;
}  // namespace cellm

namespace cellm::cuda {

struct SoftCapParams {
  float* logits = nullptr;  // [count]
  std::int64_t count = 0;
  float cap = 0.0f;  // > 0

  // Programmatic dependent launch (launch.h): the kernel waits on the previous one itself.
  bool pdl = false;

  Status validate() const;
};

void launch_soft_cap(const SoftCapParams& params, cudaStream_t stream);

}  // namespace cellm::cuda
