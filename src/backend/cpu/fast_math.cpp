#include "backend/cpu/fast_math.h"

#include <cmath>
#include <numbers>

#include "core/check.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CELLM_MATH_AVX2 __attribute__((target("avx2,fma")))
#endif

namespace cellm::cpu {
namespace {

// Both activations are x * sigmoid(z): SiLU with z = x, the tanh GELU with
// z = 2 k (x + 0.044715 x^3), since 0.5 (1 + tanh(u)) = sigmoid(2u).
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluC = 0.044715f;

float sigmoid_arg(float x, model::Activation act) {
  return act == model::Activation::kSilu ? x : 2.0f * kGeluK * (x + kGeluC * x * x * x);
}

#if defined(__x86_64__) || defined(__i386__)
// e^x for float lanes: x = n ln2 + r with |r| <= ln2 / 2, e^r by a degree-6
// polynomial, 2^n put into the exponent. Inputs are clamped to the range
// where the result is a normal float (below: 0 is what callers need).
CELLM_MATH_AVX2 inline __m256 exp_ps(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.4426950408889634f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // r = x - n ln2, with ln2 split in two for precision.
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

CELLM_MATH_AVX2 void gated_avx2(float* gate, const float* up, std::int64_t n,
                                model::Activation act) {
  const bool silu = act == model::Activation::kSilu;
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 k2 = _mm256_set1_ps(-2.0f * kGeluK);
  const __m256 c = _mm256_set1_ps(kGeluC);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(gate + i);
    __m256 minus_z;
    if (silu) {
      minus_z = _mm256_sub_ps(_mm256_setzero_ps(), x);
    } else {
      const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
      minus_z = _mm256_mul_ps(k2, _mm256_fmadd_ps(c, x3, x));
    }
    const __m256 y = _mm256_div_ps(x, _mm256_add_ps(one, exp_ps(minus_z)));
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(y, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-sigmoid_arg(gate[i], act))) * up[i];
}
#endif

}  // namespace

void gated_activation_fast(float* gate, const float* up, std::int64_t n, model::Activation act,
                           Isa isa) {
  CELLM_CHECK(act == model::Activation::kSilu || act == model::Activation::kGeluTanh,
              "unknown activation {}", static_cast<int>(act));
#if defined(__x86_64__) || defined(__i386__)
  if (isa == Isa::kAvx2) {
    gated_avx2(gate, up, n, act);
    return;
  }
#endif
  for (std::int64_t i = 0; i < n; ++i) {
    gate[i] = gate[i] / (1.0f + std::exp(-sigmoid_arg(gate[i], act))) * up[i];
  }
}

}  // namespace cellm::cpu
