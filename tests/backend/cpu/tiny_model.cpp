#include "tiny_model.h"

#include <cmath>
#include <numbers>
#include <random>
#include <string>

#include "core/dtype.h"

namespace cellm::cpu::testing {
namespace {

using model::Architecture;

struct Gen {
  std::mt19937_64 rng;
  DType dtype = DType::kF32;

  Tensor make(Shape shape, double scale, double center = 0.0) {
    Tensor t = Tensor::empty(dtype, std::move(shape));
    std::uniform_real_distribution<double> dist(-scale, scale);
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      const float v = static_cast<float>(center + dist(rng));
      if (dtype == DType::kBF16) {
        t.data_as<std::uint16_t>()[i] = f32_to_bf16(v);
      } else {
        t.data_as<float>()[i] = v;
      }
    }
    return t;
  }
};

// Double-precision matrix-vector product with a [out, in] weight.
std::vector<double> matvec(const Tensor& w, const std::vector<double>& x) {
  const std::int64_t out = w.dim(0);
  const std::int64_t in = w.dim(1);
  std::vector<double> y(static_cast<std::size_t>(out), 0.0);
  for (std::int64_t o = 0; o < out; ++o) {
    double s = 0.0;
    for (std::int64_t i = 0; i < in; ++i) {
      s += static_cast<double>(element_as_f32(w, o * in + i)) * x[static_cast<std::size_t>(i)];
    }
    y[static_cast<std::size_t>(o)] = s;
  }
  return y;
}

void add_bias(std::vector<double>& y, const Tensor& b) {
  if (b.data() == nullptr) return;
  for (std::size_t i = 0; i < y.size(); ++i)
    y[i] += element_as_f32(b, static_cast<std::int64_t>(i));
}

std::vector<double> rms(const std::vector<double>& x, std::size_t begin, std::size_t n,
                        const Tensor& w, double eps, bool offset) {
  double ss = 0.0;
  for (std::size_t i = 0; i < n; ++i) ss += x[begin + i] * x[begin + i];
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  std::vector<double> y(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double g = element_as_f32(w, static_cast<std::int64_t>(i));
    y[i] = x[begin + i] * inv * (offset ? 1.0 + g : g);
  }
  return y;
}

std::vector<double> reference_inv_freq(const model::RopeSpec& rope, int head_dim) {
  const int dim = rope.rotary_dim > 0 ? rope.rotary_dim : head_dim;
  std::vector<double> f(static_cast<std::size_t>(dim / 2));
  for (int i = 0; i < dim / 2; ++i) {
    double v = std::pow(rope.theta, -2.0 * i / dim);
    if (rope.type == model::RopeType::kLinear) {
      v /= rope.factor;
    } else if (rope.type == model::RopeType::kLlama3) {
      const double wavelen = 2.0 * std::numbers::pi / v;
      const double lo_wl = rope.original_max_position / rope.low_freq_factor;
      const double hi_wl = rope.original_max_position / rope.high_freq_factor;
      if (wavelen > lo_wl) {
        v /= rope.factor;
      } else if (wavelen >= hi_wl) {
        const double s = (rope.original_max_position / wavelen - rope.low_freq_factor) /
                         (rope.high_freq_factor - rope.low_freq_factor);
        v = (1.0 - s) * v / rope.factor + s * v;
      }
    }
    f[static_cast<std::size_t>(i)] = v;
  }
  return f;
}

void rotate(std::vector<double>& x, int heads, int head_dim, const std::vector<double>& inv,
            double pos) {
  const std::size_t half = inv.size();
  for (int h = 0; h < heads; ++h) {
    double* v = x.data() + static_cast<std::size_t>(h * head_dim);
    for (std::size_t i = 0; i < half; ++i) {
      const double c = std::cos(pos * inv[i]);
      const double s = std::sin(pos * inv[i]);
      const double a = v[i];
      const double b = v[i + half];
      v[i] = a * c - b * s;
      v[i + half] = a * s + b * c;
    }
  }
}

double act(double x, model::Activation a) {
  if (a == model::Activation::kSilu) return x / (1.0 + std::exp(-x));
  return 0.5 * x *
         (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

}  // namespace

TinyModel make_tiny_model(Architecture arch, std::uint64_t seed) {
  TinyModel m;
  model::ModelSpec& s = m.spec;
  s.arch = arch;
  s.arch_name = std::string(model::architecture_name(arch));
  s.vocab_size = 61;
  s.hidden_size = 32;
  s.intermediate_size = 48;
  s.num_layers = 2;
  s.num_heads = 4;
  s.num_kv_heads = 2;
  s.head_dim = 8;
  s.max_context = 256;
  s.norm_eps = 1e-5f;
  model::RopeSpec rope;
  rope.theta = 10000.0;
  std::vector<std::int32_t> windows = {0, 0};
  std::vector<double> thetas = {10000.0, 10000.0};
  Gen gen{std::mt19937_64(seed)};
  switch (arch) {
    case Architecture::kLlama:
      rope.type = model::RopeType::kLlama3;
      rope.theta = 500000.0;
      rope.factor = 4.0;
      rope.original_max_position = 16;
      thetas = {500000.0, 500000.0};
      s.num_layers = 3;
      windows = {0, 0, 0};
      thetas.push_back(500000.0);
      break;
    case Architecture::kQwen2:
      s.attention_bias = true;
      s.tie_word_embeddings = true;
      s.num_kv_heads = 1;
      gen.dtype = DType::kBF16;
      break;
    case Architecture::kQwen3:
      s.qk_norm = true;
      s.head_dim = 16;
      break;
    case Architecture::kMistral: windows = {5, 5}; break;
    case Architecture::kGemma3:
      s.norm_weight_offset = true;
      s.sandwich_norms = true;
      s.qk_norm = true;
      s.activation = model::Activation::kGeluTanh;
      s.embedding_scale = std::sqrt(32.0f);
      s.attention_scale = 1.0f / std::sqrt(12.0f);
      s.final_logit_softcap = 3.0f;
      s.attn_logit_softcap = 2.0f;
      s.tie_word_embeddings = true;
      s.num_layers = 3;
      windows = {4, 4, 0};
      thetas = {10000.0, 10000.0, 1000000.0};
      break;
    case Architecture::kPhi3:
      s.head_dim = 16;
      s.num_kv_heads = 4;
      rope.rotary_dim = 8;
      rope.type = model::RopeType::kLinear;
      rope.factor = 2.0;
      break;
  }
  for (int i = 0; i < s.num_layers; ++i) {
    model::LayerSpec ls;
    ls.window = windows[static_cast<std::size_t>(i)];
    ls.rope = rope;
    ls.rope.theta = thetas[static_cast<std::size_t>(i)];
    s.layers.push_back(ls);
  }

  const std::int64_t d = s.hidden_size;
  const std::int64_t qd = static_cast<std::int64_t>(s.num_heads) * s.head_dim;
  const std::int64_t kvd = static_cast<std::int64_t>(s.num_kv_heads) * s.head_dim;
  const std::int64_t ff = s.intermediate_size;
  const double norm_center = s.norm_weight_offset ? 0.0 : 1.0;
  model::Weights& w = m.weights;
  w.embed_tokens = gen.make({s.vocab_size, d}, 1.0);
  w.final_norm = gen.make({d}, 0.2, norm_center);
  w.lm_head = s.tie_word_embeddings ? w.embed_tokens : gen.make({s.vocab_size, d}, 0.3);
  const double ws = 1.5 / std::sqrt(static_cast<double>(d));
  for (int i = 0; i < s.num_layers; ++i) {
    model::LayerWeights l;
    l.attn_norm = gen.make({d}, 0.2, norm_center);
    l.q_proj = gen.make({qd, d}, ws);
    l.k_proj = gen.make({kvd, d}, ws);
    l.v_proj = gen.make({kvd, d}, ws);
    l.o_proj = gen.make({d, qd}, ws);
    if (s.attention_bias) {
      l.q_bias = gen.make({qd}, 0.5);
      l.k_bias = gen.make({kvd}, 0.5);
      l.v_bias = gen.make({kvd}, 0.5);
    }
    if (s.qk_norm) {
      l.q_norm = gen.make({s.head_dim}, 0.2, norm_center);
      l.k_norm = gen.make({s.head_dim}, 0.2, norm_center);
    }
    l.mlp_norm = gen.make({d}, 0.2, norm_center);
    if (s.sandwich_norms) {
      l.post_attn_norm = gen.make({d}, 0.2, norm_center);
      l.post_mlp_norm = gen.make({d}, 0.2, norm_center);
    }
    l.gate_proj = gen.make({ff, d}, ws);
    l.up_proj = gen.make({ff, d}, ws);
    l.down_proj = gen.make({d, ff}, 1.5 / std::sqrt(static_cast<double>(ff)));
    w.layers.push_back(std::move(l));
  }
  return m;
}

std::vector<std::vector<double>> reference_logits(const model::ModelSpec& s,
                                                  const model::Weights& w,
                                                  const std::vector<std::int64_t>& tokens,
                                                  DType rope_table_dtype) {
  const std::size_t t = tokens.size();
  const std::size_t d = static_cast<std::size_t>(s.hidden_size);
  const int hd = s.head_dim;
  const int group = s.num_heads / s.num_kv_heads;
  const bool off = s.norm_weight_offset;
  const double eps = s.norm_eps;
  const double scale = s.attention_scale > 0 ? s.attention_scale : 1.0 / std::sqrt(hd);

  std::vector<std::vector<double>> x(t, std::vector<double>(d));
  for (std::size_t r = 0; r < t; ++r) {
    for (std::size_t i = 0; i < d; ++i) {
      x[r][i] =
          element_as_f32(w.embed_tokens, tokens[r] * s.hidden_size + static_cast<std::int64_t>(i)) *
          static_cast<double>(s.embedding_scale);
    }
  }
  for (int l = 0; l < s.num_layers; ++l) {
    const model::LayerWeights& lw = w.layers[static_cast<std::size_t>(l)];
    const model::LayerSpec& ls = s.layers[static_cast<std::size_t>(l)];
    std::vector<double> inv = reference_inv_freq(ls.rope, hd);
    for (double& f : inv) {
      if (rope_table_dtype == DType::kBF16) f = bf16_to_f32(f32_to_bf16(static_cast<float>(f)));
      if (rope_table_dtype == DType::kF16) f = f16_to_f32(f32_to_f16(static_cast<float>(f)));
    }
    std::vector<std::vector<double>> q(t), k(t), v(t);
    for (std::size_t r = 0; r < t; ++r) {
      const std::vector<double> h = rms(x[r], 0, d, lw.attn_norm, eps, off);
      q[r] = matvec(lw.q_proj, h);
      k[r] = matvec(lw.k_proj, h);
      v[r] = matvec(lw.v_proj, h);
      add_bias(q[r], lw.q_bias);
      add_bias(k[r], lw.k_bias);
      add_bias(v[r], lw.v_bias);
      if (s.qk_norm) {
        for (int hh = 0; hh < s.num_heads; ++hh) {
          auto n = rms(q[r], static_cast<std::size_t>(hh * hd), static_cast<std::size_t>(hd),
                       lw.q_norm, eps, off);
          std::copy(n.begin(), n.end(), q[r].begin() + hh * hd);
        }
        for (int hh = 0; hh < s.num_kv_heads; ++hh) {
          auto n = rms(k[r], static_cast<std::size_t>(hh * hd), static_cast<std::size_t>(hd),
                       lw.k_norm, eps, off);
          std::copy(n.begin(), n.end(), k[r].begin() + hh * hd);
        }
      }
      rotate(q[r], s.num_heads, hd, inv, static_cast<double>(r));
      rotate(k[r], s.num_kv_heads, hd, inv, static_cast<double>(r));
    }
    for (std::size_t r = 0; r < t; ++r) {
      std::vector<double> attn(static_cast<std::size_t>(s.num_heads * hd), 0.0);
      const std::size_t lo = ls.window > 0 && r + 1 > static_cast<std::size_t>(ls.window)
                                 ? r + 1 - static_cast<std::size_t>(ls.window)
                                 : 0;
      for (int hh = 0; hh < s.num_heads; ++hh) {
        const int g = hh / group;
        std::vector<double> sc;
        for (std::size_t j = lo; j <= r; ++j) {
          double dot = 0.0;
          for (int i = 0; i < hd; ++i)
            dot += q[r][static_cast<std::size_t>(hh * hd + i)] *
                   k[j][static_cast<std::size_t>(g * hd + i)];
          double sv = dot * scale;
          if (s.attn_logit_softcap)
            sv = *s.attn_logit_softcap * std::tanh(sv / *s.attn_logit_softcap);
          sc.push_back(sv);
        }
        double mx = sc[0];
        for (double e : sc) mx = std::max(mx, e);
        double tot = 0.0;
        for (double& e : sc) tot += (e = std::exp(e - mx));
        for (std::size_t j = lo; j <= r; ++j) {
          for (int i = 0; i < hd; ++i) {
            attn[static_cast<std::size_t>(hh * hd + i)] +=
                sc[j - lo] / tot * v[j][static_cast<std::size_t>(g * hd + i)];
          }
        }
      }
      std::vector<double> o = matvec(lw.o_proj, attn);
      if (s.sandwich_norms) o = rms(o, 0, d, lw.post_attn_norm, eps, off);
      for (std::size_t i = 0; i < d; ++i) x[r][i] += o[i];
      const std::vector<double> h = rms(x[r], 0, d, lw.mlp_norm, eps, off);
      std::vector<double> gate = matvec(lw.gate_proj, h);
      const std::vector<double> up = matvec(lw.up_proj, h);
      for (std::size_t i = 0; i < gate.size(); ++i) gate[i] = act(gate[i], s.activation) * up[i];
      std::vector<double> m = matvec(lw.down_proj, gate);
      if (s.sandwich_norms) m = rms(m, 0, d, lw.post_mlp_norm, eps, off);
      for (std::size_t i = 0; i < d; ++i) x[r][i] += m[i];
    }
  }
  std::vector<std::vector<double>> logits(t);
  for (std::size_t r = 0; r < t; ++r) {
    logits[r] = matvec(w.lm_head, rms(x[r], 0, d, w.final_norm, eps, off));
    if (s.final_logit_softcap) {
      for (double& e : logits[r])
        e = *s.final_logit_softcap * std::tanh(e / *s.final_logit_softcap);
    }
  }
  return logits;
}

double relative_error(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    const double da = i < a.size() ? a[i] : 0.0;
    num += (da - b[i]) * (da - b[i]);
    den += b[i] * b[i];
  }
  if (a.size() != b.size()) return INFINITY;
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  return relative_error(a, std::vector<double>(b.begin(), b.end()));
}

}  // namespace cellm::cpu::testing
