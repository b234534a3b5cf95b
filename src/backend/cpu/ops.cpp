#include "backend/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "core/check.h"

namespace cellm::cpu {

void rms_norm(const float* x, const float* weight, std::int64_t rows, std::int64_t dim, float eps,
              bool weight_offset, float* out) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = out + r * dim;
    double sum = 0.0;
    for (std::int64_t i = 0; i < dim; ++i) {
      sum += static_cast<double>(xr[i]) * xr[i];
    }
    const float inv = static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(dim) + eps));
    for (std::int64_t i = 0; i < dim; ++i) {
      const float g = weight_offset ? 1.0f + weight[i] : weight[i];
      yr[i] = xr[i] * inv * g;
    }
  }
}

std::vector<float> rope_inv_freq(const model::RopeSpec& rope, std::int32_t head_dim,
                                 DType table_dtype) {
  const std::int32_t dim = rope.rotary_dim > 0 ? rope.rotary_dim : head_dim;
  CELLM_CHECK(dim > 0 && dim % 2 == 0 && dim <= head_dim, "rotary dim {} of head dim {}", dim,
              head_dim);
  // Hugging Face builds these in float32 whatever the model dtype; following
  // it keeps long-context angles identical to the reference.
  const float base = static_cast<float>(rope.theta);
  std::vector<float> inv(static_cast<std::size_t>(dim / 2));
  for (std::int32_t i = 0; i < dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    inv[static_cast<std::size_t>(i)] = 1.0f / std::pow(base, exponent);
  }
  switch (rope.type) {
    case model::RopeType::kDefault: break;
    case model::RopeType::kLinear:
      for (float& f : inv) {
        f = f / static_cast<float>(rope.factor);
      }
      break;
    case model::RopeType::kLlama3: {
      const float factor = static_cast<float>(rope.factor);
      const float low = static_cast<float>(rope.low_freq_factor);
      const float high = static_cast<float>(rope.high_freq_factor);
      const float old_len = static_cast<float>(rope.original_max_position);
      const float low_wavelen = old_len / low;
      const float high_wavelen = old_len / high;
      for (float& f : inv) {
        const float wavelen = 2.0f * std::numbers::pi_v<float> / f;
        if (wavelen > low_wavelen) {
          f = f / factor;  // long wavelengths: fully interpolated
        } else if (wavelen >= high_wavelen) {
          const float smooth = (old_len / wavelen - low) / (high - low);
          f = (1.0f - smooth) * f / factor + smooth * f;
        }
      }
      break;
    }
  }
  CELLM_CHECK(
      table_dtype == DType::kF32 || table_dtype == DType::kBF16 || table_dtype == DType::kF16,
      "rope table dtype {}", dtype_name(table_dtype));
  for (float& f : inv) {
    if (table_dtype == DType::kBF16) {
      f = bf16_to_f32(f32_to_bf16(f));
    } else if (table_dtype == DType::kF16) {
      f = f16_to_f32(f32_to_f16(f));
    }
  }
  return inv;
}

void apply_rope(float* x, std::int64_t rows, std::int64_t heads, std::int64_t head_dim,
                std::span<const float> inv_freq, const std::int64_t* positions) {
  const std::int64_t half = static_cast<std::int64_t>(inv_freq.size());
  CELLM_CHECK(2 * half <= head_dim, "rope pairs {} exceed head dim {}", half, head_dim);
  std::vector<float> cos_v(static_cast<std::size_t>(half));
  std::vector<float> sin_v(static_cast<std::size_t>(half));
  for (std::int64_t r = 0; r < rows; ++r) {
    // The angle is a float32 product, as in the reference implementation.
    const float pos = static_cast<float>(positions[r]);
    for (std::int64_t i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[static_cast<std::size_t>(i)];
      cos_v[static_cast<std::size_t>(i)] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sin_v[static_cast<std::size_t>(i)] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
    for (std::int64_t h = 0; h < heads; ++h) {
      float* v = x + (r * heads + h) * head_dim;
      for (std::int64_t i = 0; i < half; ++i) {
        const float a = v[i];
        const float b = v[i + half];
        const float c = cos_v[static_cast<std::size_t>(i)];
        const float s = sin_v[static_cast<std::size_t>(i)];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
      }
    }
  }
}

float gelu_tanh(float x) {
  const double xd = x;
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return static_cast<float>(0.5 * xd * (1.0 + std::tanh(k * (xd + 0.044715 * xd * xd * xd))));
}

float silu(float x) {
  return static_cast<float>(x / (1.0 + std::exp(-static_cast<double>(x))));
}

void gated_activation(float* gate, const float* up, std::int64_t n, model::Activation act) {
  switch (act) {
    case model::Activation::kSilu:
      for (std::int64_t i = 0; i < n; ++i) {
        gate[i] = silu(gate[i]) * up[i];
      }
      return;
    case model::Activation::kGeluTanh:
      for (std::int64_t i = 0; i < n; ++i) {
        gate[i] = gelu_tanh(gate[i]) * up[i];
      }
      return;
  }
  CELLM_CHECK(false, "unknown activation {}", static_cast<int>(act));
}

void soft_cap(float* x, std::int64_t n, float cap) {
  for (std::int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(cap * std::tanh(static_cast<double>(x[i]) / cap));
  }
}

void attend_cells(const float* q, const float* k, const float* v,
                  std::span<const std::span<const std::int32_t>> row_cells,
                  const AttentionParams& params, float* out) {
  const std::int64_t rows = static_cast<std::int64_t>(row_cells.size());
  const std::int64_t heads = params.heads;
  const std::int64_t dim = params.head_dim;
  CELLM_CHECK(params.kv_heads > 0 && heads % params.kv_heads == 0, "heads {} over kv heads {}",
              heads, params.kv_heads);
  const std::int64_t group = heads / params.kv_heads;
  const std::int64_t kv_stride = static_cast<std::int64_t>(params.kv_heads) * dim;

  // Small steps (decode of a few rows) run on one thread: waking a team
  // costs more than it saves there, and a busy machine makes it far worse.
  std::int64_t work = 0;
  for (const auto& cells : row_cells) {
    work += static_cast<std::int64_t>(cells.size());
  }
  work *= heads * dim;
  constexpr std::int64_t kParallelWork = std::int64_t{1} << 16;

#pragma omp parallel if (work >= kParallelWork)
  {
    std::vector<double> scores;
    std::vector<double> acc(static_cast<std::size_t>(dim));
#pragma omp for collapse(2) schedule(dynamic, 4)
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t h = 0; h < heads; ++h) {
        const std::span<const std::int32_t> cells = row_cells[static_cast<std::size_t>(r)];
        const float* qv = q + (r * heads + h) * dim;
        float* o = out + (r * heads + h) * dim;
        std::fill(o, o + dim, 0.0f);
        if (cells.empty()) {
          continue;
        }
        const std::int64_t g = h / group;
        scores.resize(cells.size());
        double best = -std::numeric_limits<double>::infinity();
        for (std::size_t c = 0; c < cells.size(); ++c) {
          const float* kv = k + static_cast<std::int64_t>(cells[c]) * kv_stride + g * dim;
          double dot = 0.0;
          for (std::int64_t i = 0; i < dim; ++i) {
            dot += static_cast<double>(qv[i]) * kv[i];
          }
          double s = dot * params.scale;
          if (params.softcap) {
            s = *params.softcap * std::tanh(s / *params.softcap);
          }
          scores[c] = s;
          best = std::max(best, s);
        }
        double total = 0.0;
        for (double& s : scores) {
          s = std::exp(s - best);
          total += s;
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        for (std::size_t c = 0; c < cells.size(); ++c) {
          const float* vv = v + static_cast<std::int64_t>(cells[c]) * kv_stride + g * dim;
          const double w = scores[c] / total;
          for (std::int64_t i = 0; i < dim; ++i) {
            acc[static_cast<std::size_t>(i)] += w * vv[i];
          }
        }
        for (std::int64_t i = 0; i < dim; ++i) {
          o[i] = static_cast<float>(acc[static_cast<std::size_t>(i)]);
        }
      }
    }
  }
}

}  // namespace cellm::cpu
