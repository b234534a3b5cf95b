// AVX2 building blocks shared by the block-quantized kernels
// (quant_dot_avx2.cpp: the bit-exact dots; quant_tile_avx2.cpp: the float
// accumulated rows and prefill tiles). Private to those two files: every
// function carries the AVX2 target attribute, so including this header
// elsewhere would put AVX2 code where no run-time check guards it.
//
// Thread-safety: pure inline functions.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include <cstdint>

#define CELLM_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace cellm::cpu::avx2::detail {

CELLM_AVX2 inline float h2f(std::uint16_t h) {
  return _cvtsh_ss(h);
}

CELLM_AVX2 inline std::int32_t hsum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

CELLM_AVX2 inline float hsum_ps(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 16 bytes of nibbles -> 32 bytes: low nibbles (elements 0..15) then high.
CELLM_AVX2 inline __m256i unpack_nibbles(const std::uint8_t* p) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// Sum of u8 * s8 over 32 lanes, as 8 int32 lanes.
CELLM_AVX2 inline __m256i dot_u8s8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// Bit i of the 32-bit word -> byte i of 0xFF or 0x00.
CELLM_AVX2 inline __m256i bits_to_bytes(std::uint32_t bits) {
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL,
                                         0x0101010101010101LL, 0x0000000000000000LL);
  __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), shuf);
  bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfeLL));
  return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}

CELLM_AVX2 inline __m256i load32(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

}  // namespace cellm::cpu::avx2::detail

#endif
