// Device-side fills used to make random weights without a host copy.
//
// Thread-safety: launches on the given stream.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_types.h"

namespace cellm::cuda {

// data[i] = uniform(-bound, bound) from a counter-based hash of (seed, i).
void launch_fill_uniform(bf16* data, std::size_t count, float bound, std::uint64_t seed,
                         cudaStream_t stream);
// codes[i] = the E4M3 code nearest uniform(-448, 448) from the same hash
// (random FP8 weights: scaled by the rows' scales, uniform with any std).
void launch_fill_fp8(std::uint8_t* codes, std::size_t count, std::uint64_t seed,
                     cudaStream_t stream);
// data[i] = value.
void launch_fill_constant(bf16* data, std::size_t count, float value, cudaStream_t stream);

}  // namespace cellm::cuda
