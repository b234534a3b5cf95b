// Thin wrappers over the sm_90 bulk async copy (one instruction moves a
// contiguous global range into shared memory and reports the bytes to an
// mbarrier) and the mbarrier operations a producer/consumer ring needs, plus
// the gpu-scope acquire/release accesses of grid-wide counters.
//
// Thread-safety: device code; each call acts on what it names. On older
// architectures these compile to nothing and must not be reached (the hosts
// of their kernels check the device first).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/kernels/ptx_utils.cuh"

namespace cellm::cuda {

__device__ __forceinline__ void mbar_init(std::uint64_t* bar, unsigned count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_address(bar)), "r"(count)
               : "memory");
#endif
}

// Makes initialised barriers visible to the async proxy (the copy engine).
__device__ __forceinline__ void mbar_init_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// One arrival that also announces `bytes` of copies completing on `bar`.
__device__ __forceinline__ void mbar_expect_bytes(std::uint64_t* bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_address(bar)),
               "r"(bytes)
               : "memory");
#endif
}

__device__ __forceinline__ void mbar_arrive(std::uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_address(bar)) : "memory");
#endif
}

// Spins until the phase of parity `parity` of `bar` has completed. With
// kCluster the wait also acquires, at cluster scope, what remote stores
// counted on the barrier wrote (attention_decode_v2_push.cuh).
#define CELLM_MBAR_TRY_WAIT(sem)    \
  "{\n"                             \
  ".reg .pred p;\n"                 \
  "mbarrier.try_wait.parity" sem    \
  ".shared::cta.b64 p, [%1], %2;\n" \
  "selp.u32 %0, 1, 0, p;\n"         \
  "}\n"
template <bool kCluster = false>
__device__ __forceinline__ void mbar_wait(std::uint64_t* bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned addr = smem_address(bar);
  unsigned done = 0;
  do {
    if constexpr (kCluster) {
      asm volatile(CELLM_MBAR_TRY_WAIT(".acquire.cluster")
                   : "=r"(done)
                   : "r"(addr), "r"(parity)
                   : "memory");
    } else {
      asm volatile(CELLM_MBAR_TRY_WAIT("") : "=r"(done) : "r"(addr), "r"(parity) : "memory");
    }
  } while (done == 0);
#endif
}
#undef CELLM_MBAR_TRY_WAIT

// An L2 policy for data read once: evicted first, so it does not push out
// what is read again (activations, K/V).
__device__ __forceinline__ std::uint64_t l2_evict_first_policy() {
  std::uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
#endif
  return policy;
}

// Copies `bytes` (a multiple of 16, both addresses 16-byte aligned) from
// global `src` to shared `dst`; completion is counted on `bar`.
__device__ __forceinline__ void bulk_copy_to_shared(void* dst, const void* src, unsigned bytes,
                                                    std::uint64_t* bar, std::uint64_t policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint "
      "[%0], [%1], %2, [%3], %4;\n" ::"r"(smem_address(dst)),
      "l"(src), "r"(bytes), "r"(smem_address(bar)), "l"(policy)
      : "memory");
#endif
}

// Grid-wide counters: an increment that releases this thread's (and,
// through a preceding block barrier, its block's) writes and acquires those
// of the increments before it, and an acquire read before reading what
// other blocks wrote.
__device__ __forceinline__ unsigned atomic_add_acq_rel(unsigned* counter, unsigned value) {
  unsigned old = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  asm volatile("atom.add.acq_rel.gpu.u32 %0, [%1], %2;\n"
               : "=r"(old)
               : "l"(counter), "r"(value)
               : "memory");
#endif
  return old;
}

__device__ __forceinline__ unsigned load_acquire(const unsigned* counter) {
  unsigned value = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  asm volatile("ld.acquire.gpu.u32 %0, [%1];\n" : "=r"(value) : "l"(counter) : "memory");
#endif
  return value;
}

}  // namespace cellm::cuda
