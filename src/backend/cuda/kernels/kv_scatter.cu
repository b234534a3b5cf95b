#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/kv_fp8.cuh"
#include "backend/cuda/kernels/kv_scatter.cuh"
#include "backend/cuda/kernels/kv_write.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

constexpr int kThreads = 128;

// bf16 pools (KvT bf16): moves bytes only, 16 at a time. FP8 pools (KvT
// fp8_e4m3): 16 bytes of bf16 in, their 8 E4M3 codes out.
template <typename KvT>
__global__ void __launch_bounds__(kThreads)
    kv_scatter_kernel(const __grid_constant__ KvScatterParams p) {
  const std::int64_t token = blockIdx.x;
  const std::int32_t cell = p.cells[token];
  if (p.cell_table != nullptr && threadIdx.x == 0) {
    record_cell(p.cell_table, p.max_seqs, p.table_stride, p.max_cells, p.seq_slots[token],
                p.positions[token], cell);
  }
  if (cell < 0 || cell >= p.max_cells) return;
  const int row_elems = p.num_kv_heads * p.head_dim;
  const std::int64_t dst = static_cast<std::int64_t>(cell) * row_elems;
  const bf16* k_src = p.k + token * p.k_stride;
  const bf16* v_src = p.v + token * p.v_stride;
  KvT* k_pool = static_cast<KvT*>(p.k_pool);
  KvT* v_pool = static_cast<KvT*>(p.v_pool);
  for (int c = threadIdx.x * 8; c < row_elems; c += kThreads * 8) {
    if constexpr (sizeof(KvT) == 1) {
      *reinterpret_cast<uint2*>(k_pool + dst + c) =
          encode_e4m3x8(*reinterpret_cast<const uint4*>(k_src + c));
      *reinterpret_cast<uint2*>(v_pool + dst + c) =
          encode_e4m3x8(*reinterpret_cast<const uint4*>(v_src + c));
    } else {
      *reinterpret_cast<uint4*>(k_pool + dst + c) = *reinterpret_cast<const uint4*>(k_src + c);
      *reinterpret_cast<uint4*>(v_pool + dst + c) = *reinterpret_cast<const uint4*>(v_src + c);
    }
  }
}

}  // namespace

void launch_kv_scatter(const KvScatterParams& params, cudaStream_t stream) {
  const LaunchConfig config{dim3(params.num_tokens), dim3(kThreads), 0, stream};
  if (params.kv_dtype == KvDtype::kFp8) {
    launch(kv_scatter_kernel<fp8_e4m3>, config, params);
  } else {
    launch(kv_scatter_kernel<bf16>, config, params);
  }
}

}  // namespace cellm::cuda
