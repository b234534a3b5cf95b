// KV scatter: writes this step's K and V rows into their cells of the pools
// [max_cells, kv_heads, head_dim] (bf16, or E4M3 codes of the bf16 rows as
// kv_fp8.cuh encodes them, per `kv_dtype`) and, when `cell_table` is given, the
// tokens' entries of their sequences' cell tables (table[slot][position] =
// cell), so a captured forward keeps the tables current for any mix of
// sessions. Padding rows carry cell 0 (the scratch cell) and slot -1: their
// K/V land in cell 0 and no table entry is written. A cell outside the pool
// or a position outside the table is skipped (the host validates both).
//
// Thread-safety: launch_* are reentrant; params are plain values.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_types.h"
// Status is only declared here: .cu files must not pull fmt through nvcc
// (validate() is defined in the family's .cpp).
namespace cellm {
class Status;
}  // namespace cellm

namespace cellm::cuda {

struct KvScatterParams {
  const bf16* k = nullptr;                  // [num_tokens, k_stride], kv heads first
  const bf16* v = nullptr;                  // [num_tokens, v_stride], kv heads first
  void* k_pool = nullptr;                   // [max_cells, num_kv_heads, head_dim] of kv_dtype
  void* v_pool = nullptr;                   // [max_cells, num_kv_heads, head_dim] of kv_dtype
  const std::int32_t* cells = nullptr;      // [num_tokens]
  const std::int32_t* seq_slots = nullptr;  // [num_tokens]; < 0 = padding (needed with cell_table)
  const std::int32_t* positions = nullptr;  // [num_tokens] (needed with cell_table)
  std::int32_t* cell_table = nullptr;       // [max_seqs, table_stride] or null
  std::int64_t k_stride = 0;
  std::int64_t v_stride = 0;
  std::int32_t num_tokens = 0;
  std::int32_t num_kv_heads = 0;
  std::int32_t head_dim = 0;  // multiple of 8
  std::int32_t max_cells = 0;
  std::int32_t max_seqs = 0;
  std::int32_t table_stride = 0;  // max positions per sequence
  KvDtype kv_dtype = KvDtype::kBF16;

  Status validate() const;
};

void launch_kv_scatter(const KvScatterParams& params, cudaStream_t stream);

}  // namespace cellm::cuda
