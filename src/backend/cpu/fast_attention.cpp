#include "backend/cpu/fast_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CELLM_ATTN_AVX2 __attribute__((target("avx2,fma")))
#endif

namespace cellm::cpu {
namespace {

float dot_scalar(const float* a, const float* b, std::int64_t n) {
  float s = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

void axpy_scalar(float* y, float a, const float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

#if defined(__x86_64__) || defined(__i386__)
CELLM_ATTN_AVX2 float dot_avx2(const float* a, const float* b, std::int64_t n) {
  __m256 s0 = _mm256_setzero_ps();
  __m256 s1 = _mm256_setzero_ps();
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  }
  const __m256 s = _mm256_add_ps(s0, s1);
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  float out = _mm_cvtss_f32(h);
  for (; i < n; ++i) out += a[i] * b[i];
  return out;
}

CELLM_ATTN_AVX2 void axpy_avx2(float* y, float a, const float* x, std::int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += a * x[i];
}
#endif

}  // namespace

void attend_row_fast(const float* q, const float* k, const float* v,
                     std::span<const std::int32_t> cells, const AttentionParams& params, Isa isa,
                     float* out, std::vector<float>& scratch) {
  const std::int64_t heads = params.heads;
  const std::int64_t dim = params.head_dim;
  CELLM_CHECK(params.kv_heads > 0 && heads % params.kv_heads == 0, "heads {} over kv heads {}",
              heads, params.kv_heads);
  const std::int64_t group = heads / params.kv_heads;
  const std::int64_t kv_stride = static_cast<std::int64_t>(params.kv_heads) * dim;
  std::fill(out, out + heads * dim, 0.0f);
  const auto n = static_cast<std::int64_t>(cells.size());
  if (n == 0) return;
  auto dot = dot_scalar;
  auto axpy = axpy_scalar;
#if defined(__x86_64__) || defined(__i386__)
  if (isa == Isa::kAvx2) {
    dot = dot_avx2;
    axpy = axpy_avx2;
  }
#endif
  scratch.resize(static_cast<std::size_t>(group * n));
  for (std::int64_t g = 0; g < params.kv_heads; ++g) {
    // Scores of the group's heads, head-major: scratch[hh * n + c].
    for (std::int64_t c = 0; c < n; ++c) {
      const float* kc = k + static_cast<std::int64_t>(cells[static_cast<std::size_t>(c)]) * kv_stride + g * dim;
      for (std::int64_t hh = 0; hh < group; ++hh) {
        float s = dot(q + (g * group + hh) * dim, kc, dim) * params.scale;
        if (params.softcap) s = *params.softcap * std::tanh(s / *params.softcap);
        scratch[static_cast<std::size_t>(hh * n + c)] = s;
      }
    }
    for (std::int64_t hh = 0; hh < group; ++hh) {
      float* s = scratch.data() + hh * n;
      float best = -std::numeric_limits<float>::infinity();
      for (std::int64_t c = 0; c < n; ++c) best = std::max(best, s[c]);
      float total = 0.0f;
      for (std::int64_t c = 0; c < n; ++c) {
        s[c] = std::exp(s[c] - best);
        total += s[c];
      }
      const float inv = 1.0f / total;
      for (std::int64_t c = 0; c < n; ++c) s[c] *= inv;
    }
    for (std::int64_t c = 0; c < n; ++c) {
      const float* vc = v + static_cast<std::int64_t>(cells[static_cast<std::size_t>(c)]) * kv_stride + g * dim;
      for (std::int64_t hh = 0; hh < group; ++hh) {
        axpy(out + (g * group + hh) * dim, scratch[static_cast<std::size_t>(hh * n + c)], vc, dim);
      }
    }
  }
}

}  // namespace cellm::cpu
