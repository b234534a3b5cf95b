// Decode attention v2's push merge (AttentionParams::push_merge): the blocks
// of a cluster write their partials into slots of block 0's shared memory
// with asynchronous remote stores that count their bytes on an mbarrier
// there; block 0 waits on it, merges the slots locally in split order and
// stores the output, and the others leave as soon as their stores are
// issued. Against the pull merge (cluster_merge) this takes the cluster
// barrier before the merge, the round trip of remote loads and the barrier
// that keeps every block alive for its readers off the slowest block's path.
//
// The barrier is initialised before the programmatic-launch wait, and every
// block arrives on the cluster's hardware barrier right after; a block waits
// on that barrier only before its first remote store, long after everyone
// arrived, so the initialisation is visible at no cost on the critical path.
//
// Thread-safety: device helpers; the cluster barrier calls must be reached by
// every thread of every block of the cluster, arrive before wait, once each.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/attention_decode_v2_layout.cuh"
#include "backend/cuda/kernels/attention_decode_v2_merge.cuh"
#include "backend/cuda/kernels/bulk_copy.cuh"
#include "backend/cuda/kernels/kernel_trace.cuh"
#include "backend/cuda/kernels/ptx_utils.cuh"

namespace cellm::cuda {
namespace {

// One split's slot in block 0: the maxima and denominators of up to kRows
// heads, then the numerators of the block's `heads_cap` heads, head_dim
// floats each. Slots are packed to the heads a block can have so that 64-
// and 128-wide heads fit beside the block's own layout.
__host__ __device__ constexpr int push_slot_floats(int heads_cap, int head_dim) {
  return 2 * kRows + heads_cap * head_dim;
}

// q heads of one block: a kv head's group, at most one mma row tile.
__host__ __device__ constexpr int push_heads_cap(int num_heads, int num_kv_heads) {
  return num_heads / num_kv_heads < kRows ? num_heads / num_kv_heads : kRows;
}

// Dynamic shared memory a push-merge launch needs: the block's own layout,
// the barrier and one slot per block of the cluster, or per warp of it
// (`per_warp`, AttentionParams::warp_push).
template <int kMaxHd>
__host__ __device__ constexpr std::size_t push_merge_smem_bytes(int heads_cap, int head_dim,
                                                                int cluster,
                                                                bool per_warp = false) {
  return V2Layout<kMaxHd>::kPushSlots +
         sizeof(float) * static_cast<std::size_t>(cluster * (per_warp ? kWarps : 1)) *
             static_cast<std::size_t>(push_slot_floats(heads_cap, head_dim));
}

// The hardware cluster barrier, split: arrive (relaxed; the barrier's
// initialisation is released by mbar_init_fence) and wait (acquire).
__device__ __forceinline__ void cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait;\n" ::: "memory");
#endif
}

// The address of this block's shared `ptr` in block `rank` of the cluster.
__device__ __forceinline__ unsigned cluster_address(const void* ptr, unsigned rank) {
  unsigned remote = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
               : "=r"(remote)
               : "r"(smem_address(ptr)), "r"(rank));
#endif
  return remote;
}

// Remote stores whose bytes complete a transaction on the barrier at `bar`
// (both cluster addresses of the same block).
__device__ __forceinline__ void st_async(unsigned addr, float value, unsigned bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];\n" ::"r"(addr),
      "f"(value), "r"(bar)
      : "memory");
#endif
}

__device__ __forceinline__ void st_async(unsigned addr, float2 value, unsigned bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];\n" ::"r"(
          addr),
      "f"(value.x), "f"(value.y), "r"(bar)
      : "memory");
#endif
}

__device__ __forceinline__ void st_async(unsigned addr, float4 value, unsigned bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, "
      "[%5];\n" ::"r"(addr),
      "f"(value.x), "f"(value.y), "f"(value.z), "f"(value.w), "r"(bar)
      : "memory");
#endif
}

// Where a partial goes: slot `slot` of block 0's slot area, written locally
// in block 0 and by remote stores from the others. A block's partial takes
// the slot of its split; with AttentionParams::warp_push each warp's takes
// split * kWarps + warp.
struct PushTarget {
  float* local_slots = nullptr;  // this block's slot area (block 0's is the one used)
  unsigned remote_slots = 0;     // block 0's slot area, as a cluster address
  unsigned remote_bar = 0;       // block 0's barrier, as a cluster address
  int stride = 0;                // floats per slot
  int slot = 0;
  bool local = false;  // this block is block 0

  template <class T>
  __device__ __forceinline__ void put(int index, T value) const {
    const int at = slot * stride + index;
    if (local) {
      *reinterpret_cast<T*>(local_slots + at) = value;
    } else {
      st_async(remote_slots + sizeof(float) * static_cast<unsigned>(at), value, remote_bar);
    }
  }
};

// The merge with AttentionParams::warp_push, called by every thread of a
// used split's block right after its key loop with its lane's softmax state
// (`l` unsummed over the quad; the four warps never meet):
// each warp stores its maximum, denominator and numerators (in its mma
// accumulator layout: rows g and g + 8, columns 8n + 2 t4 and the next)
// into its slot in block 0; block 0 waits for every other warp's bytes and
// merges the used * kWarps slots in (split, warp) order, two passes over
// its shared memory. The sums differ in order from the block-then-cluster
// merge, so the bits do too; every run gives the same ones.
template <int kMaxHd>
__device__ __forceinline__ void warp_push_merge(unsigned long long* trace_table,
                                                const AttentionParams& p, int token,
                                                int first_head, int heads, int used, int split,
                                                const float (&m)[2], float (&l)[2],
                                                const float (&acc)[kMaxHd / 8][4],
                                                unsigned char* smem) {
  using L = V2Layout<kMaxHd>;
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int g = lane >> 2;
  const int t4 = lane & 3;
  const int hd = p.head_dim;
  auto* push_bar = reinterpret_cast<std::uint64_t*>(smem + L::kPushBar);
  // The lane's share of each denominator, summed over its quad.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  cluster_wait();  // block 0's barrier is initialised (everyone arrived long ago)
  PushTarget to;
  to.local_slots = reinterpret_cast<float*>(smem + L::kPushSlots);
  to.remote_slots = cluster_address(to.local_slots, 0);
  to.remote_bar = cluster_address(push_bar, 0);
  to.stride = push_slot_floats(push_heads_cap(p.num_heads, p.num_kv_heads), hd);
  to.slot = split * kWarps + (tid >> 5);
  to.local = split == 0;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int h = g + 8 * r;
    if (h >= heads) continue;
    if (t4 == 0) {
      to.put(h, m[r]);
      to.put(kRows + h, l[r]);
    }
#pragma unroll
    for (int n = 0; n < kMaxHd / 8; ++n) {
      const int col = n * 8 + t4 * 2;
      if (col < hd) to.put(2 * kRows + h * hd + col, make_float2(acc[n][2 * r], acc[n][2 * r + 1]));
    }
  }
  trace::mark(trace_table, trace::slot_of(p), kBlockMerged);
  if (split != 0) return;
  __syncthreads();               // block 0's own slots are visible to all its threads
  mbar_wait<true>(push_bar, 0);  // acquires the other warps' stores
  const int parts = used * kWarps;
  for (int e = tid; e < heads * L::kQuads; e += kThreads) {
    const auto [h, d] = head_quad<kMaxHd>(e);
    if (d >= hd) continue;
    float m_max = -INFINITY;
    for (int j = 0; j < parts; ++j) {
      const float* part = to.local_slots + j * to.stride;
      if (part[kRows + h] > 0.0f) m_max = fmaxf(m_max, part[h]);
    }
    float den = 0.0f;
    float4 num = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int j = 0; j < parts; ++j) {
      const float* part = to.local_slots + j * to.stride;
      const float lj = part[kRows + h];
      const float weight = lj > 0.0f ? exp2f(part[h] - m_max) : 0.0f;
      den += weight * lj;
      num = fma4(weight, *reinterpret_cast<const float4*>(part + 2 * kRows + h * hd + d), num);
    }
    store_out4(p, token, first_head + h, d, num, den);
  }
  trace::mark(trace_table, trace::slot_of(p), kMergedStored);
  griddep_launch_dependents();  // the outputs are stored (cluster_merge's rule)
}

}  // namespace
}  // namespace cellm::cuda
