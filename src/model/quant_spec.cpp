#include "model/quant_spec.h"

#include <algorithm>
#include <regex>

#include <fmt/format.h>

namespace cellm::model {

std::pair<std::int64_t, std::int64_t> QuantSpec::scale_block(std::int64_t rows,
                                                             std::int64_t cols) const {
  switch (granularity) {
    case ScaleGranularity::kTensor:
      return {std::max<std::int64_t>(rows, 1), std::max<std::int64_t>(cols, 1)};
    case ScaleGranularity::kChannel: return {1, std::max<std::int64_t>(cols, 1)};
    case ScaleGranularity::kBlock: return {block_rows, block_cols};
  }
  return {1, 1};
}

std::pair<std::int64_t, std::int64_t> QuantSpec::scale_grid(std::int64_t rows,
                                                            std::int64_t cols) const {
  const auto [br, bc] = scale_block(rows, cols);
  return {(rows + br - 1) / br, (cols + bc - 1) / bc};
}

bool QuantSpec::ignores(std::string_view module) const {
  for (const auto& entry : ignore) {
    if (entry.starts_with("re:")) {
      // compressed-tensors matches its patterns with Python's re.match: anchored at the start only.
      try {
        const std::regex re(entry.substr(3));
        if (std::regex_search(module.begin(), module.end(), re,
                              std::regex_constants::match_continuous)) {
          return true;
        }
      } catch (const std::regex_error&) {
        continue;  // refused at parse time; never reached for a parsed spec
      }
    } else if (module == entry) {
      return true;
    }
  }
  return false;
}

std::string QuantSpec::describe() const {
  if (!quantized()) return "none";
  std::string s = fmt::format("{}: E4M3 weights, {} scales", quant_method_name(method),
                              granularity_name(granularity));
  if (granularity == ScaleGranularity::kBlock) {
    s += fmt::format(" [{}, {}]", block_rows, block_cols);
  }
  if (!ignore.empty()) s += fmt::format(", {} module pattern(s) left unquantized", ignore.size());
  return s;
}

std::string_view quant_method_name(QuantMethod method) {
  switch (method) {
    case QuantMethod::kNone: return "none";
    case QuantMethod::kFp8: return "fp8";
    case QuantMethod::kFbgemmFp8: return "fbgemm_fp8";
    case QuantMethod::kCompressedTensors: return "compressed-tensors";
  }
  return "?";
}

std::string_view granularity_name(ScaleGranularity granularity) {
  switch (granularity) {
    case ScaleGranularity::kTensor: return "per-tensor";
    case ScaleGranularity::kChannel: return "per-channel";
    case ScaleGranularity::kBlock: return "block";
  }
  return "?";
}

bool is_activation_scale(std::string_view stored_name) {
  for (std::string_view suffix : {".input_scale", ".input_scale_ub", ".k_scale", ".v_scale"}) {
    if (stored_name.ends_with(suffix)) return true;
  }
  return false;
}

}  // namespace cellm::model
