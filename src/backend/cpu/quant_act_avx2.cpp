// AVX2 form of quantize_act (quant_dot.h): the same operations as the
// portable loop, lane by lane (max |x|, d = max / 127, q = round-to-even of
// x * (1 / d) clamped to +-127, the int sums), so both write identical
// bytes; quantize_act picks this one where the processor has AVX2.
#include <cstring>

#include "backend/cpu/quant_dot.h"

#if defined(__x86_64__) || defined(__i386__)
#include "backend/cpu/quant_avx2_inl.h"

namespace cellm::cpu::avx2 {
namespace {

using detail::hsum;

CELLM_AVX2 inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// Quantizes 32 floats with inverse scale `id` into qs; q[k] gets the int32
// quants of elements 8k..8k+7 (for the sums).
CELLM_AVX2 inline void quant32(const float* x, float id, std::int8_t* qs, __m256i* q) {
  const __m256 vid = _mm256_set1_ps(id);
  const __m256 lo = _mm256_set1_ps(-127.0f);
  const __m256 hi = _mm256_set1_ps(127.0f);
  for (int k = 0; k < 4; ++k) {
    __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), vid),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
    q[k] = _mm256_cvtps_epi32(v);
  }
  // packs interleave 128-bit halves; the permute puts elements back in order.
  const __m256i ab = _mm256_packs_epi32(q[0], q[1]);
  const __m256i cd = _mm256_packs_epi32(q[2], q[3]);
  const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd),
                                                    _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), bytes);
}

CELLM_AVX2 inline float amax_of(const float* x, int n) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask));
  return hmax(m);
}

}  // namespace

CELLM_AVX2 void quantize_act(ActKind kind, const float* x, std::int64_t cols, void* out) {
  const int bs = kind == ActKind::kQ8K ? 256 : 32;
  for (std::int64_t b = 0; b < cols / bs; ++b) {
    const float* xb = x + b * bs;
    const float d = amax_of(xb, bs) / 127.0f;
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    if (kind == ActKind::kQ8) {
      auto* blk = static_cast<ActQ8*>(out) + b;
      blk->d = d;
      __m256i q[4];
      quant32(xb, id, blk->qs, q);
      blk->sum = hsum(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]),
                                           _mm256_add_epi32(q[2], q[3])));
    } else {
      auto* blk = static_cast<ActQ8K*>(out) + b;
      blk->d = d;
      for (int s = 0; s < 8; ++s) {
        __m256i q[4];
        quant32(xb + 32 * s, id, blk->qs + 32 * s, q);
        blk->bsums[2 * s] = static_cast<std::int16_t>(hsum(_mm256_add_epi32(q[0], q[1])));
        blk->bsums[2 * s + 1] = static_cast<std::int16_t>(hsum(_mm256_add_epi32(q[2], q[3])));
      }
    }
  }
}

}  // namespace cellm::cpu::avx2

#else

namespace cellm::cpu::avx2 {
void quantize_act(ActKind kind, const float* x, std::int64_t cols, void* out) {
  cpu::quantize_act(kind, x, cols, out);
}
}  // namespace cellm::cpu::avx2

#endif
