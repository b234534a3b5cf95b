// SamplingDefaults: the sampling settings a model ships (Hugging Face
// generation_config.json, or GGUF general.sampling.* metadata), applied to a
// request or a CLI run for each setting it leaves unset. The app reads them
// from the model; the server and the CLI apply them through
// apply_sampling_defaults, the one place where they meet SamplingParams.
//
// Thread-safety: plain values and a pure function.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cellm/types.h"

namespace cellm {

struct SamplingDefaults {
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<std::int32_t> top_k;
  // Read from the model, not applied yet: SamplingParams has no penalty
  // field on this branch (see apply_sampling_defaults).
  std::optional<float> repetition_penalty;
  std::string source;  // "generation_config.json", "GGUF general.sampling.*"; empty: none

  bool any() const {
    return temperature.has_value() || top_p.has_value() || top_k.has_value() ||
           repetition_penalty.has_value();
  }
};

// Which settings the request (or the command line) set itself.
struct SamplingGiven {
  bool temperature = false;
  bool top_p = false;
  bool top_k = false;
  bool repetition_penalty = false;
};

// Fills each setting of `params` the caller did not give from the model's
// defaults; settings neither gives keep the caller's built-in values.
inline void apply_sampling_defaults(const SamplingDefaults& defaults, const SamplingGiven& given,
                                    SamplingParams& params) {
  if (!given.temperature && defaults.temperature) params.temperature = *defaults.temperature;
  if (!given.top_p && defaults.top_p) params.top_p = *defaults.top_p;
  if (!given.top_k && defaults.top_k) params.top_k = *defaults.top_k;
  if (!given.repetition_penalty && defaults.repetition_penalty) {
    params.repetition_penalty = *defaults.repetition_penalty;
  }
}

}  // namespace cellm
