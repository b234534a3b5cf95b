// Measures the device's own ceilings for rooflines, in the same run as the
// benchmark: device-to-device copy bandwidth (bytes read + written per
// second) and the bf16 GEMM rate through cuBLASLt. Timed with CUDA events
// after warm-up, median of repetitions.
//
// Thread-safety: call from one thread; allocates and frees its own buffers.
#pragma once

#include <string>

#include "cellm/status.h"

namespace cellm::cuda {

struct DeviceCeilings {
  std::string name;             // e.g. "NVIDIA H200"
  double copy_bytes_per_s = 0;  // read + write
  double gemm_flops_per_s = 0;  // bf16, fp32 accumulate, 8192^3
  double memory_bytes = 0;      // total device memory
};

Result<DeviceCeilings> measure_device_ceilings();

// The current device's name, without measuring anything.
Result<std::string> device_name();

}  // namespace cellm::cuda
