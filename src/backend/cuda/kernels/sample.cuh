// The device sampler over float32 logits [rows, vocab]: sample.cu holds the
// argmax, sample_draw.cu the draw.
//
// sample_argmax: the first index of the row maximum (ties -> lower id; NaN
// logits are ignored). Given a workspace (argmax_partials/argmax_counters),
// a step of up to 32 rows has each row scanned by up to kArgmaxMaxParts
// blocks of a few thousand logits, and the last of them to finish reduces
// their partials: a batch-1 step then reads its 128K logits on dozens of
// SMs instead of one. Wider steps keep one block a row, which measured
// faster at 64 rows. The result is the same either way: "larger value, then
// lower id" is a total order on the candidates, so its maximum does not
// depend on how the row is cut.
//
// sample: batching_spec.md section 4.8. params[r] = (temperature, top_p,
// top_k, coin). temperature <= 0 -> argmax. Otherwise p = softmax(x / T);
// top-k (0 < top_k < vocab) wins over top-p (0 < top_p < 1); the kept prefix
// of p sorted descending (ties -> lower id) is found by radix select on the
// bits of p instead of a sort, over the few thousand tokens that can reach
// it where they fit in shared memory (SampleParams::candidates), and the
// coin picks the first kept rank whose cumulative mass exceeds coin * kept
// mass. With neither, the coin is placed
// in token order: the result is the number of tokens whose cumulative
// probability is <= coin, clamped to vocab - 1.
//
// Arithmetic and determinism: p is float32 computed as the host does
// (y = x / T, e = expf(y - max y), p = e / Z). Z is a fixed-tree block sum,
// and with a cluster the blocks' sums added in rank order (the host sums
// sequentially, so Z may differ in the last bits). Every
// cumulative mass is summed exactly in 52-bit fixed point (p * 2^52,
// truncated) instead of a sequential float32 cumsum; the host and device can
// therefore disagree only when the coin or top_p lands within float rounding
// (~1e-7 relative) of a boundary. The same inputs always give the same token.
// Rows whose logits are all -inf or contain NaN return an in-range token only.
//
// Suppressed ids (optional, both kernels): suppressed[r * kSampleMaxSuppressed
// + j], -1 for an empty slot. A suppressed id is no candidate: the argmax
// skips it and its probability is 0 (its logit counts as -inf), as the host
// sampler does; when rounding leaves no id past the coin, the last id with
// nonzero probability is taken instead of vocab - 1.
//
// Thread-safety: launch_* are reentrant; params are plain values.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

// Status is only declared here: .cu files must not pull fmt through nvcc
// (validate() is defined in the family's .cpp).
namespace cellm {
class Status;
}  // namespace cellm

namespace cellm::cuda {

inline constexpr int kSampleParamsPerRow = 4;   // temperature, top_p, top_k, coin
inline constexpr int kSampleMaxSuppressed = 8;  // = cellm::kMaxSuppressedTokens
inline constexpr int kArgmaxMaxParts = 64;      // blocks per row of the split argmax
inline constexpr int kSampleClusterBlocks = 8;  // blocks per row of the clustered draw
// Bytes of argmax_partials for `rows` rows (8 per part).
inline constexpr std::size_t argmax_partials_bytes(std::int32_t rows) {
  return static_cast<std::size_t>(rows) * kArgmaxMaxParts * 8;
}

struct SampleParams {
  const float* logits = nullptr;             // [rows, logits_stride], first `vocab` columns used
  const float* params = nullptr;             // [rows, 4]; unused by sample_argmax
  std::int32_t* out = nullptr;               // [rows]
  // sample_argmax only, optional ([rows]): the ids again, in device memory,
  // where the next step's embedding reads them (decode_greedy's feedback).
  std::int32_t* feedback = nullptr;
  const std::int32_t* suppressed = nullptr;  // [rows, kSampleMaxSuppressed] or null
  std::int64_t logits_stride = 0;
  std::int32_t rows = 0;
  std::int32_t vocab = 0;
  // sample_argmax's split over blocks (null: one block per row). The
  // counters ([rows]) must be zero before a launch and are left zero by it;
  // the partials (argmax_partials_bytes(rows)) are scratch. Launches that
  // share them must be ordered (one stream).
  void* argmax_partials = nullptr;
  std::int32_t* argmax_counters = nullptr;
  // sample only: a row is drawn by a cluster of kSampleClusterBlocks blocks,
  // each owning a slice of the ids, instead of by one block (ignored where
  // the device has no clusters). Rows whose sum Z rounds differently may
  // then differ from the one-block draw, within the rounding described above.
  bool cluster = false;
  // sample only: top-k and top-p select over the tokens whose p can reach the
  // kept set, held in shared memory, instead of reading the row on every
  // pass (sample_draw.cu). The token is the same either way; off is for
  // comparisons.
  bool candidates = true;
  // sample only, optional ([rows]): 1 where a row's top-k or top-p draw ran
  // over candidates, 0 elsewhere (for tests and benchmarks).
  std::int32_t* drawn_from_candidates = nullptr;
#if CELLM_KERNEL_TRACE
  std::int32_t trace_slot = -1;  // kernel_trace.cuh
#endif

  Status validate() const;         // for sample
  Status validate_argmax() const;  // for sample_argmax (params may be null)
};

void launch_sample_argmax(const SampleParams& params, cudaStream_t stream);
void launch_sample(const SampleParams& params, cudaStream_t stream);

}  // namespace cellm::cuda
