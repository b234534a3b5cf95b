#include "backend/cuda/rope_table.h"

#include <cmath>
#include <numbers>

namespace cellm::cuda {

int rope_rotary_dim(const model::RopeSpec& rope, int head_dim) {
  return rope.rotary_dim > 0 ? rope.rotary_dim : head_dim;
}

std::vector<float> rope_inv_freq(const model::RopeSpec& rope, int head_dim) {
  const int dim = rope_rotary_dim(rope, head_dim);
  std::vector<float> inv(static_cast<std::size_t>(dim / 2));
  for (int i = 0; i < dim / 2; ++i) {
    // Hugging Face evaluates base ** (2i / dim) in float32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    double f = 1.0 / static_cast<double>(std::pow(static_cast<float>(rope.theta), exponent));
    switch (rope.type) {
      case model::RopeType::kDefault: break;
      case model::RopeType::kLinear: f /= rope.factor; break;
      case model::RopeType::kLlama3: {
        const double low_wavelen = rope.original_max_position / rope.low_freq_factor;
        const double high_wavelen = rope.original_max_position / rope.high_freq_factor;
        const double wavelen = 2.0 * std::numbers::pi / f;
        if (wavelen > low_wavelen) {
          f /= rope.factor;
        } else if (wavelen >= high_wavelen) {
          const double smooth = (rope.original_max_position / wavelen - rope.low_freq_factor) /
                                (rope.high_freq_factor - rope.low_freq_factor);
          f = (1.0 - smooth) * f / rope.factor + smooth * f;
        }
        break;
      }
    }
    inv[static_cast<std::size_t>(i)] = static_cast<float>(f);
  }
  return inv;
}

}  // namespace cellm::cuda
