// The x8 layout's kernels for the K types (qmatrix_x8.h), AVX-512 VNNI with
// 256-bit vectors. Per 32-element (Q4_K) or 16-element (Q6_K) sub-block,
// vpdpbusd gives the eight rows' integer dots in one vector; the rows'
// sub-block scales (one vector of eight) weight them in int32, and the
// super-block's f16 scales and the token's scale turn the sum into floats
// once per 256 elements. Q4_K's mins and Q6_K's -32 offset come from the
// token's 16-element sums. Only called where the VNNI check passed.
#include <cstring>

#include "backend/cpu/qmatrix_x8.h"

#if defined(__x86_64__) || defined(__i386__)
#include "backend/cpu/x8_vnni_inl.h"


namespace cellm::cpu::avx2 {
namespace {

using x8::bcast4;
using x8::load32;
using x8::scales8;
CELLM_X8 inline __m256i u8x8(const std::uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
CELLM_X8 inline __m256i s8x8(const std::uint8_t* p) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// Q4_K group block: d[8], dmin[8] (f16), scales[8 sub][8 rows], mins[8][8]
// (u8), then 4 chunks x 8 vectors of nibbles.
template <int N>
CELLM_X8 void q4k_rows(const std::uint8_t* group, std::int64_t blocks,
                        const std::uint8_t* const* acts, float* out) {
  constexpr std::size_t kBytes = 32 + 64 + 64 + 1024;
  const ActQ8K* a[N];
  for (int i = 0; i < N; ++i) a[i] = reinterpret_cast<const ActQ8K*>(acts[i]);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc[N];
  for (int i = 0; i < N; ++i) acc[i] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint8_t* blk = group + static_cast<std::size_t>(b) * kBytes;
    const std::uint8_t* sc = blk + 32;
    const std::uint8_t* mn = blk + 96;
    const std::uint8_t* q = blk + 160;
    __m256i isum[N], msum[N];
    for (int i = 0; i < N; ++i) {
      isum[i] = _mm256_setzero_si256();
      msum[i] = _mm256_setzero_si256();
      const std::int16_t* bs = a[i][b].bsums;
      for (int s = 0; s < 8; ++s) {
        msum[i] = _mm256_add_epi32(
            msum[i], _mm256_mullo_epi32(u8x8(mn + 8 * s), _mm256_set1_epi32(bs[2 * s] + bs[2 * s + 1])));
      }
    }
    for (int j = 0; j < 4; ++j) {
      __m256i lo[8], hi[8];
      for (int g = 0; g < 8; ++g) {
        const __m256i p = load32(q + 32 * (8 * j + g));
        lo[g] = _mm256_and_si256(p, m4);
        hi[g] = _mm256_and_si256(_mm256_srli_epi16(p, 4), m4);
      }
      const __m256i s0 = u8x8(sc + 8 * (2 * j));
      const __m256i s1 = u8x8(sc + 8 * (2 * j + 1));
      for (int i = 0; i < N; ++i) {
        const std::int8_t* x = a[i][b].qs + 64 * j;
        __m256i d0 = _mm256_setzero_si256();
        __m256i d1 = _mm256_setzero_si256();
        for (int g = 0; g < 8; ++g) {
          d0 = _mm256_dpbusd_epi32(d0, lo[g], bcast4(x + 4 * g));
          d1 = _mm256_dpbusd_epi32(d1, hi[g], bcast4(x + 32 + 4 * g));
        }
        isum[i] = _mm256_add_epi32(isum[i], _mm256_add_epi32(_mm256_mullo_epi32(d0, s0),
                                                             _mm256_mullo_epi32(d1, s1)));
      }
    }
    const __m256 d = scales8(blk);
    const __m256 dmin = scales8(blk + 16);
    for (int i = 0; i < N; ++i) {
      const __m256 da = _mm256_set1_ps(a[i][b].d);
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i]), _mm256_mul_ps(d, da), acc[i]);
      acc[i] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum[i]), _mm256_mul_ps(dmin, da), acc[i]);
    }
  }
  for (int i = 0; i < N; ++i) _mm256_storeu_ps(out + i * kX8Rows, acc[i]);
}

// Q6_K group block: d[8] (f16), scales[16 sub][8 rows] (s8), 4 chunks x 8
// vectors of low nibbles, then 4 chunks x 4 vectors of 2-bit high parts.
template <int N>
CELLM_X8 void q6k_rows(const std::uint8_t* group, std::int64_t blocks,
                        const std::uint8_t* const* acts, float* out) {
  constexpr std::size_t kBytes = 16 + 128 + 1024 + 512;
  const ActQ8K* a[N];
  for (int i = 0; i < N; ++i) a[i] = reinterpret_cast<const ActQ8K*>(acts[i]);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m2 = _mm256_set1_epi8(0x30);
  __m256 acc[N];
  for (int i = 0; i < N; ++i) acc[i] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint8_t* blk = group + static_cast<std::size_t>(b) * kBytes;
    const std::uint8_t* sc = blk + 16;
    const std::uint8_t* ql = blk + 144;
    const std::uint8_t* qh = blk + 144 + 1024;
    __m256i isum[N];
    for (int i = 0; i < N; ++i) {
      // The -32 of every quant: 32 * sum over sub-blocks of scale * token sum.
      __m256i off = _mm256_setzero_si256();
      for (int s = 0; s < 16; ++s) {
        off = _mm256_add_epi32(off, _mm256_mullo_epi32(s8x8(sc + 8 * s),
                                                       _mm256_set1_epi32(a[i][b].bsums[s])));
      }
      isum[i] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(off, 5));
    }
    for (int j = 0; j < 4; ++j) {
      __m256i v[16];
      for (int g = 0; g < 8; ++g) {
        const __m256i p = load32(ql + 32 * (8 * j + g));
        v[g] = _mm256_and_si256(p, m4);
        v[8 + g] = _mm256_and_si256(_mm256_srli_epi16(p, 4), m4);
      }
      for (int h = 0; h < 4; ++h) {
        const __m256i hv = load32(qh + 32 * (4 * j + h));
        v[4 * h + 0] = _mm256_or_si256(v[4 * h + 0], _mm256_and_si256(_mm256_slli_epi16(hv, 4), m2));
        v[4 * h + 1] = _mm256_or_si256(v[4 * h + 1], _mm256_and_si256(_mm256_slli_epi16(hv, 2), m2));
        v[4 * h + 2] = _mm256_or_si256(v[4 * h + 2], _mm256_and_si256(hv, m2));
        v[4 * h + 3] = _mm256_or_si256(v[4 * h + 3], _mm256_and_si256(_mm256_srli_epi16(hv, 2), m2));
      }
      for (int u = 0; u < 4; ++u) {
        const __m256i s = s8x8(sc + 8 * (4 * j + u));
        for (int i = 0; i < N; ++i) {
          const std::int8_t* x = a[i][b].qs + 64 * j + 16 * u;
          __m256i dsum = _mm256_setzero_si256();
          for (int t = 0; t < 4; ++t) dsum = _mm256_dpbusd_epi32(dsum, v[4 * u + t], bcast4(x + 4 * t));
          isum[i] = _mm256_add_epi32(isum[i], _mm256_mullo_epi32(dsum, s));
        }
      }
    }
    const __m256 d = scales8(blk);
    for (int i = 0; i < N; ++i) {
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i]),
                               _mm256_mul_ps(d, _mm256_set1_ps(a[i][b].d)), acc[i]);
    }
  }
  for (int i = 0; i < N; ++i) _mm256_storeu_ps(out + i * kX8Rows, acc[i]);
}

}  // namespace

CELLM_X8 void x8_q4_k(const std::uint8_t* g, std::int64_t blocks, const std::uint8_t* const* a,
                       int n, float* out) {
  switch (n) {
    case 8: q4k_rows<8>(g, blocks, a, out); return;
    case 7: q4k_rows<7>(g, blocks, a, out); return;
    case 6: q4k_rows<6>(g, blocks, a, out); return;
    case 5: q4k_rows<5>(g, blocks, a, out); return;
    case 4: q4k_rows<4>(g, blocks, a, out); return;
    case 3: q4k_rows<3>(g, blocks, a, out); return;
    case 2: q4k_rows<2>(g, blocks, a, out); return;
    default: q4k_rows<1>(g, blocks, a, out); return;
  }
}

CELLM_X8 void x8_q6_k(const std::uint8_t* g, std::int64_t blocks, const std::uint8_t* const* a,
                       int n, float* out) {
  switch (n) {
    case 8: q6k_rows<8>(g, blocks, a, out); return;
    case 7: q6k_rows<7>(g, blocks, a, out); return;
    case 6: q6k_rows<6>(g, blocks, a, out); return;
    case 5: q6k_rows<5>(g, blocks, a, out); return;
    case 4: q6k_rows<4>(g, blocks, a, out); return;
    case 3: q6k_rows<3>(g, blocks, a, out); return;
    case 2: q6k_rows<2>(g, blocks, a, out); return;
    default: q6k_rows<1>(g, blocks, a, out); return;
  }
}

}  // namespace cellm::cpu::avx2

#else

namespace cellm::cpu::avx2 {
void x8_q4_k(const std::uint8_t*, std::int64_t, const std::uint8_t* const*, int, float*) {}
void x8_q6_k(const std::uint8_t*, std::int64_t, const std::uint8_t* const*, int, float*) {}
}  // namespace cellm::cpu::avx2

#endif
