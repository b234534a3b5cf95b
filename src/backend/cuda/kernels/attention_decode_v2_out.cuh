// Decode v2's fused o projection (AttentionParams::o_weight), for one-token
// steps: the cluster of a kv head merges its splits into every block, each
// block multiplies the merged heads by its rows of those heads' o columns,
// and the last kv head to finish a slice of rows adds the slice's partials
// into the residual stream.
//
// Why: at batch 1 the o GEMV is a small projection (1B: 8.4 MB, 4.1 us a
// layer plus a 0.9 us gap on the H200) that starts only when the attention
// has finished, so its weights are requested late and stream at half the
// copy bandwidth, and it pays a launch and a gap. Here every block copies its
// slice of o into shared memory while the cluster merges, and the projection
// itself is a few tensor-core products out of shared memory.
//
// Status: correct (kernel and program tests) but slower, so
// CELLM_DECODE_FUSED_O is off by default. On the H200, 1B batch 1 ran 0.972
// against 0.949-0.953 ms/step. The kernel's 64 blocks (8 kv heads x 8
// splits) are the only SMs reading o, and one SM pulls 20-30 GB/s: the
// block's 128 KiB landed 4-8 us after the key loop, well after the merge,
// where the o GEMV spreads the same 8.4 MB over every SM. A version would
// need o's rows spread over all the SMs (16-block clusters, or blocks that
// only project) to gain (bench/results/README.md, session 13).
//
// Thread-safety: device helpers; every block of the cluster must call
// cluster_merge_all (two cluster barriers), and every thread of a block
// issue_o_weights (with no other cp.async group pending that it waits for
// later) and o_projection.
#pragma once

#include <cooperative_groups.h>
#include <cstddef>
#include <cstdint>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/attention.cuh"
#include "backend/cuda/kernels/attention_decode_v2_layout.cuh"
#include "backend/cuda/kernels/attention_decode_v2_merge.cuh"
#include "backend/cuda/kernels/kernel_trace.cuh"
#include "backend/cuda/kernels/ptx_utils.cuh"

namespace cellm::cuda {
// Internal linkage, like the kernel's other helpers.
namespace {

// The fused projection's shared memory, after the attention's own: the
// block's rows of the kv head's o columns (each row padded by 16 bytes, so
// the eight rows of an ldmatrix tile hit distinct banks), the merged heads
// as bf16 and the flag of the slice's last block.
struct FusedOLayout {
  int rows = 0;  // o rows of this block
  int cols = 0;  // the kv head's q heads times head_dim
  int ld = 0;    // bf16 elements per staged row
  std::size_t weights = 0;
  std::size_t vector = 0;
  std::size_t flag = 0;
  std::size_t bytes = 0;
};

__host__ __device__ constexpr FusedOLayout fused_o_layout(std::size_t base, int o_rows, int cluster,
                                                          int cols) {
  FusedOLayout l;
  l.rows = o_rows / cluster;
  l.cols = cols;
  l.ld = cols + 8;
  l.weights = (base + 127) / 128 * 128;
  l.vector = l.weights + sizeof(bf16) * static_cast<std::size_t>(l.rows) * l.ld;
  l.flag = (l.vector + sizeof(bf16) * cols + 15) / 16 * 16;
  l.bytes = l.flag + 16;
  return l;
}

template <int kMaxHd>
__device__ __forceinline__ FusedOLayout fused_o_layout(const AttentionParams& p) {
  return fused_o_layout(V2Layout<kMaxHd>::kBytes, p.o_rows, p.cluster,
                        p.num_heads / p.num_kv_heads * p.head_dim);
}

// Block `rank` of kv head `kv_head`'s cluster copies rows [rank * rows,
// (rank + 1) * rows) of o, the kv head's columns only, into shared memory:
// 16-byte cp.async copies from every thread, a row's 32 lanes reading its
// columns in a row, committed as one group (o_projection waits for it).
// Issued once the key loop is done: the loop's waits would otherwise count
// this group. On the H200 (1B batch 1) one 512-byte bulk copy a row instead
// took 9-12 us to land the block's 128 KiB, and issued before the wait it
// delayed the wait's return by 5 us (bench/results/README.md, session 13).
template <int kMaxHd>
__device__ __forceinline__ void issue_o_weights(const AttentionParams& p, int kv_head, int rank,
                                                unsigned char* smem) {
  const FusedOLayout l = fused_o_layout<kMaxHd>(p);
  const std::int64_t ld = static_cast<std::int64_t>(p.num_heads) * p.head_dim;
  const bf16* src = p.o_weight + static_cast<std::int64_t>(rank) * l.rows * ld +
                    static_cast<std::int64_t>(kv_head) * l.cols;
  bf16* dst = reinterpret_cast<bf16*>(smem + l.weights);
  const int chunks = l.cols / 8;  // 16-byte pieces of a row
  for (int i = static_cast<int>(threadIdx.x); i < l.rows * chunks; i += kThreads) {
    const int r = i / chunks;
    const int c = i - r * chunks;
    cp_async16(dst + static_cast<std::int64_t>(r) * l.ld + c * 8, src + r * ld + c * 8, true);
  }
  cp_async_commit();
}

// cluster_merge's merge, done for every head row by every block of the
// cluster: each keeps the merged heads, rounded to bf16 as the output is
// stored, as the o projection's input; rank 0 also stores the output.
template <int kMaxHd>
__device__ __forceinline__ void cluster_merge_all(unsigned long long* trace_table,
                                                  const AttentionParams& p, int token,
                                                  int first_head, int heads, int used, int rank,
                                                  unsigned char* smem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // clusters need sm_90; the host never fuses below it
#else
  using L = V2Layout<kMaxHd>;
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const FusedOLayout fl = fused_o_layout<kMaxHd>(p);
  bf16* vector = reinterpret_cast<bf16*>(smem + fl.vector);
  cluster.sync();
  for (int e = static_cast<int>(threadIdx.x); e < heads * L::kQuads; e += kThreads) {
    const auto [h, d] = head_quad<kMaxHd>(e);
    if (d >= p.head_dim) continue;
    const MergedQuad merged = merge_quad<kMaxHd>(cluster, smem, h, d, used);
    write_out4(vector + h * p.head_dim + d, merged.num, merged.den);
    if (rank == 0) store_out4(p, token, first_head + h, d, merged.num, merged.den);
  }
  trace::mark(trace_table, trace::slot_of(p), kHeadsMerged);
  // As in cluster_merge: the next kernel may launch now; its wait still
  // holds it until this grid, the projection included, is complete.
  griddep_launch_dependents();
  // Every block's partials have been read (they may go), and every thread's
  // merged heads are visible to the whole block.
  cluster.sync();
#endif
}

// The o rows of this block, over the kv head's columns, as float partials;
// then the last kv head to finish this slice adds the slice's partials, in
// kv head order, to the residual stream with the o GEMV's roundings.
template <int kMaxHd>
__device__ __forceinline__ void o_projection(unsigned long long* trace_table,
                                             const AttentionParams& p, int kv_head, int rank,
                                             unsigned char* smem) {
  const FusedOLayout l = fused_o_layout<kMaxHd>(p);
  const bf16* w = reinterpret_cast<const bf16*>(smem + l.weights);
  const bf16* vector = reinterpret_cast<const bf16*>(smem + l.vector);
  cp_async_wait<0>();
  __syncthreads();  // every thread's copies have landed
  trace::mark(trace_table, trace::slot_of(p), kOWeightsLanded);
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int g = lane >> 2;
  const int t4 = lane & 3;
  const int row0 = rank * l.rows;
  float* partial = p.o_partials + static_cast<std::int64_t>(kv_head) * p.o_rows + row0;
  // One 16-row tile of o a step: its rows are the mma's A, the merged heads
  // in every column of B (so each column of the product holds the rows'
  // sums; lanes of column 0 store them). The k order is fixed: the same
  // inputs give the same bits.
  for (int tile = warp; tile < l.rows / 16; tile += kWarps) {
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const bf16* a_row =
        w + static_cast<std::int64_t>(tile * 16 + (lane & 15)) * l.ld + (lane >> 4) * 8;
    for (int kk = 0; kk < l.cols / 16; ++kk) {
      unsigned a[4];
      ldmatrix_x4(a, a_row + kk * 16);
      const unsigned b0 = *reinterpret_cast<const unsigned*>(vector + kk * 16 + 2 * t4);
      const unsigned b1 = *reinterpret_cast<const unsigned*>(vector + kk * 16 + 8 + 2 * t4);
      mma_bf16_16816(c, a, b0, b1);
    }
    if (t4 == 0) {
      partial[tile * 16 + g] = c[0];
      partial[tile * 16 + g + 8] = c[2];
    }
  }

  // The last kv head of this slice to arrive adds every kv head's partials.
  int* is_last = reinterpret_cast<int*>(smem + l.flag);
  fence_acq_rel_gpu();  // this block's partials are visible device-wide before the count
  __syncthreads();
  if (threadIdx.x == 0) {
    int* counter = p.o_counters + rank;
    const int arrived = atomicAdd(counter, 1);
    const bool last = arrived == p.num_kv_heads - 1;
    if (last) atomicExch(counter, 0);  // ready for the next launch
    *is_last = last ? 1 : 0;
  }
  __syncthreads();
  trace::mark(trace_table, trace::slot_of(p), kPartialsCounted);
  if (*is_last == 0) return;
  fence_acq_rel_gpu();  // the other kv heads' partials, released before their counts
  for (int r = static_cast<int>(threadIdx.x); r < l.rows; r += kThreads) {
    const float* src = p.o_partials + row0 + r;
    float sum = 0.0f;
    for (int h = 0; h < p.num_kv_heads; ++h) {
      sum += __ldcg(src + static_cast<std::int64_t>(h) * p.o_rows);
    }
    bf16* x = p.o_residual + row0 + r;
    *x = __float2bfloat16_rn(__bfloat162float(*x) + round_bf16(sum));
  }
}

}  // namespace
}  // namespace cellm::cuda
