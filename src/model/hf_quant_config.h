// Parsing of config.json's `quantization_config` into a QuantSpec (see
// quant_spec.h for the layouts read). Anything else — another quant_method,
// weights that are not 8-bit floats, asymmetric or grouped schemes, sparsity
// or transforms — is refused with a message naming the field and value and
// saying what is supported. Internal to the model library (it takes JSON).
//
// Thread-safety: a pure function.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "cellm/status.h"
#include "model/quant_spec.h"

namespace cellm::model {

// `config` is the `quantization_config` value; `source` names the file in errors.
Result<QuantSpec> parse_quantization_config(const nlohmann::json& config,
                                            const std::string& source);

}  // namespace cellm::model
