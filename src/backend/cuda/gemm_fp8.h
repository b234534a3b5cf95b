// cuBLASLt FP8 GEMMs for linear layers kept in E4M3 with one scale per row:
//   out[m, n] = (a[m, k] * a_scales[m]) @ (b[n, k] * b_scales[n])^T (+ bias)
// a and b E4M3 codes (a: activations quantized per token, kernels/
// quantize_fp8.cuh; b: a weight in PyTorch Linear layout [out, in]), both
// K-contiguous as FP8 tensor cores require, float32 accumulation, the two
// scale vectors applied in cuBLASLt's epilogue (its OUTER_VEC_32F scale
// mode), bf16 or float32 output. Plans are cached per shape as GemmRunner
// caches them (gemm.h): after a warm-up call a shape runs with no host
// allocation and is safe inside CUDA graph capture. The workspace is the
// caller's.
//
// OUTER_VEC_32F needs a GPU and cuBLASLt that support it (Hopper and newer,
// cuBLAS 12.9+): where they do not, planning fails with not_supported and
// nothing is launched, and self_check() tells a caller before it relies on
// the path.
//
// Thread-safety: not thread-safe; one Fp8GemmRunner per engine thread / stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include <cuda_runtime.h>

#include "cellm/status.h"
#include "core/dtype.h"

namespace cellm::cuda {

struct Fp8GemmArgs {
  const void* a = nullptr;          // E4M3 [m, lda], first k columns
  const float* a_scales = nullptr;  // [m]
  const void* b = nullptr;          // E4M3 [n, ldb], first k columns
  const float* b_scales = nullptr;  // [n]
  void* out = nullptr;              // out_dtype [m, ldc], first n columns
  const void* bias = nullptr;       // bf16 [n] or null; only with bf16 output
  std::int64_t m = 0;
  std::int64_t n = 0;
  std::int64_t k = 0;  // a multiple of 16
  std::int64_t lda = 0;
  std::int64_t ldb = 0;
  std::int64_t ldc = 0;
  DType out_dtype = DType::kBF16;  // kBF16 or kF32; out is overwritten
  // cuBLASLt's FAST_ACCUM: the tensor cores' partial sums are not promoted
  // to float32 along k (faster; the sums keep fewer bits). Off by default.
  bool fast_accum = false;

  Status validate() const;
};

class Fp8GemmRunner {
 public:
  // `workspace_bytes` is the size of every workspace passed to run().
  static Result<Fp8GemmRunner> create(std::size_t workspace_bytes);

  Fp8GemmRunner(Fp8GemmRunner&&) noexcept;
  Fp8GemmRunner& operator=(Fp8GemmRunner&&) noexcept;
  ~Fp8GemmRunner();

  // Runs on `stream`; fails (nothing launched) on invalid args, and with
  // not_supported when cuBLASLt has no FP8 algorithm for the shape.
  Status run(const Fp8GemmArgs& args, void* workspace, cudaStream_t stream);

  // Multiplies a small product with distinct row and column scales on the
  // device and compares it with the host's sum of the same codes and
  // scales: not_supported when cuBLASLt has no such algorithm here, an
  // internal error when it has one whose result is wrong (scales ignored or
  // swapped), so a caller falls back instead of computing wrong logits.
  // Synchronizes `stream`; allocates; not for capture.
  Status self_check(void* workspace, cudaStream_t stream);

  std::size_t workspace_bytes() const;
  std::size_t cached_plans() const;

 private:
  struct Impl;
  explicit Fp8GemmRunner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cellm::cuda
