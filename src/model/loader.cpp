#include "model/loader.h"

#include <array>
#include <cstring>
#include <fstream>

#include "model/gguf_model.h"
#include "model/hf_config.h"
#include "model/hf_source.h"
#include "model/weights_builder.h"

namespace cellm::model {
namespace {

bool looks_like_gguf(const std::filesystem::path& path) {
  if (path.extension() == ".gguf") return true;
  std::ifstream in(path, std::ios::binary);
  std::array<char, 4> magic{};
  return in.read(magic.data(), 4) && std::memcmp(magic.data(), "GGUF", 4) == 0;
}

Status check_options(const LoadOptions& options) {
  if (options.dequant_dtype != DType::kF32 && options.dequant_dtype != DType::kBF16) {
    return invalid_argument("LoadOptions.dequant_dtype must be f32 or bf16, not {}",
                            dtype_name(options.dequant_dtype));
  }
  if (options.quantize != Quantize::kNone && options.quantize != Quantize::kFp8) {
    return invalid_argument("LoadOptions.quantize {} is unknown; use kNone or kFp8",
                            static_cast<int>(options.quantize));
  }
  return Status::ok();
}

// Quantizing on load starts from the float weights: a checkpoint that is
// quantized already would be rounded twice.
Status refuse_fp8_checkpoint(const std::filesystem::path& folder, const QuantSpec& quant) {
  return invalid_argument(
      "{}: --quantize fp8 needs a bf16, f16 or f32 checkpoint, but this one is quantized "
      "already ({}); load it without --quantize (its FP8 weights are used as stored)",
      folder.string(), quant.describe());
}

Status check_gguf_quantizable(const format::GgufFile& f) {
  for (const auto& t : f.tensors()) {
    if (t.type != format::GgmlType::kF32 && t.type != format::GgmlType::kF16 &&
        t.type != format::GgmlType::kBF16) {
      const auto info = format::ggml_type_info(static_cast<std::uint32_t>(t.type));
      return invalid_argument(
          "{}: --quantize fp8 needs F32, F16 or BF16 tensors, but '{}' is stored as {} "
          "(quantized already); load this file without --quantize, or quantize an F16/BF16 "
          "GGUF or the original Hugging Face checkpoint",
          f.path(), t.name,
          info ? std::string(info->name)
               : fmt::format("type {}", static_cast<std::uint32_t>(t.type)));
    }
  }
  return Status::ok();
}

Status quantize_loaded(LoadedModel& m, const LoadOptions& options) {
  if (options.quantize == Quantize::kNone) return Status::ok();
  CELLM_RETURN_IF_ERROR(quantize_fp8(m.spec, m.weights, options.dequant_dtype));
  m.source += "; projections quantized to FP8 E4M3 on load (one scale per output row)";
  return Status::ok();
}

std::filesystem::path config_of(const std::filesystem::path& folder, const LoadOptions& options) {
  return options.config_path.value_or(folder / "config.json");
}

Result<LoadedModel> load_hf(const std::filesystem::path& folder, const LoadOptions& options) {
  const auto config = config_of(folder, options);
  CELLM_ASSIGN_OR_RETURN(ModelSpec spec, read_hf_spec(config));
  // generation_config.json lives in the model folder even when the config is elsewhere.
  const auto gen = folder / "generation_config.json";
  std::error_code ec;
  if (config.parent_path() != folder && std::filesystem::exists(gen, ec)) {
    std::ifstream in(gen, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CELLM_RETURN_IF_ERROR(apply_generation_config_text(text, gen.string(), spec));
  }
  if (options.quantize != Quantize::kNone && spec.quant.quantized()) {
    return refuse_fp8_checkpoint(folder, spec.quant);
  }
  CELLM_ASSIGN_OR_RETURN(HfTensorSource source,
                         HfTensorSource::open(folder, spec.quant, options.dequant_dtype));
  CELLM_ASSIGN_OR_RETURN(Weights weights,
                         build_weights(spec, source, {options.allow_extra_tensors}));
  if (options.quantize != Quantize::kNone && !weights.fp8.empty()) {
    return refuse_fp8_checkpoint(folder, spec.quant);
  }
  LoadedModel out;
  out.spec = std::move(spec);
  out.weights = std::move(weights);
  out.format = ModelFormat::kHuggingFace;
  out.path = folder;
  out.source = fmt::format("Hugging Face folder {}, spec from {}", source.description(),
                           config.filename().string());
  CELLM_RETURN_IF_ERROR(quantize_loaded(out, options));
  return out;
}

Result<LoadedModel> load_gguf(const std::filesystem::path& file, const LoadOptions& options) {
  CELLM_ASSIGN_OR_RETURN(format::GgufFile parsed, format::GgufFile::open(file));
  auto gguf = std::make_shared<const format::GgufFile>(std::move(parsed));
  CELLM_ASSIGN_OR_RETURN(ModelSpec spec, spec_from_gguf(*gguf));
  CELLM_RETURN_IF_ERROR(check_gguf_tensor_types(*gguf));
  if (options.quantize != Quantize::kNone) CELLM_RETURN_IF_ERROR(check_gguf_quantizable(*gguf));
  const GgufTensorSource source(gguf, spec, options.dequant_dtype);
  BuildOptions build{options.allow_extra_tensors, {}};
  if (options.gpu_keeps_blocks) build.left_unloaded = gguf_projections_kept_on_gpu(spec, *gguf);
  CELLM_ASSIGN_OR_RETURN(Weights weights, build_weights(spec, source, build));
  weights.keep_alive.push_back(format::keep_alive(gguf->file()));
  LoadedModel out;
  out.spec = std::move(spec);
  out.weights = std::move(weights);
  out.format = ModelFormat::kGguf;
  out.path = file;
  out.source = fmt::format("GGUF v{} {} ({} tensors, {} metadata keys)", gguf->version(),
                           file.string(), gguf->tensors().size(), gguf->metadata().size());
  out.gguf = std::move(gguf);
  CELLM_RETURN_IF_ERROR(quantize_loaded(out, options));
  return out;
}

}  // namespace

Result<LoadedModel> load_model(const std::filesystem::path& path, const LoadOptions& options) {
  CELLM_RETURN_IF_ERROR(check_options(options));
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return load_hf(path, options);
  if (!std::filesystem::exists(path, ec)) {
    return not_found("{}: no such model folder or GGUF file", path.string());
  }
  if (looks_like_gguf(path)) return load_gguf(path, options);
  return invalid_argument(
      "{}: not a folder and not a GGUF file; give a Hugging Face model "
      "folder or a .gguf file",
      path.string());
}

Result<ModelSpec> load_spec(const std::filesystem::path& path, const LoadOptions& options) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return read_hf_spec(config_of(path, options));
  if (!std::filesystem::exists(path, ec)) {
    return not_found("{}: no such model folder or GGUF file", path.string());
  }
  CELLM_ASSIGN_OR_RETURN(format::GgufFile gguf, format::GgufFile::open(path));
  return spec_from_gguf(gguf);
}

}  // namespace cellm::model
