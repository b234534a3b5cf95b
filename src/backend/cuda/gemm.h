// cuBLASLt GEMMs for linear layers: out[m, n] = a[m, k] @ b[n, k]^T (+ bias)
// (+ out when accumulating), bf16 operands, float32 accumulation, bf16 or
// float32 output. b is a weight in PyTorch Linear layout [out, in]. The
// workspace is the caller's (an arena lease); matmul descriptors and the
// heuristic's (or the autotuned) algorithm are cached per shape, so after a
// warm-up call a shape runs with no host allocation and is safe inside CUDA
// graph capture.
//
// Thread-safety: not thread-safe; one GemmRunner per engine thread / stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include <cuda_runtime.h>

#include "cellm/status.h"
#include "core/dtype.h"

namespace cellm::cuda {

// cuBLASLt's heuristic results an autotune times unless told otherwise, and
// the most it may time.
inline constexpr int kDefaultAutotuneCandidates = 8;
inline constexpr int kMaxAutotuneCandidates = 64;

struct GemmArgs {
  const void* a = nullptr;     // bf16 [m, lda], first k columns
  const void* b = nullptr;     // bf16 [n, ldb], first k columns
  void* out = nullptr;         // out_dtype [m, ldc], first n columns
  const void* bias = nullptr;  // bf16 [n] or null; only with bf16 output
  std::int64_t m = 0;
  std::int64_t n = 0;
  std::int64_t k = 0;
  std::int64_t lda = 0;
  std::int64_t ldb = 0;
  std::int64_t ldc = 0;
  DType out_dtype = DType::kBF16;  // kBF16 or kF32
  bool accumulate = false;         // out += a @ b^T (beta = 1)
  // When the shape is first planned (m <= kAutotuneMaxRows, no accumulate,
  // stream not capturing), time cuBLASLt's candidate algorithms on these
  // operands with a cold L2 and keep the fastest instead of the heuristic's
  // first. Blocks the host for the timing; meant for warm-up and capture.
  bool autotune = false;
  // How many of cuBLASLt's heuristic results an autotune times
  // (1..kMaxAutotuneCandidates).
  int autotune_candidates = kDefaultAutotuneCandidates;

  Status validate() const;
};

class GemmRunner {
 public:
  // `workspace_bytes` is the size of every workspace passed to run().
  static Result<GemmRunner> create(std::size_t workspace_bytes);

  GemmRunner(GemmRunner&&) noexcept;
  GemmRunner& operator=(GemmRunner&&) noexcept;
  ~GemmRunner();

  // Runs on `stream`; fails (nothing launched) on invalid args or when no
  // cuBLASLt algorithm supports the shape.
  Status run(const GemmArgs& args, void* workspace, cudaStream_t stream);

  std::size_t workspace_bytes() const;
  std::size_t cached_plans() const;

  // A sensible workspace for Hopper (cuBLASLt recommends 32 MiB there).
  static constexpr std::size_t kDefaultWorkspaceBytes = 32u << 20;
  // Autotuning covers decode-sized GEMMs only: wider ones are bound by
  // compute, where the heuristic's choice is good, and arrive in arbitrary
  // widths that would each pay the timing.
  static constexpr std::int64_t kAutotuneMaxRows = 256;

 private:
  struct Impl;
  explicit GemmRunner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cellm::cuda
