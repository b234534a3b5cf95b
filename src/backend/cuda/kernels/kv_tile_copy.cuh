// Device helpers shared by the attention kernels that stage K/V tiles in
// shared memory with cp.async (decode v2, prefill v2): each thread copies
// 16-byte pieces of a few keys of a tile. `Layout` supplies kCopies (keys
// per thread per tile), kKeyStep (key distance between a thread's copies) and
// kLd (shared row stride in bf16).
// Thread-safety: device code; every thread of a block calls them together.
#pragma once

#include <cstdint>

#include "backend/cuda/kernels/attention.cuh"
#include "backend/cuda/kernels/ptx_utils.cuh"

namespace cellm::cuda {

// The cells of the keys this thread copies for the tile at `tile_begin`;
// -1 for keys at or past `end` and for entries outside the pool.
template <class Layout>
__device__ __forceinline__ void fetch_tile_cells(const AttentionParams& p,
                                                 const std::int32_t* table, int tile_begin, int end,
                                                 int key0, int (&cells)[Layout::kCopies]) {
#pragma unroll
  for (int i = 0; i < Layout::kCopies; ++i) {
    const int kpos = tile_begin + key0 + i * Layout::kKeyStep;
    int cell = kpos < end ? table[kpos] : -1;
    if (cell >= p.max_cells) cell = -1;
    cells[i] = cell;
  }
}

// Starts the copies of this thread's pieces (dims chunk*8 .. +8) of K and V;
// missing keys and dims past head_dim are zero-filled, and flags[key] says
// whether the key exists.
template <class Layout>
__device__ __forceinline__ void issue_kv_tile(const AttentionParams& p, int kv_head, bf16* k_stage,
                                              bf16* v_stage, int* flags, int key0, int chunk,
                                              const int (&cells)[Layout::kCopies]) {
  const int dim = chunk * 8;
  const bool dim_ok = dim < p.head_dim;
#pragma unroll
  for (int i = 0; i < Layout::kCopies; ++i) {
    const int key = key0 + i * Layout::kKeyStep;
    const bool ok = cells[i] >= 0;
    const bool fill = ok && dim_ok;
    // A zero-filling copy reads nothing but still gets an in-bounds address.
    const std::int64_t offset =
        fill ? (static_cast<std::int64_t>(cells[i]) * p.num_kv_heads + kv_head) * p.head_dim + dim
             : 0;
    cp_async16(k_stage + key * Layout::kLd + dim, p.k_pool + offset, fill);
    cp_async16(v_stage + key * Layout::kLd + dim, p.v_pool + offset, fill);
    if (chunk == 0) flags[key] = ok ? 1 : 0;
  }
}

}  // namespace cellm::cuda
