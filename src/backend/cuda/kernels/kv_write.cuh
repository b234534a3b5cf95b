// Device helpers of the kernels that write a step's keys and values:
// kv_scatter, rope_scatter and the q/k/v GEMV's rope epilogue. One rule for
// the cell table and one rotation, so the three cannot drift apart.
//
// Thread-safety: device code; each call touches only what it names.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace cellm::cuda {

// table[slot][position] = cell, when the slot, position and cell are all in
// range (padding rows carry slot -1 and write nothing; the host validates
// the rest, so a skip here is a guard, not a path).
__device__ __forceinline__ void record_cell(std::int32_t* table, std::int32_t max_seqs,
                                            std::int32_t table_stride, std::int32_t max_cells,
                                            std::int32_t slot, std::int32_t position,
                                            std::int32_t cell) {
  if (slot >= 0 && slot < max_seqs && position >= 0 && position < table_stride && cell >= 0 &&
      cell < max_cells) {
    table[static_cast<std::int64_t>(slot) * table_stride + position] = cell;
  }
}

// The rotate_half pair (x1, x2) at angle position * inv_freq.
__device__ __forceinline__ void rope_rotate(float x1, float x2, float position, float inv_freq,
                                            float* y1, float* y2) {
  float sn;
  float cs;
  // Full-precision sincosf: angles reach 1e5 radians at long contexts.
  sincosf(position * inv_freq, &sn, &cs);
  *y1 = x1 * cs - x2 * sn;
  *y2 = x2 * cs + x1 * sn;
}

}  // namespace cellm::cuda
