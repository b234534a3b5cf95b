// A TensorSource over a Hugging Face safetensors checkpoint. Names are
// normalised to the text model's canonical form: the multimodal gemma3
// prefixes ("language_model.model.", "model.language_model.") are stripped
// and vision-tower tensors are skipped, since only the text model is served.
//
// FP8 checkpoints (a QuantSpec from config.json's quantization_config): a
// weight stored as F8_E4M3 is paired with its scale tensor
// ("<module>.weight_scale" / "weight_scale_inv"), and load() dequantizes it to
// `dequant_dtype`; fp8() hands out the stored codes and scales instead. The
// pairing is checked at open, before any weight is read: every FP8 weight
// needs a float scale of the shape its granularity implies, every scale
// needs an FP8 weight, F8_E5M2 weights and FP8 weights without a
// quantization_config are refused. Scale tensors and activation / KV-cache
// scales (input_scale, k_scale, ...) are not offered as names.
//
// Thread-safety: immutable after construction.
#pragma once

#include <map>
#include <string>

#include "core/dtype.h"
#include "format/safetensors.h"
#include "model/quant_spec.h"
#include "model/tensor_source.h"

namespace cellm::model {

class HfTensorSource final : public TensorSource {
 public:
  static Result<HfTensorSource> open(const std::filesystem::path& folder,
                                     const QuantSpec& quant = {},
                                     DType dequant_dtype = DType::kF32);

  std::string description() const override { return description_; }
  std::vector<std::string> names() const override;
  std::optional<Shape> shape(std::string_view name) const override;
  std::string stored_type(std::string_view name) const override;
  Result<Tensor> load(std::string_view name) const override;
  std::optional<Fp8Weight> fp8(std::string_view name) const override;

  std::size_t skipped_tensors() const { return skipped_; }
  // Activation and KV-cache scale tensors read past (FP8 checkpoints).
  std::size_t activation_scales() const { return activation_scales_; }

 private:
  Status pair_fp8_scales(const std::filesystem::path& folder,
                         const std::map<std::string, std::string>& scales);

  format::SafetensorsCheckpoint checkpoint_;
  QuantSpec quant_;
  DType dequant_dtype_ = DType::kF32;
  std::map<std::string, std::string, std::less<>> file_name_;  // canonical -> stored
  std::map<std::string, std::string, std::less<>>
      scale_of_;  // canonical FP8 weight -> stored scale
  std::string description_;
  std::size_t skipped_ = 0;
  std::size_t activation_scales_ = 0;
};

}  // namespace cellm::model
