#include "bench/random_model.h"

#include <cmath>
#include <cstring>
#include <string_view>

#include "backend/cpu/cpu_program.h"
#include "model/weights_builder.h"
#ifdef CELLM_HAVE_CUDA
#include "backend/cuda/cuda_program.h"
#endif

namespace cellm::bench {
namespace {

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::uint64_t name_hash(std::string_view name) {
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  return h;
}

// Draws every tensor on demand, deterministically from its name and the seed.
class RandomSource final : public model::TensorSource {
 public:
  RandomSource(const model::ModelSpec& spec, std::uint64_t seed)
      : spec_(spec), seed_(seed), expected_(model::expected_tensors(spec)) {}

  std::string description() const override { return "random weights"; }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& e : expected_) {
      if (!e.optional || !spec_.tie_word_embeddings) out.push_back(e.name);
    }
    return out;
  }
  std::optional<Shape> shape(std::string_view name) const override {
    for (const auto& e : expected_) {
      if (e.name == name) return e.shape;
    }
    return std::nullopt;
  }
  std::string stored_type(std::string_view) const override { return "f32"; }
  Result<Tensor> load(std::string_view name) const override {
    const std::optional<Shape> s = shape(name);
    if (!s) return not_found("random weights have no tensor {}", name);
    Tensor t = Tensor::empty(DType::kF32, *s);
    float* out = t.data_as<float>();
    const auto n = static_cast<std::size_t>(t.numel());
    if (name.find("norm") != std::string_view::npos) {
      const float identity = spec_.norm_weight_offset ? 0.0f : 1.0f;
      for (std::size_t i = 0; i < n; ++i) out[i] = identity;
      return t;
    }
    if (name.find("bias") != std::string_view::npos) {
      std::memset(out, 0, n * sizeof(float));
      return t;
    }
    const bool wide = name.find("embed_tokens") != std::string_view::npos ||
                      name.find("lm_head") != std::string_view::npos;
    // Uniform on [-a, a] has std a / sqrt(3).
    const float a = static_cast<float>((wide ? 1.0 : 0.02) * std::sqrt(3.0));
    std::uint64_t state = seed_ ^ name_hash(name);
    for (std::size_t i = 0; i < n; i += 2) {
      const std::uint64_t bits = splitmix64(state);
      const float u0 = static_cast<float>(bits >> 40) * 0x1.0p-24f;
      const float u1 = static_cast<float>((bits >> 16) & 0xffffffu) * 0x1.0p-24f;
      out[i] = a * (2.0f * u0 - 1.0f);
      if (i + 1 < n) out[i + 1] = a * (2.0f * u1 - 1.0f);
    }
    return t;
  }

 private:
  const model::ModelSpec& spec_;
  std::uint64_t seed_;
  std::vector<model::ExpectedTensor> expected_;
};

}  // namespace

Result<model::Weights> random_host_weights(const model::ModelSpec& spec, std::uint64_t seed) {
  RandomSource source(spec, seed);
  return model::build_weights(spec, source);
}

Result<std::shared_ptr<program::Program>> random_program(const model::ModelSpec& spec,
                                                         std::uint64_t seed,
                                                         const program::ProgramOptions& options,
                                                         const std::string& backend) {
  if (backend == "cuda") {
#ifdef CELLM_HAVE_CUDA
    CELLM_ASSIGN_OR_RETURN(auto program, cuda::load_random_program(spec, seed, options));
    return std::shared_ptr<program::Program>(std::move(program));
#else
    return not_supported("random weights on CUDA: this build has no CUDA backend");
#endif
  }
  if (backend != "cpu") {
    return invalid_argument("backend {}: give cpu or cuda", backend);
  }
  CELLM_ASSIGN_OR_RETURN(model::Weights weights, random_host_weights(spec, seed));
  CELLM_ASSIGN_OR_RETURN(auto program, cpu::CpuProgram::create(spec, weights, options));
  return std::shared_ptr<program::Program>(std::move(program));
}

}  // namespace cellm::bench
