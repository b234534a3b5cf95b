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

#include "backend/cuda/kernels/attention_decode_v2_layout.cuh"
#include "backend/cuda/kernels/bulk_copy.cuh"
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
// the barrier and one slot per block of the cluster.
template <int kMaxHd, bool kFp8 = false>
__host__ __device__ constexpr std::size_t push_merge_smem_bytes(int heads_cap, int head_dim,
                                                                int cluster) {
  return V2Layout<kMaxHd, false, kFp8>::kPushSlots +
         sizeof(float) * static_cast<std::size_t>(cluster) *
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

__device__ __forceinline__ void st_async(unsigned addr, float4 value, unsigned bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, "
      "[%5];\n" ::"r"(addr),
      "f"(value.x), "f"(value.y), "f"(value.z), "f"(value.w), "r"(bar)
      : "memory");
#endif
}

// Where a block's partial goes: its own slot in block 0, written locally by
// block 0 and by remote stores from the others.
struct PushTarget {
  float* local_slots = nullptr;  // this block's slot area (block 0's is the one used)
  unsigned remote_slots = 0;     // block 0's slot area, as a cluster address
  unsigned remote_bar = 0;       // block 0's barrier, as a cluster address
  int stride = 0;                // floats per slot
  int split = 0;                 // this block's rank, and its slot

  // Float `index` of this block's slot.
  __device__ __forceinline__ void put(int index, float value) const {
    if (split == 0) {
      local_slots[index] = value;
    } else {
      st_async(remote_slots + sizeof(float) * static_cast<unsigned>(split * stride + index), value,
               remote_bar);
    }
  }
  __device__ __forceinline__ void put(int index, float4 value) const {
    if (split == 0) {
      *reinterpret_cast<float4*>(local_slots + index) = value;
    } else {
      st_async(remote_slots + sizeof(float) * static_cast<unsigned>(split * stride + index), value,
               remote_bar);
    }
  }
};

}  // namespace
}  // namespace cellm::cuda
