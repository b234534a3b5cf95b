// Vector helpers shared by the x8 kernels (qgemm_x8_vnni.cpp,
// qgemm_x8k_vnni.cpp). Private to those files: every function carries the
// AVX-512 VNNI target attribute, which only code behind the run-time check
// (has_avx512_vnni) may reach.
//
// Thread-safety: pure inline functions.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#define CELLM_X8 __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni")))

namespace cellm::cpu::avx2::x8 {

CELLM_X8 inline __m256i load32(const std::uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
// Eight f16 scales as floats.
CELLM_X8 inline __m256 scales8(const std::uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// Four activation bytes in every 32-bit lane.
CELLM_X8 inline __m256i bcast4(const std::int8_t* p) {
  std::int32_t four;
  std::memcpy(&four, p, 4);
  return _mm256_set1_epi32(four);
}

}  // namespace cellm::cpu::avx2::x8

#endif
