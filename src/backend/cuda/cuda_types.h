// Element types shared by host and device code of the CUDA backend (kernel
// params headers include this; device-only helpers live in device_utils.cuh).
//
// Thread-safety: type aliases only.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_bf16.h>

namespace cellm::cuda {

using bf16 = __nv_bfloat16;

// The element type of the K/V pools (`--kv-dtype`). kFp8: one OCP E4M3FN code
// a value, with one fixed scale of 1 for every model: the pool holds
// e4m3(x) of the bf16 value x the bf16 pool would hold (rounded to nearest
// even; beyond E4M3's +-448, infinities included, saturated to +-448; NaN
// stays NaN), and attention reads it back as that E4M3 value, which bf16
// holds exactly. Real models' K and V stay well inside +-448; the price is
// E4M3's 3 mantissa bits (a relative error up to 2^-4 a value) for half the
// bytes, so a pool of the same memory holds twice the cells. Per-head scales
// would need a calibration pass and a scale read beside every tile; none is
// kept.
enum class KvDtype : std::uint8_t { kBF16, kFp8 };

// Bytes of one K or V element in a pool of `dtype`.
constexpr std::size_t kv_dtype_bytes(KvDtype dtype) {
  return dtype == KvDtype::kFp8 ? 1 : 2;
}

// The storage of one E4M3 code.
using fp8_e4m3 = std::uint8_t;

}  // namespace cellm::cuda
