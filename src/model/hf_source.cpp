#include "model/hf_source.h"

#include <algorithm>

#include <fmt/ranges.h>

#include "format/fp8.h"

namespace cellm::model {
namespace {

// Stored-name prefixes of the text model, most specific first.
constexpr std::string_view kTextPrefixes[] = {"model.language_model.", "language_model.model.",
                                              "model."};
constexpr std::string_view kHeadPrefixes[] = {"language_model.lm_head.", "lm_head."};
constexpr std::string_view kSkippedPrefixes[] = {"vision_tower.", "model.vision_tower.",
                                                 "multi_modal_projector.",
                                                 "model.multi_modal_projector."};

std::optional<std::string> canonical(std::string_view stored) {
  for (auto p : kSkippedPrefixes) {
    if (stored.starts_with(p)) return std::nullopt;
  }
  for (auto p : kHeadPrefixes) {
    if (stored.starts_with(p)) return "lm_head." + std::string(stored.substr(p.size()));
  }
  for (auto p : kTextPrefixes) {
    if (stored.starts_with(p)) return "model." + std::string(stored.substr(p.size()));
  }
  return std::string(stored);  // unknown layout: kept, and reported as unexpected if unused
}

// "model.layers.0.mlp.down_proj" for "model.layers.0.mlp.down_proj.weight".
std::string module_of(std::string_view stored_weight) {
  constexpr std::string_view kWeight = ".weight";
  return std::string(stored_weight.ends_with(kWeight)
                         ? stored_weight.substr(0, stored_weight.size() - kWeight.size())
                         : stored_weight);
}

bool is_float(DType d) {
  return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16;
}

}  // namespace

Result<HfTensorSource> HfTensorSource::open(const std::filesystem::path& folder,
                                            const QuantSpec& quant, DType dequant_dtype) {
  HfTensorSource out;
  out.quant_ = quant;
  out.dequant_dtype_ = dequant_dtype;
  CELLM_ASSIGN_OR_RETURN(out.checkpoint_, format::SafetensorsCheckpoint::open(folder));
  // Scale tensors by the stored name of the weight they belong to.
  std::map<std::string, std::string> scales;
  const std::string scale_suffix = "." + quant.scale_name;
  for (const auto& stored : out.checkpoint_.names()) {
    if (quant.quantized()) {
      if (is_activation_scale(stored)) {
        ++out.activation_scales_;
        continue;
      }
      if (stored.ends_with(scale_suffix)) {
        scales.emplace(stored.substr(0, stored.size() - scale_suffix.size()) + ".weight", stored);
        continue;
      }
    }
    auto name = canonical(stored);
    if (!name) {
      ++out.skipped_;
      continue;
    }
    const auto [it, inserted] = out.file_name_.emplace(*name, stored);
    if (!inserted) {
      return invalid_argument("{}: tensors '{}' and '{}' both map to '{}'", folder.string(),
                              it->second, stored, *name);
    }
  }
  CELLM_RETURN_IF_ERROR(out.pair_fp8_scales(folder, scales));
  out.description_ = fmt::format("{} ({})", folder.string(), out.checkpoint_.description());
  return out;
}

Status HfTensorSource::pair_fp8_scales(const std::filesystem::path& folder,
                                       const std::map<std::string, std::string>& scales) {
  const std::string where = folder.string();
  for (const auto& [name, stored] : file_name_) {
    const format::SafetensorsEntry* e = checkpoint_.find(stored);
    if (e->encoding == format::Encoding::kPlain) continue;
    if (e->encoding != format::Encoding::kF8E4M3) {
      return not_supported(
          "{}: tensor '{}' is {}; cellm reads FP8 weights in F8_E4M3 only (the format of "
          "quant_method fp8, fbgemm_fp8 and compressed-tensors float checkpoints)",
          where, stored, format::encoding_name(e->encoding));
    }
    if (!quant_.quantized()) {
      return invalid_argument(
          "{}: tensor '{}' is F8_E4M3 but config.json has no quantization_config saying how it "
          "is scaled; add the checkpoint's quantization_config (fp8, fbgemm_fp8 or "
          "compressed-tensors)",
          where, stored);
    }
    if (e->shape.size() != 2) {
      return invalid_argument("{}: FP8 tensor '{}' is {}; only 2-D (linear) weights may be FP8",
                              where, stored, shape_string(e->shape));
    }
    const std::string module = module_of(stored);
    if (quant_.ignores(module)) {
      return invalid_argument(
          "{}: tensor '{}' is F8_E4M3 but quantization_config lists module '{}' as left "
          "unquantized",
          where, stored, module);
    }
    const auto scale = scales.find(stored);
    if (scale == scales.end()) {
      return invalid_argument("{}: FP8 tensor '{}' has no scale tensor '{}.{}' ({}, {} scales)",
                              where, stored, module, quant_.scale_name,
                              quant_method_name(quant_.method),
                              granularity_name(quant_.granularity));
    }
    const format::SafetensorsEntry* s = checkpoint_.find(scale->second);
    const auto [grid_rows, grid_cols] = quant_.scale_grid(e->shape[0], e->shape[1]);
    // The shapes writers use for each granularity; any other is a mismatch.
    std::vector<Shape> accepted;
    switch (quant_.granularity) {
      case ScaleGranularity::kTensor: accepted = {Shape{}, Shape{1}}; break;
      case ScaleGranularity::kChannel: accepted = {Shape{grid_rows, 1}, Shape{grid_rows}}; break;
      case ScaleGranularity::kBlock: accepted = {Shape{grid_rows, grid_cols}}; break;
    }
    if (std::find(accepted.begin(), accepted.end(), s->shape) == accepted.end()) {
      std::vector<std::string> shapes;
      for (const auto& a : accepted) shapes.push_back(shape_string(a));
      return invalid_argument(
          "{}: scale tensor '{}' is {} but FP8 weight '{}' {} with {} scales{} needs {}", where,
          scale->second, shape_string(s->shape), stored, shape_string(e->shape),
          granularity_name(quant_.granularity),
          quant_.granularity == ScaleGranularity::kBlock
              ? fmt::format(" of [{}, {}] blocks", quant_.block_rows, quant_.block_cols)
              : std::string(),
          fmt::join(shapes, " or "));
    }
    if (!is_float(s->dtype) || s->encoding != format::Encoding::kPlain) {
      return invalid_argument("{}: scale tensor '{}' has dtype {}; scales must be F32, BF16 or F16",
                              where, scale->second,
                              s->encoding == format::Encoding::kPlain
                                  ? dtype_name(s->dtype)
                                  : format::encoding_name(s->encoding));
    }
    scale_of_.emplace(name, scale->second);
  }
  for (const auto& [weight, scale] : scales) {
    const format::SafetensorsEntry* w = checkpoint_.find(weight);
    if (w == nullptr || w->encoding != format::Encoding::kF8E4M3) {
      return invalid_argument(
          "{}: scale tensor '{}' belongs to '{}', which is {}; only F8_E4M3 weights take scales",
          where, scale, weight,
          w == nullptr ? std::string("absent") : std::string(dtype_name(w->dtype)));
    }
  }
  return Status::ok();
}

std::vector<std::string> HfTensorSource::names() const {
  std::vector<std::string> out;
  for (const auto& [name, stored] : file_name_) out.push_back(name);
  return out;
}

std::optional<Shape> HfTensorSource::shape(std::string_view name) const {
  const auto it = file_name_.find(name);
  if (it == file_name_.end()) return std::nullopt;
  return checkpoint_.find(it->second)->shape;
}

std::string HfTensorSource::stored_type(std::string_view name) const {
  const auto it = file_name_.find(name);
  if (it == file_name_.end()) return "absent";
  const format::SafetensorsEntry* e = checkpoint_.find(it->second);
  if (e->encoding != format::Encoding::kPlain)
    return std::string(format::encoding_name(e->encoding));
  return std::string(dtype_name(e->dtype));
}

Result<Tensor> HfTensorSource::load(std::string_view name) const {
  const auto it = file_name_.find(name);
  if (it == file_name_.end()) return not_found("{}: no tensor '{}'", description_, name);
  auto stored = fp8(name);
  if (!stored) return checkpoint_.tensor(it->second);
  return format::dequantize_e4m3(stored->codes, stored->scales, stored->block_rows,
                                 stored->block_cols, dequant_dtype_, it->second);
}

std::optional<Fp8Weight> HfTensorSource::fp8(std::string_view name) const {
  const auto scale = scale_of_.find(name);
  if (scale == scale_of_.end()) return std::nullopt;
  const auto& stored = file_name_.find(name)->second;
  // Both were checked at open; tensor() cannot fail on a listed name.
  Fp8Weight w;
  w.codes = checkpoint_.tensor(stored).value();
  w.scales = checkpoint_.tensor(scale->second).value();
  const auto [br, bc] = quant_.scale_block(w.codes.dim(0), w.codes.dim(1));
  w.block_rows = br;
  w.block_cols = bc;
  return w;
}

}  // namespace cellm::model
