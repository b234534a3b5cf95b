// A TensorSource over a Hugging Face safetensors checkpoint. Names are
// normalised to the text model's canonical form: the multimodal gemma3
// prefixes ("language_model.model.", "model.language_model.") are stripped
// and vision-tower tensors are skipped, since only the text model is served.
//
// Thread-safety: immutable after construction.
#pragma once

#include <map>
#include <string>

#include "format/safetensors.h"
#include "model/tensor_source.h"

namespace cellm::model {

class HfTensorSource final : public TensorSource {
 public:
  static Result<HfTensorSource> open(const std::filesystem::path& folder);

  std::string description() const override { return description_; }
  std::vector<std::string> names() const override;
  std::optional<Shape> shape(std::string_view name) const override;
  std::string stored_type(std::string_view name) const override;
  Result<Tensor> load(std::string_view name) const override;

  std::size_t skipped_tensors() const { return skipped_; }

 private:
  format::SafetensorsCheckpoint checkpoint_;
  std::map<std::string, std::string, std::less<>> file_name_;  // canonical -> stored
  std::string description_;
  std::size_t skipped_ = 0;
};

}  // namespace cellm::model
