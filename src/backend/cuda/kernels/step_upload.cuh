// Step upload: a captured step's first kernel. It copies the step's int32
// arrays (tokens, positions, slots, cells, selector, ...) from page-locked
// host memory, read through the buffer's device mapping, into their device
// copies. A copy-engine node in that place cost more than this kernel's one
// PCIe round trip: the forward's first kernel had to wait for the hand-off
// between engines (H200, 1B batch 1: 0.878-0.879 -> 0.869-0.870 ms/step,
// bench/results/README.md, session 17). Wide eager steps keep the copy
// engine, which moves large arrays faster than a kernel's reads.
//
// Thread-safety: launch_* are reentrant; params are plain values. The host
// buffer must stay as written until the kernel has run.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

// Status is only declared here: .cu files must not pull fmt through nvcc
// (validate() is defined in the family's .cpp).
namespace cellm {
class Status;
}  // namespace cellm

namespace cellm::cuda {

struct StepUploadParams {
  // [arrays, pitch] each; src is the device mapping of page-locked host memory.
  const std::int32_t* src = nullptr;
  std::int32_t* dst = nullptr;
  std::int32_t pitch = 0;   // entries from one array to the next
  std::int32_t width = 0;   // leading entries of each array to copy
  std::int32_t arrays = 0;  // how many arrays

  Status validate() const;
};

// Lets the next kernel launch at once (programmatic dependent launch): it
// must wait on this one (griddep_wait) before it reads the arrays.
void launch_step_upload(const StepUploadParams& params, cudaStream_t stream);

}  // namespace cellm::cuda
