// Thin wrappers over the sm_80+ instructions the staged kernels use: cp.async
// (16-byte global->shared copies that zero-fill when told to read nothing),
// ldmatrix (8x8 bf16 tiles into mma fragments) and the m16n8k16 bf16 mma with
// float accumulators. Fragment layouts are those of the PTX ISA.
//
// Thread-safety: device code; ldmatrix/mma need the whole warp converged.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace cellm::cuda {

__device__ __forceinline__ unsigned smem_address(const void* ptr) {
  return static_cast<unsigned>(__cvta_generic_to_shared(ptr));
}

// Copies 16 bytes when `fill`, else writes 16 zero bytes (src is not read,
// but must still be a valid address).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool fill) {
  const unsigned bytes = fill ? 16u : 0u;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(dst)), "l"(src),
               "r"(bytes)
               : "memory");
}

// Copies 16 bytes through L1 (cp.async.ca): for data many blocks of an SM
// read, whose copies then meet in L1 instead of each going to L2.
__device__ __forceinline__ void cp_async16_ca(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(smem_address(dst)), "l"(src)
               : "memory");
}

// Copies kBytes (4, 8 or 16; both addresses aligned to it) through L1 when
// `fill`, else writes kBytes zero bytes (src is not read, but must still be
// a valid address).
template <int kBytes>
__device__ __forceinline__ void cp_async_ca_zfill(void* dst, const void* src, bool fill) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async copies 4, 8 or 16 bytes");
  const unsigned bytes = fill ? static_cast<unsigned>(kBytes) : 0u;
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_address(dst)), "l"(src),
               "n"(kBytes), "r"(bytes)
               : "memory");
}

// Asks L2 for the 128-byte line holding `ptr`; nothing comes back to the thread.
__device__ __forceinline__ void prefetch_l2(const void* ptr) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(ptr));
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most `kPending` of this thread's committed groups are in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Four 8x8 b16 tiles; lanes 8i..8i+7 give the row addresses of tile i, and
// every lane receives one 32-bit pair of each tile (row lane/4, cols 2*(lane%4)).
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row))
               : "memory");
}

// As ldmatrix_x4, each tile transposed.
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row))
               : "memory");
}

// d += a (16x16, row) * b (16x8, col); bf16 inputs, float accumulators.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                               unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as one bf16 pair register; `lo` is the lower column.
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&pair);
}

}  // namespace cellm::cuda
