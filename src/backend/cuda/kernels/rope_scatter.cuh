// Fused rotary embedding + KV scatter: one launch instead of rope then
// kv_scatter. q is rotated in place (Hugging Face rotate_half layout, as
// rope.cuh); k is rotated on its way into its cell of k_pool and v is copied
// into v_pool (FP8 pools: both as E4M3 codes of the bf16 values a bf16 pool
// would get, kv_fp8.cuh), with the same cell/table rules as kv_scatter.cuh (padding rows
// write the scratch cell, cells outside the pool are skipped, the table entry
// is written when `cell_table` is given). The k rows of the activation buffer
// are left unrotated: attention reads K from the pool only.
// Work is cut into 8-pair (16-byte) pieces spread over many blocks, so a
// single token still fills several multiprocessors.
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

struct RopeScatterParams {
  bf16* q = nullptr;                        // [num_tokens, q_stride], heads first; rotated in place
  const bf16* k = nullptr;                  // [num_tokens, k_stride], kv heads first
  const bf16* v = nullptr;                  // [num_tokens, v_stride], kv heads first
  void* k_pool = nullptr;                   // [max_cells, num_kv_heads, head_dim] of kv_dtype
  void* v_pool = nullptr;                   // [max_cells, num_kv_heads, head_dim] of kv_dtype
  const std::int32_t* cells = nullptr;      // [num_tokens]
  const std::int32_t* seq_slots = nullptr;  // [num_tokens]; < 0 = padding
  const std::int32_t* positions = nullptr;  // [num_tokens]
  std::int32_t* cell_table = nullptr;       // [max_seqs, table_stride] or null
  const float* inv_freq = nullptr;          // [rotary_dim / 2]
  std::int64_t q_stride = 0;
  std::int64_t k_stride = 0;
  std::int64_t v_stride = 0;
  std::int32_t num_tokens = 0;
  std::int32_t num_heads = 0;
  std::int32_t num_kv_heads = 0;
  std::int32_t head_dim = 0;    // multiple of 8
  std::int32_t rotary_dim = 0;  // multiple of 16, <= head_dim
  std::int32_t max_cells = 0;
  std::int32_t max_seqs = 0;
  std::int32_t table_stride = 0;
  KvDtype kv_dtype = KvDtype::kBF16;

  // Programmatic dependent launch (launch.h): the kernel waits on the previous one itself.
  bool pdl = false;

  Status validate() const;
};

// Whether the fused kernel takes this geometry (else run rope + kv_scatter).
bool rope_scatter_supported(std::int32_t head_dim, std::int32_t rotary_dim);

void launch_rope_scatter(const RopeScatterParams& params, cudaStream_t stream);

}  // namespace cellm::cuda
