#include "model/quantize.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "format/fp8.h"

namespace cellm::model {
namespace {

constexpr float kE4M3Max = 448.0f;

struct Job {
  std::string name;  // canonical checkpoint name, the Weights::fp8 key
  Tensor* tensor = nullptr;
  Fp8Weight fp8;
  Status status = Status::ok();
};

// One row of `t` as floats.
void load_row(const Tensor& t, std::int64_t r, std::vector<float>& out) {
  const std::int64_t cols = t.dim(1);
  const std::size_t n = static_cast<std::size_t>(cols);
  out.resize(n);
  switch (t.dtype()) {
    case DType::kF32: {
      const float* src = t.data_as<float>() + r * cols;
      std::copy(src, src + cols, out.begin());
      break;
    }
    case DType::kBF16: {
      const auto* src = t.data_as<std::uint16_t>() + r * cols;
      for (std::size_t c = 0; c < n; ++c) out[c] = bf16_to_f32(src[c]);
      break;
    }
    default: {  // kF16, checked by the caller
      const auto* src = t.data_as<std::uint16_t>() + r * cols;
      for (std::size_t c = 0; c < n; ++c) out[c] = f16_to_f32(src[c]);
      break;
    }
  }
}

Status check_input(const std::string& name, const Tensor& t) {
  if (t.device() != Device::kCpu || t.rank() != 2 ||
      (t.dtype() != DType::kF32 && t.dtype() != DType::kBF16 && t.dtype() != DType::kF16)) {
    return invalid_argument(
        "quantizing '{}' to FP8: it is {}; only 2-D host f32, bf16 or f16 weights can be "
        "quantized",
        name, t.describe());
  }
  return Status::ok();
}

Status quantize_one(Job& job, DType out_dtype) {
  const Tensor& w = *job.tensor;
  const std::int64_t rows = w.dim(0);
  const std::int64_t cols = w.dim(1);
  Tensor codes = Tensor::empty(DType::kU8, {rows, cols});
  Tensor scales = Tensor::empty(DType::kF32, {rows, 1});
  Tensor values = Tensor::empty(out_dtype, {rows, cols});
  auto* code_out = codes.data_as<std::uint8_t>();
  float* scale_out = scales.data_as<float>();
  float* f32_out = out_dtype == DType::kF32 ? values.data_as<float>() : nullptr;
  std::uint16_t* bf16_out = out_dtype == DType::kF32 ? nullptr : values.data_as<std::uint16_t>();
  std::vector<float> row;
  for (std::int64_t r = 0; r < rows; ++r) {
    load_row(w, r, row);
    float amax = 0.0f;
    for (const float v : row) {
      if (!std::isfinite(v)) {
        return invalid_argument(
            "quantizing '{}' to FP8: row {} holds {}; a weight must be finite to be scaled",
            job.name, r, v);
      }
      amax = std::max(amax, std::fabs(v));
    }
    float scale = amax / kE4M3Max;
    // An all-zero row (or one so small its scale underflows) encodes as zeros.
    if (!(scale > 0.0f)) scale = 1.0f;
    scale_out[r] = scale;
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::int64_t i = r * cols + c;
      const std::uint8_t code = format::f32_to_e4m3(row[static_cast<std::size_t>(c)] / scale);
      code_out[i] = code;
      const float v = format::e4m3_to_f32(code) * scale;
      if (f32_out != nullptr) {
        f32_out[i] = v;
      } else {
        bf16_out[i] = f32_to_bf16(v);
      }
    }
  }
  job.fp8 = Fp8Weight{std::move(codes), std::move(scales), 1, cols};
  *job.tensor = std::move(values);
  return Status::ok();
}

}  // namespace

Result<Quantize> parse_quantize(std::string_view name) {
  if (name == "none") return Quantize::kNone;
  if (name == "fp8") return Quantize::kFp8;
  return invalid_argument("--quantize '{}': use fp8 or none", name);
}

std::string_view quantize_name(Quantize q) {
  switch (q) {
    case Quantize::kNone: return "none";
    case Quantize::kFp8: return "fp8";
  }
  return "?";
}

Status quantize_fp8(const ModelSpec& spec, Weights& weights, DType out_dtype) {
  if (out_dtype != DType::kF32 && out_dtype != DType::kBF16) {
    return invalid_argument("quantizing to FP8: the weights' dtype must be f32 or bf16, not {}",
                            dtype_name(out_dtype));
  }
  if (weights.layers.size() != static_cast<std::size_t>(spec.num_layers)) {
    return invalid_argument("quantizing to FP8: {} layers of weights for a spec of {}",
                            weights.layers.size(), spec.num_layers);
  }
  std::vector<Job> jobs;
  for (std::size_t i = 0; i < weights.layers.size(); ++i) {
    LayerWeights& l = weights.layers[i];
    const auto add = [&](const char* suffix, Tensor& t) {
      jobs.push_back({fmt::format("model.layers.{}.{}.weight", i, suffix), &t, {}, Status::ok()});
    };
    add("self_attn.q_proj", l.q_proj);
    add("self_attn.k_proj", l.k_proj);
    add("self_attn.v_proj", l.v_proj);
    add("self_attn.o_proj", l.o_proj);
    add("mlp.gate_proj", l.gate_proj);
    add("mlp.up_proj", l.up_proj);
    add("mlp.down_proj", l.down_proj);
  }
  for (const Job& j : jobs) CELLM_RETURN_IF_ERROR(check_input(j.name, *j.tensor));

  // Tensors are independent: workers take the next one until none is left.
  std::atomic<std::size_t> next{0};
  const auto work = [&] {
    for (std::size_t k = next.fetch_add(1); k < jobs.size(); k = next.fetch_add(1)) {
      jobs[k].status = quantize_one(jobs[k], out_dtype);
    }
  };
  const std::size_t workers =
      std::min<std::size_t>(std::max(1u, std::thread::hardware_concurrency()), jobs.size());
  std::vector<std::thread> pool;
  for (std::size_t t = 1; t < workers; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();

  for (Job& j : jobs) {
    CELLM_RETURN_IF_ERROR(j.status);
    weights.fp8.insert_or_assign(j.name, std::move(j.fp8));
  }
  return Status::ok();
}

}  // namespace cellm::model
