// Decode attention v2's staging of keys (attention_decode_v2.cu): the cells
// of a split's keys read from the sequence's table in windows of 512 into
// shared memory, and the K/V tiles copied by cp.async (or pulled into L2)
// from those cells, before or after the programmatic-launch wait.
//
// Thread-safety: device helpers; each thread touches its own entries and
// copies, and the caller places the barriers between them.
#pragma once

#include <cstdint>

#include "backend/cuda/kernels/attention.cuh"
#include "backend/cuda/kernels/attention_decode_v2_layout.cuh"
#include "backend/cuda/kernels/ptx_utils.cuh"

namespace cellm::cuda {
// Internal linkage, as when this lived in the .cu file: in a named namespace
// nvcc gave the kernel more registers (82 -> 86 at 64-wide heads).
namespace {

// This thread's entries of table window `w` (keys begin + w * kWindowKeys
// onwards): -1 past `end` or outside the pool, and -1 for now at and past
// `readable` (keys this step may still be writing: resolve_window fills them
// in after the wait). The loads stay in flight until store_window() needs
// their values. Table reads go through L2 only (__ldcg): a line read before
// the wait may hold entries the step writes, and must not be found in L1
// after it.
__device__ __forceinline__ void load_window(const AttentionParams& p, const std::int32_t* table,
                                            int begin, int end, int readable, int w,
                                            int (&entries)[kWindowPerThread]) {
#pragma unroll
  for (int j = 0; j < kWindowPerThread; ++j) {
    const int kpos = begin + w * kWindowKeys + j * kThreads + static_cast<int>(threadIdx.x);
    int cell = kpos < end && kpos < readable ? __ldcg(table + kpos) : -1;
    if (cell >= p.max_cells) cell = -1;
    entries[j] = cell;
  }
}

// After the wait: this thread's entries of window 0 in [settled, end), the
// keys the step's own rows wrote, go into shared memory. The row's own key
// comes from the step's cells, which need no table read.
__device__ __forceinline__ void resolve_window(const AttentionParams& p, const std::int32_t* table,
                                               int begin, int settled, int end, int pos,
                                               int own_cell, int* windows_s) {
#pragma unroll
  for (int j = 0; j < kWindowPerThread; ++j) {
    const int index = j * kThreads + static_cast<int>(threadIdx.x);
    const int kpos = begin + index;
    if (kpos < settled || kpos >= end) continue;
    int cell = kpos == pos && own_cell != kUnknownCell ? own_cell : __ldcg(table + kpos);
    if (cell < 0 || cell >= p.max_cells) cell = -1;
    windows_s[index] = cell;
  }
}

// Window w goes to buffer w % 2 of `windows_s`.
__device__ __forceinline__ void store_window(int* windows_s, int w,
                                             const int (&entries)[kWindowPerThread]) {
  int* buffer = windows_s + (w & 1) * kWindowKeys;
#pragma unroll
  for (int j = 0; j < kWindowPerThread; ++j) {
    buffer[j * kThreads + static_cast<int>(threadIdx.x)] = entries[j];
  }
}

// The cells of the keys this thread copies for tile `tile`, from its window.
template <int kMaxHd, bool kFp8 = false>
__device__ __forceinline__ void tile_cells(const int* windows_s, int tile, int key0,
                                           int (&cells)[V2Layout<kMaxHd, false, kFp8>::kCopies]) {
  using L = V2Layout<kMaxHd, false, kFp8>;
  const int* entries =
      windows_s + ((tile / kWindowTiles) & 1) * kWindowKeys + (tile % kWindowTiles) * kTileKeys;
#pragma unroll
  for (int i = 0; i < L::kCopies; ++i) cells[i] = entries[key0 + i * L::kKeyStep];
}

// Which keys of a tile issue_tile copies: all, or (around the wait) those
// written before this step or those written by it; see `settled` below.
enum class TileKeys { kAll, kSettled, kFresh };

// KvT: the pools' element, bf16 or (FP8 pools) fp8_e4m3, whose stages are
// [kTileKeys, kMaxHd] codes (V2Layout's kFp8).
template <int kMaxHd, TileKeys kKeys = TileKeys::kAll, bool kPacked = false, typename KvT = bf16>
__device__ __forceinline__ void issue_tile(const AttentionParams& p, int kv_head, KvT* k_stage,
                                           KvT* v_stage, int* flags, int key0, int chunk,
                                           const int* windows_s, int tile, int first_key,
                                           int settled, int end) {
  constexpr bool kFp8 = sizeof(KvT) == 1;
  using L = V2Layout<kMaxHd, kPacked, kFp8>;
  int cells[L::kCopies];
  tile_cells<kMaxHd, kFp8>(windows_s, tile, key0, cells);
  const int dim = chunk * L::kKvElems;
  const bool dim_ok = dim < p.head_dim;
  // The pools are read from the params at each copy, as before FP8 pools came:
  // hoisted, the bf16 kernels' registers moved (113 -> 114 packed at 128).
  const auto k_pool = [&] { return static_cast<const KvT*>(p.k_pool); };
  const auto v_pool = [&] { return static_cast<const KvT*>(p.v_pool); };
#pragma unroll
  for (int i = 0; i < L::kCopies; ++i) {
    const int key = key0 + i * L::kKeyStep;
    if constexpr (kKeys != TileKeys::kAll) {
      const int kpos = first_key + key;
      const bool fresh = kpos >= settled && kpos < end;
      if (fresh != (kKeys == TileKeys::kFresh)) continue;
    }
    const bool ok = cells[i] >= 0;
    const bool fill = ok && dim_ok;
    // A zero-filling copy reads nothing but still gets an in-bounds address.
    const std::int64_t offset =
        fill ? (static_cast<std::int64_t>(cells[i]) * p.num_kv_heads + kv_head) * p.head_dim + dim
             : 0;
    if constexpr (kFp8) {
      cp_async16(k_stage + key * kMaxHd + dim, k_pool() + offset, fill);
      cp_async16(v_stage + key * kMaxHd + dim, v_pool() + offset, fill);
    } else {
      cp_async16(k_stage + L::kv_index(key, dim), k_pool() + offset, fill);
      cp_async16(v_stage + L::kv_index(key, dim), v_pool() + offset, fill);
    }
    if (chunk == 0) flags[key] = ok ? 1 : 0;
  }
}

// Pulls the settled keys of a tile into L2 (one request per 128-byte line of
// each K and V row) so that its copies after the wait are L2 hits.
template <int kMaxHd, typename KvT = bf16>
__device__ __forceinline__ void prefetch_tile(const AttentionParams& p, int kv_head, int key0,
                                              int chunk, const int* windows_s, int tile,
                                              int first_key, int settled) {
  constexpr bool kFp8 = sizeof(KvT) == 1;
  using L = V2Layout<kMaxHd, false, kFp8>;
  const int dim = chunk * L::kKvElems;
  // One request per 128 bytes: 64 bf16 or 128 codes.
  if (dim % (128 / static_cast<int>(sizeof(KvT))) != 0 || dim >= p.head_dim) return;
  int cells[L::kCopies];
  tile_cells<kMaxHd, kFp8>(windows_s, tile, key0, cells);
#pragma unroll
  for (int i = 0; i < L::kCopies; ++i) {
    const int kpos = first_key + key0 + i * L::kKeyStep;
    if (kpos >= settled || cells[i] < 0) continue;
    const std::int64_t offset =
        (static_cast<std::int64_t>(cells[i]) * p.num_kv_heads + kv_head) * p.head_dim + dim;
    prefetch_l2(static_cast<const KvT*>(p.k_pool) + offset);
    prefetch_l2(static_cast<const KvT*>(p.v_pool) + offset);
  }
}

}  // namespace
}  // namespace cellm::cuda
