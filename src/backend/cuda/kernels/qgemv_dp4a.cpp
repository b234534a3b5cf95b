#include "backend/cuda/kernels/qgemv_dp4a.cuh"

#include "backend/cuda/kernels/validate_util.h"

namespace cellm::cuda {
namespace {

std::int64_t round_up(std::int64_t v, std::int64_t to) {
  return (v + to - 1) / to * to;
}

// Codes a row and scales a row, rounded up so that every row of each array
// starts on a 16-byte boundary.
std::int64_t codes_ld(std::int32_t k) {
  return round_up(k, 16);
}
std::int64_t scales_ld(std::int32_t k) {
  return round_up(k / 32, 4);
}

bool aligned16(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

// [begin, end) of a Q8Rows' three arrays, for the overlap check.
bool rows_meet(const Q8Rows& x, const void* out, std::int64_t out_bytes) {
  const auto* o_begin = static_cast<const char*>(out);
  const char* o_end = o_begin + out_bytes;
  const auto meets = [&](const void* p, std::int64_t bytes) {
    const auto* b = static_cast<const char*>(p);
    return b < o_end && o_begin < b + bytes;
  };
  return meets(x.q, x.m * x.ldq) || meets(x.d, x.m * x.lds * 4) || meets(x.s, x.m * x.lds * 4);
}

Status check_rows(const Q8Rows& x, std::int32_t m, std::int32_t k, const char* op) {
  if (x.q == nullptr || x.d == nullptr || x.s == nullptr) {
    return invalid_argument("cuda {}: the int8 rows' codes, scales or sums are null", op);
  }
  if (!aligned16(x.q) || !aligned16(x.d) || !aligned16(x.s) || x.ldq % 16 != 0 || x.lds % 4 != 0) {
    return invalid_argument(
        "cuda {}: the int8 rows need 16-byte aligned arrays and strides (ldq={} bytes, lds={} "
        "floats); lay them out with q8_rows_in",
        op, x.ldq, x.lds);
  }
  if (m < 1 || m > x.m || k <= 0 || k % 32 != 0 || k > x.k || x.ldq < k || x.lds < k / 32) {
    return invalid_argument(
        "cuda {}: {} rows of {} columns do not fit int8 rows of m={} k={} (ldq={}, lds={}); need "
        "k a positive multiple of 32",
        op, m, k, x.m, x.k, x.ldq, x.lds);
  }
  return Status::ok();
}

}  // namespace

std::size_t q8_rows_bytes(std::int32_t m, std::int32_t k) {
  return static_cast<std::size_t>(m * codes_ld(k) + 2 * m * scales_ld(k) * 4);
}

Q8Rows q8_rows_in(void* scratch, std::int32_t m, std::int32_t k) {
  Q8Rows x;
  auto* base = static_cast<std::uint8_t*>(scratch);
  x.m = m;
  x.k = k;
  x.ldq = codes_ld(k);
  x.lds = scales_ld(k);
  x.q = reinterpret_cast<std::int8_t*>(base);
  x.d = reinterpret_cast<float*>(base + m * x.ldq);
  x.s = x.d + m * x.lds;
  return x;
}

Status QuantizeQ8Params::validate() const {
  CELLM_RETURN_IF_ERROR(require_ptr(a, "quantize_q8", "a"));
  CELLM_RETURN_IF_ERROR(require_aligned16(a, "quantize_q8", "a"));
  if (lda < k || lda % 8 != 0) {
    return invalid_argument("cuda quantize_q8: lda={} for k={} (need lda >= k, a multiple of 8)",
                            lda, k);
  }
  CELLM_RETURN_IF_ERROR(check_rows(out, m, k, "quantize_q8"));
  if (rows_meet(out, a, ((m - 1) * lda + k) * 2)) {
    return invalid_argument("cuda quantize_q8: `a` and the int8 rows overlap");
  }
  return Status::ok();
}

bool qgemv_dp4a_supported(QuantType type) {
  switch (type) {
    case QuantType::kQ4_0:
    case QuantType::kQ4_1:
    case QuantType::kQ8_0:
    case QuantType::kQ4_K:
    case QuantType::kQ5_K:
    case QuantType::kQ6_K:
    case QuantType::kQ6_K_R8: return true;
    default: return false;
  }
}

Status validate_qgemv_dp4a(const QGemvParams& p, const Q8Rows& act) {
  CELLM_RETURN_IF_ERROR(p.validate());
  if (!qgemv_dp4a_supported(p.type)) {
    return invalid_argument(
        "cuda qgemv_dp4a: block type {} has no int8 path (Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K, "
        "Q6_K_R8 = 1014); use launch_qgemv",
        static_cast<std::int32_t>(p.type));
  }
  CELLM_RETURN_IF_ERROR(check_rows(act, p.m, p.k, "qgemv_dp4a"));
  const std::int64_t out_bytes = ((p.m - 1) * p.ldc + p.n) * (p.out_f32 ? 4 : 2);
  if (rows_meet(act, p.out, out_bytes)) {
    return invalid_argument("cuda qgemv_dp4a: `out` and the int8 rows overlap");
  }
  const std::int64_t a_bytes = ((p.m - 1) * p.lda + p.k) * 2;
  if (rows_meet(act, p.a, a_bytes)) {
    return invalid_argument("cuda qgemv_dp4a: `a` and the int8 rows overlap");
  }
  return Status::ok();
}

}  // namespace cellm::cuda
