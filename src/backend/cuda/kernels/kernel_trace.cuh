// Opt-in timeline of the decode chain's kernels, built with
// -DCELLM_KERNEL_TRACE=ON. Thread 0 of every block of a traced launch writes
// %globaltimer at fixed points (mark 0 on entry, 1 after the programmatic-
// launch wait, 2..6 kernel phases, 7 on exit) into its file's device table,
// one row per launch ("slot") and block. At exit the host prints, per slot,
// the earliest and latest block at each mark (kernel_trace.h), and
// bench/tools/kernel_trace.py turns that into per-kernel durations, gaps
// and phases. Unlike a profiler, which runs kernels one at a time, this
// shows them overlapping as they do in a replayed graph.
// Built without the option, the table is a null pointer, mark() is empty and
// the kernels compile exactly as before.
//
// Thread-safety: mark() writes only its block's entries.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/kernel_trace.h"

namespace cellm::cuda::trace {

#if CELLM_KERNEL_TRACE
// A file's table of marks: `name` is a __device__ array of kTableEntries.
#define CELLM_TRACE_TABLE(name) \
  __device__ unsigned long long name[::cellm::cuda::trace::kTableEntries]
#else
#define CELLM_TRACE_TABLE(name) constexpr unsigned long long* name = nullptr
#endif

// The launch's slot, or -1 when the params carry none (untraced builds).
template <class Params>
__host__ __device__ __forceinline__ int slot_of(const Params& p) {
  if constexpr (requires { p.trace_slot; }) {
    return p.trace_slot;
  } else {
    return -1;
  }
}

// Gives `p` a slot of `table` labelled `label()` (called only when tracing).
template <class Params, class Label>
void assign_slot(Params& p, const void* table, Label&& label) {
  if constexpr (requires { p.trace_slot; }) {
    p.trace_slot = take_slot(table, label());
  }
}

__device__ __forceinline__ void mark(unsigned long long* table, int slot, int what) {
#if CELLM_KERNEL_TRACE
  if (slot < 0 || slot >= kSlots || threadIdx.x != 0) return;
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  if (block >= static_cast<unsigned>(kBlocks)) return;
  unsigned long long now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  table[(static_cast<std::size_t>(slot) * kBlocks + block) * kMarks + what] = now;
#else
  (void)table;
  (void)slot;
  (void)what;
#endif
}

// Mark 7 once every thread of the block is done (all returns before it must
// be taken by the whole block).
__device__ __forceinline__ void block_exit(unsigned long long* table, int slot) {
#if CELLM_KERNEL_TRACE
  __syncthreads();
  mark(table, slot, kExitMark);
#else
  (void)table;
  (void)slot;
#endif
}

// Marks entry when made and exit (block_exit) when it goes out of scope, at
// whichever return the kernel takes. Empty in untraced builds.
class BlockScope {
 public:
  __device__ __forceinline__ BlockScope(unsigned long long* table, int slot)
#if CELLM_KERNEL_TRACE
      : table_(table), slot_(slot) {
    mark(table, slot, kEntryMark);
  }
  __device__ __forceinline__ ~BlockScope() {
    block_exit(table_, slot_);
  }

 private:
  unsigned long long* table_;
  int slot_;
#else
  {
    (void)table;
    (void)slot;
  }
#endif
  BlockScope(const BlockScope&) = delete;
  BlockScope& operator=(const BlockScope&) = delete;
};

}  // namespace cellm::cuda::trace
