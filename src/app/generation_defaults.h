// The model's own sampling defaults (cellm/sampling_defaults.h), read from a
// Hugging Face folder's generation_config.json or a GGUF file's
// general.sampling.* metadata.
//
// Hugging Face semantics are kept: temperature, top_p and top_k only matter
// when the config sets do_sample true (otherwise transformers decodes
// greedily and so do we: temperature 0). repetition_penalty is read either way.
// A value out of its range is an error naming the file and the key.
//
// Thread-safety: pure functions over immutable inputs.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "cellm/sampling_defaults.h"
#include "cellm/status.h"
#include "format/gguf.h"
#include "model/loader.h"

namespace cellm::app {

// `where` names the source in errors.
Result<SamplingDefaults> parse_generation_config(const nlohmann::json& config,
                                                 const std::string& where);
// general.sampling.temp / top_p / top_k / penalty_repeat when present.
Result<SamplingDefaults> gguf_sampling_defaults(const format::GgufFile& gguf);
// From the model's format; every field unset when it ships none.
Result<SamplingDefaults> load_generation_defaults(const model::LoadedModel& model);

// "temperature 0.7, top_p 0.95, top_k 64, repetition_penalty 1.1 (unused) from X"
std::string describe_sampling_defaults(const SamplingDefaults& defaults);

}  // namespace cellm::app
