// AVX2 forms of the quant_dot.h kernels. Only the functions marked with the
// target attribute use AVX2, so nothing here runs on a processor without it
// unless dot_kernel chose it; the file needs no special compiler flags.
// Each block's integer sum is formed in vector registers, reduced to one
// int32 and combined exactly as the scalar kernels do.
#include <cstring>

#include "backend/cpu/quant_dot.h"

#if defined(__x86_64__) || defined(__i386__)
#include "backend/cpu/quant_avx2_inl.h"

namespace cellm::cpu::avx2 {
using namespace detail;

bool compiled() {
  return true;
}

CELLM_AVX2 float dot_q4_0(const void* w, const void* a, std::int64_t cols) {
  const auto* wb = static_cast<const BlockQ4_0*>(w);
  const auto* ab = static_cast<const ActQ8*>(a);
  float acc = 0.0f;
  for (std::int64_t b = 0; b < cols / 32; ++b) {
    std::int32_t isum = hsum(dot_u8s8(unpack_nibbles(wb[b].qs), load32(ab[b].qs)));
    isum -= 8 * ab[b].sum;
    acc = combine::scaled(acc, h2f(wb[b].d), ab[b].d, isum);
  }
  return acc;
}

CELLM_AVX2 float dot_q4_1(const void* w, const void* a, std::int64_t cols) {
  const auto* wb = static_cast<const BlockQ4_1*>(w);
  const auto* ab = static_cast<const ActQ8*>(a);
  float acc = 0.0f;
  std::int64_t b = 0;
  // Two blocks a round: one reduction for both integer sums.
  for (; b + 1 < cols / 32; b += 2) {
    const __m256i p0 = dot_u8s8(unpack_nibbles(wb[b].qs), load32(ab[b].qs));
    const __m256i p1 = dot_u8s8(unpack_nibbles(wb[b + 1].qs), load32(ab[b + 1].qs));
    // hadd pairs lanes of both: reduce each half separately below.
    __m256i h = _mm256_hadd_epi32(p0, p1);  // [p0 01,23 | p1 01,23 | p0 45,67 | p1 45,67]
    h = _mm256_hadd_epi32(h, h);            // [p0 a, p1 a, ., . | p0 b, p1 b, ., .]
    const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    const std::int32_t i0 = _mm_cvtsi128_si32(s);
    const std::int32_t i1 = _mm_extract_epi32(s, 1);
    acc = combine::scaled_min(acc, h2f(wb[b].d), h2f(wb[b].m), ab[b].d, i0, ab[b].sum);
    acc = combine::scaled_min(acc, h2f(wb[b + 1].d), h2f(wb[b + 1].m), ab[b + 1].d, i1,
                              ab[b + 1].sum);
  }
  for (; b < cols / 32; ++b) {
    const std::int32_t isum = hsum(dot_u8s8(unpack_nibbles(wb[b].qs), load32(ab[b].qs)));
    acc = combine::scaled_min(acc, h2f(wb[b].d), h2f(wb[b].m), ab[b].d, isum, ab[b].sum);
  }
  return acc;
}

CELLM_AVX2 float dot_q5_0(const void* w, const void* a, std::int64_t cols) {
  const auto* wb = static_cast<const BlockQ5_0*>(w);
  const auto* ab = static_cast<const ActQ8*>(a);
  float acc = 0.0f;
  for (std::int64_t b = 0; b < cols / 32; ++b) {
    std::uint32_t qh;
    std::memcpy(&qh, wb[b].qh, 4);
    const __m256i hi = _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10));
    const __m256i q = _mm256_or_si256(unpack_nibbles(wb[b].qs), hi);
    std::int32_t isum = hsum(dot_u8s8(q, load32(ab[b].qs)));
    isum -= 16 * ab[b].sum;
    acc = combine::scaled(acc, h2f(wb[b].d), ab[b].d, isum);
  }
  return acc;
}

CELLM_AVX2 float dot_q8_0(const void* w, const void* a, std::int64_t cols) {
  const auto* wb = static_cast<const BlockQ8_0*>(w);
  const auto* ab = static_cast<const ActQ8*>(a);
  float acc = 0.0f;
  for (std::int64_t b = 0; b < cols / 32; ++b) {
    const __m256i x = load32(wb[b].qs);
    const __m256i y = load32(ab[b].qs);
    // maddubs wants unsigned x signed: move x's sign onto y.
    const __m256i p = dot_u8s8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    acc = combine::scaled(acc, h2f(wb[b].d), ab[b].d, hsum(p));
  }
  return acc;
}

namespace {

// The integer part of a Q4_K/Q5_K block: sum over sub-blocks of scale * q.x,
// with `high` (32 bytes, or null) giving Q5_K's fifth bits.
CELLM_AVX2 inline std::int32_t k4_isum(const std::uint8_t* qs, const std::uint8_t* high,
                                       const std::uint8_t* scales, const std::int8_t* x) {
  const __m256i mask = _mm256_set1_epi8(0x0F);
  __m256i acc = _mm256_setzero_si256();
  const __m256i qh = high != nullptr ? load32(high) : _mm256_setzero_si256();
  for (int j = 0; j < 4; ++j) {
    std::int32_t sc0, m0, sc1, m1;
    k_scale_min(2 * j, scales, &sc0, &m0);
    k_scale_min(2 * j + 1, scales, &sc1, &m1);
    const __m256i q = load32(qs + 32 * j);
    __m256i lo = _mm256_and_si256(q, mask);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), mask);
    if (high != nullptr) {
      const __m256i one = _mm256_set1_epi8(1);
      const __m128i c0 = _mm_cvtsi32_si128(2 * j);
      const __m128i c1 = _mm_cvtsi32_si128(2 * j + 1);
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, c0), one), 4));
      hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, c1), one), 4));
    }
    const __m256i p0 = _mm256_maddubs_epi16(lo, load32(x + 64 * j));
    const __m256i p1 = _mm256_maddubs_epi16(hi, load32(x + 64 * j + 32));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p0, _mm256_set1_epi16(static_cast<short>(sc0))));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p1, _mm256_set1_epi16(static_cast<short>(sc1))));
  }
  return hsum(acc);
}

CELLM_AVX2 inline std::int32_t k4_msum(const std::uint8_t* scales, const std::int16_t* bsums) {
  std::int32_t msum = 0;
  for (int j = 0; j < 4; ++j) {
    std::int32_t sc0, m0, sc1, m1;
    k_scale_min(2 * j, scales, &sc0, &m0);
    k_scale_min(2 * j + 1, scales, &sc1, &m1);
    msum += m0 * (bsums[4 * j] + bsums[4 * j + 1]) + m1 * (bsums[4 * j + 2] + bsums[4 * j + 3]);
  }
  return msum;
}

}  // namespace

CELLM_AVX2 float dot_q4_k(const void* w, const void* a, std::int64_t cols) {
  const auto* wb = static_cast<const BlockQ4_K*>(w);
  const auto* ab = static_cast<const ActQ8K*>(a);
  float acc = 0.0f;
  for (std::int64_t b = 0; b < cols / 256; ++b) {
    const std::int32_t isum = k4_isum(wb[b].qs, nullptr, wb[b].scales, ab[b].qs);
    const std::int32_t msum = k4_msum(wb[b].scales, ab[b].bsums);
    acc = combine::k_block(acc, h2f(wb[b].d), h2f(wb[b].dmin), ab[b].d, isum, msum);
  }
  return acc;
}

CELLM_AVX2 float dot_q5_k(const void* w, const void* a, std::int64_t cols) {
  const auto* wb = static_cast<const BlockQ5_K*>(w);
  const auto* ab = static_cast<const ActQ8K*>(a);
  float acc = 0.0f;
  for (std::int64_t b = 0; b < cols / 256; ++b) {
    const std::int32_t isum = k4_isum(wb[b].qs, wb[b].qh, wb[b].scales, ab[b].qs);
    const std::int32_t msum = k4_msum(wb[b].scales, ab[b].bsums);
    acc = combine::k_block(acc, h2f(wb[b].d), h2f(wb[b].dmin), ab[b].d, isum, msum);
  }
  return acc;
}

CELLM_AVX2 float dot_q6_k(const void* w, const void* a, std::int64_t cols) {
  const auto* wb = static_cast<const BlockQ6_K*>(w);
  const auto* ab = static_cast<const ActQ8K*>(a);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m2 = _mm256_set1_epi8(0x30);
  float acc = 0.0f;
  for (std::int64_t b = 0; b < cols / 256; ++b) {
    __m256i vacc = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      const __m256i ql0 = load32(wb[b].ql + 64 * half);
      const __m256i ql1 = load32(wb[b].ql + 64 * half + 32);
      const __m256i qh = load32(wb[b].qh + 32 * half);
      const std::int8_t* sc = wb[b].scales + 8 * half;
      const std::int8_t* x = ab[b].qs + 128 * half;
      const __m256i q1 = _mm256_or_si256(_mm256_and_si256(ql0, m4),
                                         _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2));
      const __m256i q2 = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                                         _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2));
      const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                                         _mm256_and_si256(qh, m2));
      const __m256i q4 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                         _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2));
      const __m256i qv[4] = {q1, q2, q3, q4};
      for (int k = 0; k < 4; ++k) {
        const __m256i p = _mm256_maddubs_epi16(qv[k], load32(x + 32 * k));
        // Lanes 0..7 hold elements 0..15 (scale 2k), lanes 8..15 elements 16..31 (2k + 1).
        const __m256i s = _mm256_set_m128i(_mm_set1_epi16(sc[2 * k + 1]), _mm_set1_epi16(sc[2 * k]));
        vacc = _mm256_add_epi32(vacc, _mm256_madd_epi16(p, s));
      }
    }
    std::int32_t isum = hsum(vacc);
    std::int32_t offset = 0;
    for (int g = 0; g < 16; ++g) offset += wb[b].scales[g] * ab[b].bsums[g];
    isum -= 32 * offset;
    acc = combine::scaled(acc, h2f(wb[b].d), ab[b].d, isum);
  }
  return acc;
}

}  // namespace cellm::cpu::avx2

#else  // not x86: the scalar kernels serve; dot_kernel never picks these.

namespace cellm::cpu::avx2 {
bool compiled() { return false; }
float dot_q4_0(const void* w, const void* a, std::int64_t c) { return scalar::dot_q4_0(w, a, c); }
float dot_q4_1(const void* w, const void* a, std::int64_t c) { return scalar::dot_q4_1(w, a, c); }
float dot_q5_0(const void* w, const void* a, std::int64_t c) { return scalar::dot_q5_0(w, a, c); }
float dot_q8_0(const void* w, const void* a, std::int64_t c) { return scalar::dot_q8_0(w, a, c); }
float dot_q4_k(const void* w, const void* a, std::int64_t c) { return scalar::dot_q4_k(w, a, c); }
float dot_q5_k(const void* w, const void* a, std::int64_t c) { return scalar::dot_q5_k(w, a, c); }
float dot_q6_k(const void* w, const void* a, std::int64_t c) { return scalar::dot_q6_k(w, a, c); }
}  // namespace cellm::cpu::avx2

#endif
