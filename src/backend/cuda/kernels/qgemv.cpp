#include "backend/cuda/kernels/qgemv.cuh"

#include "backend/cuda/kernels/validate_util.h"

namespace cellm::cuda {
namespace {

// Q4_K, Q5_K and FP8 read their rows in 4-byte words; the others in 2-byte ones.
std::int64_t word_bytes(QuantType type) {
  return type == QuantType::kQ4_K || type == QuantType::kQ5_K || type == QuantType::kF8_E4M3 ? 4
                                                                                             : 2;
}

// FP8 rows need their scales; the block types carry theirs.
Status check_scales(QuantType type, const RowScales& s, std::int64_t cols, const char* op) {
  if (type != QuantType::kF8_E4M3) return Status::ok();
  if (s.scales == nullptr || s.cols <= 0 || s.cols % 8 != 0 ||
      s.ld < (cols + s.cols - 1) / s.cols) {
    return invalid_argument(
        "cuda {}: FP8 rows need scales (got {}, one per {} columns, {} a row; need a positive "
        "multiple of 8 columns and at least {} a row)",
        op, static_cast<const void*>(s.scales), s.cols, s.ld,
        s.cols > 0 ? (cols + s.cols - 1) / s.cols : cols);
  }
  return Status::ok();
}

}  // namespace

bool quant_type_supported(std::uint32_t raw) {
  switch (static_cast<QuantType>(raw)) {
    case QuantType::kQ4_0:
    case QuantType::kQ4_1:
    case QuantType::kQ5_0:
    case QuantType::kQ8_0:
    case QuantType::kQ4_K:
    case QuantType::kQ5_K:
    case QuantType::kQ6_K:
    case QuantType::kQ5_1:
    case QuantType::kQ2_K:
    case QuantType::kQ3_K:
    case QuantType::kIQ4_XS:
    case QuantType::kF8_E4M3:
    case QuantType::kQ6_K_R8: return true;
  }
  return false;
}

Status QGemvParams::validate() const {
  CELLM_RETURN_IF_ERROR(require_ptr(a, "qgemv", "a"));
  CELLM_RETURN_IF_ERROR(require_ptr(w, "qgemv", "w"));
  CELLM_RETURN_IF_ERROR(require_ptr(out, "qgemv", "out"));
  if (!quant_type_supported(static_cast<std::uint32_t>(type))) {
    return invalid_argument(
        "cuda qgemv: block type {} is not one the kernel decodes (Q4_0, Q4_1, "
        "Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, FP8 E4M3, Q6_K_R8 = 1014)",
        static_cast<std::int32_t>(type));
  }
  const int elems = quant_block_elems(type);
  if (m < 1 || m > kQGemvMaxRows || n <= 0 || k <= 0 || k % elems != 0) {
    return invalid_argument(
        "cuda qgemv: m={} n={} k={} (need 1 <= m <= {}, n > 0, k a positive multiple of the "
        "block's {} elements)",
        m, n, k, kQGemvMaxRows, elems);
  }
  const std::int64_t row_bytes = static_cast<std::int64_t>(k / elems) * quant_block_bytes(type);
  const std::int64_t word = word_bytes(type);
  if (ldw_bytes < row_bytes || ldw_bytes % word != 0 ||
      reinterpret_cast<std::uintptr_t>(w) % static_cast<std::uintptr_t>(word) != 0) {
    return invalid_argument(
        "cuda qgemv: weight rows of {} bytes {} apart at {} (need a stride of at least the row "
        "and rows aligned to {} bytes)",
        row_bytes, ldw_bytes, w, word);
  }
  if (lda < k || lda % 8 != 0 || ldc < n) {
    return invalid_argument(
        "cuda qgemv: lda={} ldc={} for k={} n={} (need lda >= k and a multiple of 8, ldc >= n)",
        lda, ldc, k, n);
  }
  CELLM_RETURN_IF_ERROR(check_scales(type, scales, k, "qgemv"));
  CELLM_RETURN_IF_ERROR(require_aligned16(a, "qgemv", "a"));
  CELLM_RETURN_IF_ERROR(
      require_disjoint(a, out, m, lda, k, ldc, n, out_f32 ? sizeof(float) : sizeof(bf16), "qgemv"));
  return Status::ok();
}

Status DequantParams::validate() const {
  CELLM_RETURN_IF_ERROR(require_ptr(w, "dequantize", "w"));
  CELLM_RETURN_IF_ERROR(require_ptr(out, "dequantize", "out"));
  if (!quant_type_supported(static_cast<std::uint32_t>(type))) {
    return invalid_argument("cuda dequantize: block type {} is not one the kernels decode",
                            static_cast<std::int32_t>(type));
  }
  const int elems = quant_block_elems(type);
  const std::int64_t row_bytes = static_cast<std::int64_t>(cols / elems) * quant_block_bytes(type);
  const std::int64_t word = word_bytes(type);
  if (rows <= 0 || cols <= 0 || cols % elems != 0 || ldw_bytes < row_bytes ||
      ldw_bytes % word != 0 || ldo < cols || ldo % 8 != 0) {
    return invalid_argument(
        "cuda dequantize: {} rows of {} columns, {} bytes apart, out {} apart (need whole "
        "{}-element "
        "blocks, a stride of at least {} bytes in {}-byte words, ldo >= cols and a multiple of 8)",
        rows, cols, ldw_bytes, ldo, elems, row_bytes, word);
  }
  CELLM_RETURN_IF_ERROR(check_scales(type, scales, cols, "dequantize"));
  return require_aligned16(out, "dequantize", "out");
}

}  // namespace cellm::cuda
