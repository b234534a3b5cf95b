#include "backend/cuda/kernels/gemv.cuh"

#include "backend/cuda/kernels/validate_util.h"

namespace cellm::cuda {

Status GemvParams::validate() const {
  CELLM_RETURN_IF_ERROR(require_ptr(a, "gemv", "a"));
  CELLM_RETURN_IF_ERROR(require_ptr(w, "gemv", "w"));
  CELLM_RETURN_IF_ERROR(require_ptr(out, "gemv", "out"));
  if (m < 1 || m > kGemvMaxRows || n <= 0 || k <= 0 || k % 8 != 0) {
    return invalid_argument(
        "cuda gemv: m={} n={} k={} (need 1 <= m <= {}, n > 0, k a positive multiple of 8; use "
        "the cuBLASLt GEMM otherwise)",
        m, n, k, kGemvMaxRows);
  }
  if (n > (1 << 30) || lda < k || ldw < k || ldc < n || lda % 8 != 0 || ldw % 8 != 0) {
    return invalid_argument(
        "cuda gemv: lda={} ldw={} ldc={} for k={} n={} (need lda, ldw >= k and multiples of 8, "
        "ldc >= n)",
        lda, ldw, ldc, k, n);
  }
  if (mma_warps != 0 && mma_warps != 8 && mma_warps != 16) {
    return invalid_argument("cuda gemv: mma_warps {} must be 0 (the kernel chooses), 8 or 16",
                            mma_warps);
  }
  CELLM_RETURN_IF_ERROR(require_aligned16(a, "gemv", "a"));
  CELLM_RETURN_IF_ERROR(require_aligned16(w, "gemv", "w"));
  if (prologue == GemvPrologue::kRmsNorm) {
    CELLM_RETURN_IF_ERROR(require_ptr(norm_weight, "gemv", "norm_weight"));
    CELLM_RETURN_IF_ERROR(require_aligned16(norm_weight, "gemv", "norm_weight"));
    if (!(norm_eps > 0.0f) || (norm_weight_offset != 0.0f && norm_weight_offset != 1.0f)) {
      return invalid_argument("cuda gemv: norm eps {} must be positive and offset {} 0 or 1",
                              norm_eps, norm_weight_offset);
    }
  }
  const bool gated =
      epilogue == GemvEpilogue::kGatedSilu || epilogue == GemvEpilogue::kGatedGeluTanh;
  if (out_f32 && epilogue != GemvEpilogue::kStore) {
    return invalid_argument(
        "cuda gemv: float output is only for the plain store (the residual stream and the "
        "gated activation are bf16)");
  }
  CELLM_RETURN_IF_ERROR(
      require_disjoint(a, out, m, lda, k, ldc, n, out_f32 ? sizeof(float) : sizeof(bf16), "gemv"));
  if (argmax.out != nullptr) {
    CELLM_RETURN_IF_ERROR(require_ptr(argmax.partials, "gemv", "argmax.partials"));
    CELLM_RETURN_IF_ERROR(require_ptr(argmax.counter, "gemv", "argmax.counter"));
    if (m != 1 || epilogue != GemvEpilogue::kStore || !out_f32) {
      return invalid_argument(
          "cuda gemv: the argmax is taken of one row's float outputs (m={}, need 1, the plain "
          "store and out_f32); run sample_argmax on the product otherwise",
          m);
    }
  }
  if (gated && bias != nullptr) {
    return invalid_argument("cuda gemv: the gated epilogues take no bias");
  }
  if (epilogue == GemvEpilogue::kRopeScatter) {
    CELLM_RETURN_IF_ERROR(rope.validate());
    const std::int64_t qkv =
        static_cast<std::int64_t>(rope.num_heads + 2 * rope.num_kv_heads) * rope.head_dim;
    if (rope.rotary_dim != rope.head_dim || qkv != n || rope.num_tokens != m) {
      return invalid_argument(
          "cuda gemv: the rope epilogue needs a full rotary ({} of {}), n = (heads + 2 kv "
          "heads) * head_dim ({} against n={}) and one token per row ({} against m={}); use "
          "rope_scatter after the product otherwise",
          rope.rotary_dim, rope.head_dim, qkv, n, rope.num_tokens, m);
    }
    if (rope.q != out || rope.q_stride != ldc) {
      return invalid_argument(
          "cuda gemv: the rope epilogue writes q into out: rope.q and q_stride must be out and "
          "ldc");
    }
  }
  return Status::ok();
}

}  // namespace cellm::cuda
