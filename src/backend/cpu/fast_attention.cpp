#include "backend/cpu/fast_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CELLM_ATTN_AVX2 __attribute__((target("avx2,fma")))
#define CELLM_ATTN_INLINE __attribute__((always_inline)) inline
#define CELLM_ATTN_AVX512 __attribute__((target("avx2,fma,avx512f")))
#endif

namespace cellm::cpu {
namespace {

// Heads scored together against one key: their sums stay in registers while
// the key's vectors are loaded once (the heads of a group read the same key).
constexpr std::int64_t kHeadBlock = 4;
// Value dimensions a weighted sum keeps in registers across the cells: eight
// AVX2 vectors.
constexpr std::int64_t kDimBlock = 64;

// The shape of one call: a row's heads [h0, h1), all in KV group g.
struct HeadSpan {
  std::int64_t g = 0;
  std::int64_t h0 = 0;
  std::int64_t h1 = 0;
};

float dot_scalar(const float* a, const float* b, std::int64_t n) {
  float s = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

void axpy_scalar(float* y, float a, const float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// Softmax of each head's scores in place: the maximum, exp and total in cell
// order, then the scaling, as every ISA's path does it.
void softmax_rows(float* scores, std::int64_t rows, std::int64_t n) {
  for (std::int64_t hh = 0; hh < rows; ++hh) {
    float* s = scores + hh * n;
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
}

float capped(float s, const AttentionParams& params) {
  return params.softcap ? *params.softcap * std::tanh(s / *params.softcap) : s;
}

void attend_scalar(const float* q, const float* k, const float* v,
                   std::span<const std::int32_t> cells, const AttentionParams& params,
                   const HeadSpan& span, float* out, float* scores) {
  const std::int64_t dim = params.head_dim;
  const std::int64_t kv_stride = static_cast<std::int64_t>(params.kv_heads) * dim;
  const auto n = static_cast<std::int64_t>(cells.size());
  const std::int64_t heads = span.h1 - span.h0;
  for (std::int64_t c = 0; c < n; ++c) {
    const float* kc = k + static_cast<std::int64_t>(cells[static_cast<std::size_t>(c)]) * kv_stride +
                      span.g * dim;
    for (std::int64_t hh = 0; hh < heads; ++hh) {
      scores[hh * n + c] = capped(dot_scalar(q + (span.h0 + hh) * dim, kc, dim) * params.scale,
                                  params);
    }
  }
  softmax_rows(scores, heads, n);
  for (std::int64_t c = 0; c < n; ++c) {
    const float* vc = v + static_cast<std::int64_t>(cells[static_cast<std::size_t>(c)]) * kv_stride +
                      span.g * dim;
    for (std::int64_t hh = 0; hh < heads; ++hh) {
      axpy_scalar(out + (span.h0 + hh) * dim, scores[hh * n + c], vc, dim);
    }
  }
}

#if defined(__x86_64__) || defined(__i386__)
CELLM_ATTN_AVX2 CELLM_ATTN_INLINE float hsum8(__m256 s) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// The dot products of `heads` (at most kHeadBlock) query heads with one key.
// Each head's sum has one fixed shape whatever the block: two accumulators
// over 16-float steps, an 8-float step into the first, their sum, the
// horizontal sum, then the scalar tail; so a head's score does not depend on
// which heads share its block.
CELLM_ATTN_AVX2 CELLM_ATTN_INLINE void dot_heads(const float* q, std::int64_t dim,
                                                 std::int64_t heads, const float* kc,
                                                 float* out) {
  __m256 s0[kHeadBlock];
  __m256 s1[kHeadBlock];
  for (std::int64_t hh = 0; hh < kHeadBlock; ++hh) {
    s0[hh] = _mm256_setzero_ps();
    s1[hh] = _mm256_setzero_ps();
  }
  std::int64_t i = 0;
  for (; i + 16 <= dim; i += 16) {
    const __m256 k0 = _mm256_loadu_ps(kc + i);
    const __m256 k1 = _mm256_loadu_ps(kc + i + 8);
    for (std::int64_t hh = 0; hh < kHeadBlock; ++hh) {
      if (hh < heads) {
        const float* qh = q + hh * dim;
        s0[hh] = _mm256_fmadd_ps(_mm256_loadu_ps(qh + i), k0, s0[hh]);
        s1[hh] = _mm256_fmadd_ps(_mm256_loadu_ps(qh + i + 8), k1, s1[hh]);
      }
    }
  }
  for (; i + 8 <= dim; i += 8) {
    const __m256 k0 = _mm256_loadu_ps(kc + i);
    for (std::int64_t hh = 0; hh < kHeadBlock; ++hh) {
      if (hh < heads) s0[hh] = _mm256_fmadd_ps(_mm256_loadu_ps(q + hh * dim + i), k0, s0[hh]);
    }
  }
  for (std::int64_t hh = 0; hh < heads; ++hh) {
    float s = hsum8(_mm256_add_ps(s0[hh], s1[hh]));
    for (std::int64_t j = i; j < dim; ++j) s += q[hh * dim + j] * kc[j];
    out[hh] = s;
  }
}

// out[0, width) = sum over the cells, in cell order, of p[c] * v_c[0, width),
// one fused multiply-add per cell and element from zero: the additions of
// an axpy per cell onto a zeroed row, with the row held in registers.
template <int kVectors>
CELLM_ATTN_AVX2 CELLM_ATTN_INLINE void weighted_sum(const float* p, const float* v,
                                                    std::span<const std::int32_t> cells,
                                                    std::int64_t stride, float* out) {
  __m256 acc[kVectors];
  for (int j = 0; j < kVectors; ++j) acc[j] = _mm256_setzero_ps();
  const auto n = static_cast<std::int64_t>(cells.size());
  for (std::int64_t c = 0; c < n; ++c) {
    const float* vc = v + static_cast<std::int64_t>(cells[static_cast<std::size_t>(c)]) * stride;
    const __m256 pc = _mm256_set1_ps(p[c]);
    for (int j = 0; j < kVectors; ++j) {
      acc[j] = _mm256_fmadd_ps(pc, _mm256_loadu_ps(vc + 8 * j), acc[j]);
    }
  }
  for (int j = 0; j < kVectors; ++j) _mm256_storeu_ps(out + 8 * j, acc[j]);
}

// weighted_sum for up to kHeadBlock heads of one KV group at once, on
// AVX-512: 64 dimensions of every head in registers (4 x 4 vectors of 16),
// so each cell's value row is loaded once for the whole block instead of once
// per head. Each element still takes one fused multiply-add per cell, in cell
// order, from zero: the bits of weighted_sum.
CELLM_ATTN_AVX512 void weighted_sums_avx512(const float* scores, std::int64_t heads,
                                            const float* v, std::span<const std::int32_t> cells,
                                            std::int64_t stride, float* out, std::int64_t dim) {
  constexpr int kVectors = static_cast<int>(kDimBlock / 16);
  const auto n = static_cast<std::int64_t>(cells.size());
  __m512 acc[kHeadBlock][kVectors];
  for (auto& head : acc) {
    for (__m512& a : head) a = _mm512_setzero_ps();
  }
  for (std::int64_t c = 0; c < n; ++c) {
    const float* vc = v + static_cast<std::int64_t>(cells[static_cast<std::size_t>(c)]) * stride;
    __m512 vv[kVectors];
    for (int j = 0; j < kVectors; ++j) vv[j] = _mm512_loadu_ps(vc + 16 * j);
    for (std::int64_t hh = 0; hh < kHeadBlock; ++hh) {
      if (hh < heads) {
        const __m512 pc = _mm512_set1_ps(scores[hh * n + c]);
        for (int j = 0; j < kVectors; ++j) acc[hh][j] = _mm512_fmadd_ps(pc, vv[j], acc[hh][j]);
      }
    }
  }
  for (std::int64_t hh = 0; hh < heads; ++hh) {
    for (int j = 0; j < kVectors; ++j) _mm512_storeu_ps(out + hh * dim + 16 * j, acc[hh][j]);
  }
}

bool has_avx512f() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return has;
}

CELLM_ATTN_AVX2 void attend_avx2(const float* q, const float* k, const float* v,
                                 std::span<const std::int32_t> cells,
                                 const AttentionParams& params, const HeadSpan& span, float* out,
                                 float* scores) {
  const std::int64_t dim = params.head_dim;
  const std::int64_t kv_stride = static_cast<std::int64_t>(params.kv_heads) * dim;
  const auto n = static_cast<std::int64_t>(cells.size());
  const std::int64_t heads = span.h1 - span.h0;
  float dots[kHeadBlock];
  for (std::int64_t c = 0; c < n; ++c) {
    const float* kc = k + static_cast<std::int64_t>(cells[static_cast<std::size_t>(c)]) * kv_stride +
                      span.g * dim;
    for (std::int64_t b = 0; b < heads; b += kHeadBlock) {
      const std::int64_t count = std::min(kHeadBlock, heads - b);
      dot_heads(q + (span.h0 + b) * dim, dim, count, kc, dots);
      for (std::int64_t hh = 0; hh < count; ++hh) {
        scores[(b + hh) * n + c] = capped(dots[hh] * params.scale, params);
      }
    }
  }
  softmax_rows(scores, heads, n);
  const float* vg = v + span.g * dim;
  std::int64_t wide = 0;  // dimensions the AVX-512 blocks already summed
  if (has_avx512f()) {
    wide = dim / kDimBlock * kDimBlock;
    for (std::int64_t b = 0; b < heads; b += kHeadBlock) {
      for (std::int64_t d = 0; d < wide; d += kDimBlock) {
        weighted_sums_avx512(scores + b * n, std::min(kHeadBlock, heads - b), vg + d, cells,
                             kv_stride, out + (span.h0 + b) * dim + d, dim);
      }
    }
  }
  for (std::int64_t hh = 0; hh < heads; ++hh) {
    const float* p = scores + hh * n;
    float* o = out + (span.h0 + hh) * dim;
    std::int64_t d = wide;
    for (; d + kDimBlock <= dim; d += kDimBlock) weighted_sum<8>(p, vg + d, cells, kv_stride, o + d);
    for (; d + 8 <= dim; d += 8) weighted_sum<1>(p, vg + d, cells, kv_stride, o + d);
    if (d < dim) {
      // Dimensions past the last whole vector: the scalar axpy per cell.
      std::fill(o + d, o + dim, 0.0f);
      for (std::int64_t c = 0; c < n; ++c) {
        const float* vc =
            vg + static_cast<std::int64_t>(cells[static_cast<std::size_t>(c)]) * kv_stride;
        axpy_scalar(o + d, p[c], vc + d, dim - d);
      }
    }
  }
}
#endif

}  // namespace

void attend_heads_fast(const float* q, const float* k, const float* v,
                       std::span<const std::int32_t> cells, const AttentionParams& params,
                       Isa isa, std::int32_t head_begin, std::int32_t head_end, float* out,
                       std::vector<float>& scratch) {
  const std::int64_t heads = params.heads;
  const std::int64_t dim = params.head_dim;
  CELLM_CHECK(params.kv_heads > 0 && heads % params.kv_heads == 0, "heads {} over kv heads {}",
              heads, params.kv_heads);
  CELLM_CHECK(0 <= head_begin && head_begin <= head_end && head_end <= heads,
              "heads [{}, {}) of {}", head_begin, head_end, heads);
  const std::int64_t group = heads / params.kv_heads;
  std::fill(out + head_begin * dim, out + head_end * dim, 0.0f);
  const auto n = static_cast<std::int64_t>(cells.size());
  if (n == 0 || head_begin == head_end) return;
  scratch.resize(static_cast<std::size_t>(std::min<std::int64_t>(group, head_end - head_begin) * n));
  // One KV group at a time: its heads score against each key together.
  for (std::int64_t h0 = head_begin; h0 < head_end;) {
    const std::int64_t g = h0 / group;
    const HeadSpan span{g, h0, std::min<std::int64_t>(head_end, (g + 1) * group)};
#if defined(__x86_64__) || defined(__i386__)
    if (isa == Isa::kAvx2) {
      attend_avx2(q, k, v, cells, params, span, out, scratch.data());
      h0 = span.h1;
      continue;
    }
#endif
    attend_scalar(q, k, v, cells, params, span, out, scratch.data());
    h0 = span.h1;
  }
}

void attend_row_fast(const float* q, const float* k, const float* v,
                     std::span<const std::int32_t> cells, const AttentionParams& params, Isa isa,
                     float* out, std::vector<float>& scratch) {
  attend_heads_fast(q, k, v, cells, params, isa, 0, params.heads, out, scratch);
}

}  // namespace cellm::cpu
