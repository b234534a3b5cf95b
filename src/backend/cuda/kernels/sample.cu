// The device argmax (sample.cuh): one block per row, or a row split over
// blocks whose partials the last of them merges.
#include <algorithm>
#include <string>

#include <climits>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/kernel_trace.cuh"
#include "backend/cuda/kernels/sample.cuh"
#include "backend/cuda/kernels/sample_common.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

CELLM_TRACE_TABLE(argmax_trace);

__global__ void __launch_bounds__(kThreads)
    sample_argmax_kernel(const __grid_constant__ SampleParams p) {
  const trace::BlockScope traced(argmax_trace, trace::slot_of(p));
  // No programmatic wait: the launch itself waits for the logits.
  trace::mark(argmax_trace, trace::slot_of(p), trace::kWaitMark);
  __shared__ ArgMax scratch[kWarps];
  __shared__ Banned banned;
  load_banned(p, static_cast<int>(blockIdx.x), banned);
  const float* row = p.logits + static_cast<std::int64_t>(blockIdx.x) * p.logits_stride;
  const ArgMax best = block_argmax(row, 0, p.vocab, p.vocab, banned, scratch);
  if (threadIdx.x == 0) {
    const int id = best.index < p.vocab ? best.index : first_candidate(p.vocab, banned);
    p.out[blockIdx.x] = id;
    if (p.feedback != nullptr) p.feedback[blockIdx.x] = id;
  }
}

// The split argmax (sample.cuh): block (row, part) scans logits [part *
// chunk, (part + 1) * chunk) of its row with kSplitUnroll loads in flight per
// thread, and the last block of the row to arrive reduces the parts.
constexpr int kSplitThreads = 256;
constexpr int kSplitWarps = kSplitThreads / 32;
constexpr int kSplitUnroll = 4;
constexpr int kSplitMinChunk = 4096;  // logits per block, at least

// Blocks of all rows together, at most (about two per SM), and the fewest
// parts a row worth splitting into. H200, 128K vocabulary: one row 4.9-5.2
// us split against 8.8-8.9 on one block; 64 rows 12.0 (32 parts a row) and
// 12.2 (4 parts) against 9.2-9.5, so wide steps keep one block a row. Row
// counts between were not measured; up to 32 rows split (8 parts or more).
constexpr int kSplitMaxBlocks = 256;
constexpr int kSplitMinParts = 8;

// Parts per row; 1 means the one-block kernel.
int argmax_parts(int vocab, int rows) {
  const int by_vocab =
      std::clamp((vocab + kSplitMinChunk - 1) / kSplitMinChunk, 1, kArgmaxMaxParts);
  const int parts = std::clamp(kSplitMaxBlocks / std::max(rows, 1), 1, by_vocab);
  return parts >= std::min(kSplitMinParts, by_vocab) ? parts : 1;
}

// The preferred of the block's candidates; every thread gets it.
__device__ __forceinline__ ArgMax split_block_argmax(float best, int best_i, ArgMax* scratch) {
  warp_argmax(best, best_i);
  const int lane = threadIdx.x & 31;
  if (lane == 0) scratch[threadIdx.x >> 5] = ArgMax{best, best_i};
  __syncthreads();
  best = lane < kSplitWarps ? scratch[lane].value : -INFINITY;
  best_i = lane < kSplitWarps ? scratch[lane].index : INT_MAX;
  warp_argmax(best, best_i);
  return ArgMax{best, best_i};
}

__global__ void __launch_bounds__(kSplitThreads)
    sample_argmax_split_kernel(const __grid_constant__ SampleParams p) {
  const trace::BlockScope traced(argmax_trace, trace::slot_of(p));
  // No programmatic wait: the launch itself waits for the logits.
  trace::mark(argmax_trace, trace::slot_of(p), trace::kWaitMark);
  __shared__ ArgMax scratch[kSplitWarps];
  __shared__ Banned banned;
  __shared__ bool last;
  const int r = static_cast<int>(blockIdx.x);
  const int part = static_cast<int>(blockIdx.y);
  const int parts = static_cast<int>(gridDim.y);
  load_banned(p, r, banned);
  const float* row = p.logits + static_cast<std::int64_t>(r) * p.logits_stride;
  const int chunk = (p.vocab + parts - 1) / parts;
  const int begin = part * chunk;
  const int end = min(p.vocab, begin + chunk);
  float best = -INFINITY;
  int best_i = p.vocab;  // sentinel: loses every tie
  // Indices rise within a thread, so taking only strictly better values keeps
  // the lower id of a tie; across threads warp_argmax breaks ties by id.
  for (int base = begin + static_cast<int>(threadIdx.x); base < end;
       base += kSplitThreads * kSplitUnroll) {
    float v[kSplitUnroll];
#pragma unroll
    for (int u = 0; u < kSplitUnroll; ++u) {
      const int i = base + u * kSplitThreads;
      v[u] = i < end ? row[i] : -INFINITY;
    }
#pragma unroll
    for (int u = 0; u < kSplitUnroll; ++u) {
      const int i = base + u * kSplitThreads;
      if (i < end && !banned.has(i) && better(v[u], i, best, best_i)) {
        best = v[u];
        best_i = i;
      }
    }
  }
  const ArgMax mine = split_block_argmax(best, best_i, scratch);
  ArgMax* partials =
      static_cast<ArgMax*>(p.argmax_partials) + static_cast<std::int64_t>(r) * kArgmaxMaxParts;
  publish_part(mine, partials, part, parts, p.argmax_counters + r, &last);
  if (!last) return;
  const ArgMax scanned = scan_parts(partials, parts, kSplitThreads);
  __syncthreads();  // scratch is reused
  const ArgMax row_best = split_block_argmax(scanned.value, scanned.index, scratch);
  if (threadIdx.x == 0) {
    const int id = row_best.index < p.vocab ? row_best.index : first_candidate(p.vocab, banned);
    p.out[r] = id;
    if (p.feedback != nullptr) p.feedback[r] = id;
  }
}

}  // namespace

void launch_sample_argmax(const SampleParams& requested, cudaStream_t stream) {
  SampleParams params = requested;
  const int parts = params.argmax_partials != nullptr && params.argmax_counters != nullptr
                        ? argmax_parts(params.vocab, params.rows)
                        : 1;
  const bool split = parts > 1;
  trace::assign_slot(params, argmax_trace, [&] {
    return "sample/argmax rows=" + std::to_string(params.rows) + " parts=" + std::to_string(parts);
  });
  if (split) {
    launch(sample_argmax_split_kernel,
           LaunchConfig{dim3(params.rows, parts), dim3(kSplitThreads), 0, stream}, params);
  } else {
    launch(sample_argmax_kernel, LaunchConfig{dim3(params.rows), dim3(kThreads), 0, stream},
           params);
  }
}

}  // namespace cellm::cuda
