// load_model: the one entry point that turns a path into a checked model —
// a Hugging Face folder (config.json, safetensors shards, generation_config)
// or a single GGUF file. The result holds the ModelSpec, the canonical
// Weights and, for GGUF, the parsed file whose metadata tokenizers read
// (tokenizer.ggml.tokens, merges, scores, chat template, ...).
//
// Thread-safety: load_model is reentrant; a LoadedModel is immutable after
// loading and safe to read from any thread.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "cellm/status.h"
#include "core/dtype.h"
#include "format/gguf.h"
#include "model/model_spec.h"
#include "model/quantize.h"
#include "model/weights.h"

namespace cellm::model {

enum class ModelFormat : std::uint8_t { kHuggingFace, kGguf };

struct LoadOptions {
  // GGUF block-quantized tensors and FP8 checkpoint weights are dequantized
  // to this dtype (kF32 or kBF16).
  DType dequant_dtype = DType::kF32;
  // Tensors the spec does not use are an error unless this is set (then logged).
  bool allow_extra_tensors = false;
  // GGUF files for the CUDA backend with --keep-quantized: the projections
  // it keeps in their blocks (gguf_projections_kept_on_gpu) are not
  // dequantized; their tensors stay undefined in Weights, which then serves
  // that upload alone (an 8B Q4_K_M file: about 1 GB of host memory instead
  // of 16, and no dequantization pass).
  bool gpu_keeps_blocks = false;
  // HF folders: read this config file instead of <folder>/config.json
  // (e.g. config_legacy.json). generation_config.json still comes from the folder.
  std::optional<std::filesystem::path> config_path;
  // kFp8 (`--quantize fp8`): the projections of a bf16, f16 or f32 model
  // are rounded to FP8 E4M3 with per-row scales after loading
  // (model/quantize.h), their values stored in dequant_dtype. Models already
  // quantized (an FP8 checkpoint, a GGUF file with block-quantized tensors)
  // are refused.
  Quantize quantize = Quantize::kNone;
};

struct LoadedModel {
  ModelSpec spec;
  Weights weights;
  ModelFormat format = ModelFormat::kHuggingFace;
  std::filesystem::path path;  // the folder or file given
  std::string source;          // "HF folder …: model.safetensors, config.json" / "GGUF v3 …"
  // GGUF only: the whole file (metadata and tensor table); null for HF folders.
  std::shared_ptr<const format::GgufFile> gguf;

  const format::GgufFile* gguf_metadata() const { return gguf.get(); }
};

// A folder is read as Hugging Face; a file ending in .gguf (or starting with
// the GGUF magic) as GGUF. Errors name the file and tensor or field at fault.
Result<LoadedModel> load_model(const std::filesystem::path& path, const LoadOptions& options = {});

// The spec alone (no weights touched beyond the GGUF header): for inspection.
Result<ModelSpec> load_spec(const std::filesystem::path& path, const LoadOptions& options = {});

}  // namespace cellm::model
