// GGUF models: ModelSpec from GGUF metadata (architectures "llama",
// "mistral", "qwen2", "qwen3", "phi3" and "gemma3", with the keys and tensor
// names llama.cpp's convert_hf_to_gguf.py writes) and a TensorSource that maps GGUF tensor names
// onto the canonical Hugging Face ones, dequantizes block-quantized tensors, and undoes the Q/K row
// interleaving GGUF's converter applies to llama-family attention (llama, mistral; not qwen2,
// qwen3, phi3 or gemma3).
//
// Gemma 3 GGUFs store RMSNorm weights with the +1 already added, so their spec
// has norm_weight_offset = false (adding it again would double it).
//
// Thread-safety: immutable after construction.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>

#include "core/dtype.h"
#include "format/gguf.h"
#include "model/model_spec.h"
#include "model/tensor_source.h"

namespace cellm::model {

Result<ModelSpec> spec_from_gguf(const format::GgufFile& file);

// Refuses a file holding a tensor of a type cellm cannot read, naming the
// tensor and its type, before any weight is loaded.
Status check_gguf_tensor_types(const format::GgufFile& file);

// The canonical name of GGUF tensor `gguf_name` for `arch`; the name itself
// when it has no mapping (it then shows up as an unexpected tensor).
std::string canonical_tensor_name(Architecture arch, std::string_view gguf_name);

// Whether GGUF files of `arch` hold Q/K rows in the interleaved rotary layout
// llama.cpp's converter writes for llama-family models (LlamaModel's
// undo_permute): llama and mistral; qwen2, qwen3, phi3 and gemma3 keep
// Hugging Face's half-split layout.
bool gguf_rotary_rows_permuted(Architecture arch);

// Reorders the rows of a [heads*head_dim, in] projection from GGUF's
// interleaved rotary layout back to Hugging Face's half-split layout.
Tensor unpermute_rotary_rows(const Tensor& t, std::int32_t heads);
// The same reordering of `rows` rows of `row_bytes` bytes each (float rows,
// or rows of quantized blocks, which backends that keep the blocks move
// whole), from `src` into `dst` (same size, not overlapping).
void unpermute_rotary_row_bytes(std::span<const std::uint8_t> src, std::span<std::uint8_t> dst,
                                std::int64_t rows, std::size_t row_bytes, std::int32_t heads);

// Block types whose projections the CUDA backend keeps in their blocks on
// the GPU instead of converting them to bf16 (its quantized GEMV decodes
// them: backend/cuda/kernels/qgemv.cuh, whose test checks the two agree).
bool gguf_type_kept_on_gpu(format::GgmlType type);

// The canonical names of the projection tensors of `file` that the CUDA
// backend keeps in their blocks with --keep-quantized: per layer the q/k/v
// group, o, the gate/up group and down, each only when every tensor of the
// group is a 2-D tensor of a kept type, and an untied lm_head of a kept
// type. (A tied head multiplies with the embedding's blocks, but the lookup
// needs the embedding itself, so it is never listed.) The upload
// (backend/cuda/device_quant.h) and the loader, which then leaves these
// tensors unloaded (LoadOptions::gpu_keeps_blocks), share this one rule.
std::set<std::string, std::less<>> gguf_projections_kept_on_gpu(const ModelSpec& spec,
                                                                const format::GgufFile& file);

class GgufTensorSource final : public TensorSource {
 public:
  GgufTensorSource(std::shared_ptr<const format::GgufFile> file, const ModelSpec& spec,
                   DType dequant_dtype);

  std::string description() const override { return file_->path(); }
  std::vector<std::string> names() const override;
  std::optional<Shape> shape(std::string_view name) const override;
  std::string stored_type(std::string_view name) const override;
  Result<Tensor> load(std::string_view name) const override;

 private:
  const format::GgufTensorInfo* info(std::string_view name) const;

  std::shared_ptr<const format::GgufFile> file_;
  ModelSpec spec_;
  DType dequant_dtype_;
  std::map<std::string, const format::GgufTensorInfo*, std::less<>> by_canonical_;
};

}  // namespace cellm::model
