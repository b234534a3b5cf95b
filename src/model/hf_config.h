// ModelSpec from a Hugging Face config.json (transformers 5 layout with
// rope_parameters/layer_types, or the transformers 4 layout with rope_theta,
// rope_scaling, sliding_window_pattern, rope_local_base_freq, ...) for llama,
// qwen2, qwen3, mistral, gemma3_text (or gemma3 with a text_config) and phi3.
// generation_config.json, when present, supplies bos/eos. A
// `quantization_config` becomes spec.quant (hf_quant_config.h).
//
// Errors name the file and the field that is missing, mistyped or unsupported.
//
// Thread-safety: pure functions (they read files but keep no state).
#pragma once

#include <filesystem>
#include <string_view>

#include "cellm/status.h"
#include "model/model_spec.h"

namespace cellm::model {

// Parses config JSON text; `source` names it in errors ("…/config.json").
Result<ModelSpec> spec_from_hf_config_text(std::string_view json_text, std::string_view source);
// Overrides bos/eos from generation_config JSON text (fields absent there are kept).
Status apply_generation_config_text(std::string_view json_text, std::string_view source,
                                    ModelSpec& spec);
// Reads `config_path` and, if it exists, generation_config.json beside it.
Result<ModelSpec> read_hf_spec(const std::filesystem::path& config_path);

}  // namespace cellm::model
