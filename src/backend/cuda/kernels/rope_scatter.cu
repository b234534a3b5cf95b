#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/kv_fp8.cuh"
#include "backend/cuda/kernels/kv_write.cuh"
#include "backend/cuda/kernels/rope_scatter.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

constexpr int kThreads = 64;  // small blocks: more of them at batch 1

// Per token, items in this order: q rotations (num_heads x half/8), k pieces
// (num_kv_heads x (half/8 rotations + pass-through chunks)), v chunks
// (num_kv_heads x head_dim/8).
struct ItemCounts {
  int half8, pass8, hd8, q_items, k_per_head, k_items, v_items, total;
};

__host__ __device__ inline ItemCounts item_counts(const RopeScatterParams& p) {
  ItemCounts c{};
  c.half8 = p.rotary_dim / 16;
  c.pass8 = (p.head_dim - p.rotary_dim) / 8;
  c.hd8 = p.head_dim / 8;
  c.q_items = p.num_heads * c.half8;
  c.k_per_head = c.half8 + c.pass8;
  c.k_items = p.num_kv_heads * c.k_per_head;
  c.v_items = p.num_kv_heads * c.hd8;
  c.total = c.q_items + c.k_items + c.v_items;
  return c;
}

// Eight values rounded to bf16 at `dst`, as E4M3 codes of those where the pool is FP8.
__device__ __forceinline__ void store8_to(bf16* dst, const float (&in)[8]) {
  store8(dst, in);
}
__device__ __forceinline__ void store8_to(fp8_e4m3* dst, const float (&in)[8]) {
  store8_e4m3(dst, in);
}

// Rotates pairs (i0 + e, i0 + e + half), e < 8, of `src` into `dst`.
template <typename T>
__device__ __forceinline__ void rotate8(const bf16* src, T* dst, int i0, int half, float position,
                                        const float* inv_freq) {
  float x1[8];
  float x2[8];
  load8(src + i0, x1);
  load8(src + i0 + half, x2);
  float y1[8];
  float y2[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    rope_rotate(x1[e], x2[e], position, inv_freq[i0 + e], &y1[e], &y2[e]);
  }
  store8_to(dst + i0, y1);
  store8_to(dst + i0 + half, y2);
}

// Eight bf16 of `src` copied to `dst` (bytes), or encoded there as E4M3.
__device__ __forceinline__ void copy8_to(const bf16* src, bf16* dst) {
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
}
__device__ __forceinline__ void copy8_to(const bf16* src, fp8_e4m3* dst) {
  *reinterpret_cast<uint2*>(dst) = encode_e4m3x8(*reinterpret_cast<const uint4*>(src));
}

// KvT: the pools' element (bf16, or fp8_e4m3 for FP8 pools).
template <typename KvT>
__global__ void __launch_bounds__(kThreads)
    rope_scatter_kernel(const __grid_constant__ RopeScatterParams p) {
  griddep_enter();
  const std::int64_t token = blockIdx.x;
  const int item = blockIdx.y * kThreads + threadIdx.x;
  const ItemCounts c = item_counts(p);
  const std::int32_t cell = p.cells[token];
  if (item == 0 && p.cell_table != nullptr) {
    record_cell(p.cell_table, p.max_seqs, p.table_stride, p.max_cells, p.seq_slots[token],
                p.positions[token], cell);
  }
  if (item >= c.total) return;
  const int half = p.rotary_dim / 2;
  const float position = static_cast<float>(p.positions[token]);
  if (item < c.q_items) {
    const int head = item / c.half8;
    bf16* vec = p.q + token * p.q_stride + static_cast<std::int64_t>(head) * p.head_dim;
    rotate8(vec, vec, (item % c.half8) * 8, half, position, p.inv_freq);
    return;
  }
  if (cell < 0 || cell >= p.max_cells) return;
  const std::int64_t row = static_cast<std::int64_t>(cell) * p.num_kv_heads;
  if (item < c.q_items + c.k_items) {
    const int k_item = item - c.q_items;
    const int head = k_item / c.k_per_head;
    const int piece = k_item % c.k_per_head;
    const bf16* src = p.k + token * p.k_stride + static_cast<std::int64_t>(head) * p.head_dim;
    KvT* dst = static_cast<KvT*>(p.k_pool) + (row + head) * p.head_dim;
    if (piece < c.half8) {
      rotate8(src, dst, piece * 8, half, position, p.inv_freq);
    } else {
      const int dim = p.rotary_dim + (piece - c.half8) * 8;
      copy8_to(src + dim, dst + dim);
    }
    return;
  }
  const int v_item = item - c.q_items - c.k_items;
  const int head = v_item / c.hd8;
  const int dim = (v_item % c.hd8) * 8;
  const bf16* src = p.v + token * p.v_stride + static_cast<std::int64_t>(head) * p.head_dim + dim;
  copy8_to(src, static_cast<KvT*>(p.v_pool) + (row + head) * p.head_dim + dim);
}

}  // namespace

void launch_rope_scatter(const RopeScatterParams& params, cudaStream_t stream) {
  const ItemCounts c = item_counts(params);
  const LaunchConfig config{dim3(params.num_tokens, ceil_div(c.total, kThreads)), dim3(kThreads), 0,
                            stream, params.pdl};
  if (params.kv_dtype == KvDtype::kFp8) {
    launch(rope_scatter_kernel<fp8_e4m3>, config, params);
  } else {
    launch(rope_scatter_kernel<bf16>, config, params);
  }
}

}  // namespace cellm::cuda
