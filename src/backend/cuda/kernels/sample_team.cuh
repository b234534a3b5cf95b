// The team of blocks that draws one row (sample_draw.cu): one block, or a
// thread block cluster whose blocks each own a contiguous slice of the ids
// and combine their partials through distributed shared memory, always in
// rank order, so a draw is deterministic. Included by sample_draw.cu and its
// helpers only.
//
// Thread-safety: device helpers; every member must be called by every thread
// of every block of the team (they hold barriers).
#pragma once

#include <cooperative_groups.h>

#include "backend/cuda/kernels/sample_common.cuh"

namespace cellm::cuda {
namespace {

// Barrier over the team's blocks (nothing with one block).
template <int kC>
__device__ __forceinline__ void team_barrier() {
  if constexpr (kC > 1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cooperative_groups::this_cluster().sync();
#endif
  }
}

// The kC blocks drawing one row. Each member function is called with values
// that are the same across each block's threads; every remote read is
// followed by a cluster barrier, so no block leaves while another still reads
// its shared memory.
template <int kC>
struct Team {
  int rank;   // 0 .. kC - 1
  int begin;  // this block's ids: [begin, end)
  int end;
  u64* box;  // a shared word, exchanged by each()

  // Calls fold(j, value of block j) for every block of the team, in rank
  // order.
  template <class Fold>
  __device__ void each(u64 value, Fold&& fold) const {
    if constexpr (kC == 1) {
      fold(0, value);
    } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      namespace cg = cooperative_groups;
      cg::cluster_group cluster = cg::this_cluster();
      if (threadIdx.x == 0) *box = value;
      cluster.sync();
#pragma unroll
      for (int j = 0; j < kC; ++j) fold(j, *cluster.map_shared_rank(box, j));
      cluster.sync();  // the box may be written again
#else
      // Clusters need sm_90; the launch never asks for them below it.
      __trap();
#endif
    }
  }

  __device__ u64 sum(u64 value) const {
    u64 total = 0;
    each(value, [&](int, u64 v) { total += v; });
    return total;
  }

  // The sum of `value` over the blocks before this one.
  __device__ u64 before(u64 value) const {
    u64 total = 0;
    each(value, [&](int j, u64 v) { total += j < rank ? v : 0; });
    return total;
  }

  __device__ u64 max_of(u64 value) const {
    u64 best = 0;
    each(value, [&](int, u64 v) { best = v > best ? v : best; });
    return best;
  }

  // In rank order; with one block, exactly `value`.
  __device__ float sum_f32(float value) const {
    float total = 0.0f;
    each(__float_as_uint(value),
         [&](int, u64 v) { total = __fadd_rn(total, __uint_as_float(static_cast<unsigned>(v))); });
    return total;
  }

  __device__ int max_index(int value) const {  // value >= -1
    return static_cast<int>(max_of(static_cast<u64>(value + 1))) - 1;
  }

  __device__ ArgMax argmax(ArgMax mine) const {
    ArgMax best = mine;
    each((static_cast<u64>(__float_as_uint(mine.value)) << 32) | static_cast<unsigned>(mine.index),
         [&](int, u64 v) {
           const float value = __uint_as_float(static_cast<unsigned>(v >> 32));
           const int index = static_cast<int>(static_cast<unsigned>(v));
           if (better(value, index, best.value, best.index)) best = ArgMax{value, index};
         });
    return best;
  }
};

}  // namespace
}  // namespace cellm::cuda
