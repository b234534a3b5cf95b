// Element types shared by host and device code of the CUDA backend (kernel
// params headers include this; device-only helpers live in device_utils.cuh).
//
// Thread-safety: type aliases only.
#pragma once

#include <cuda_bf16.h>

namespace cellm::cuda {

using bf16 = __nv_bfloat16;

}  // namespace cellm::cuda
