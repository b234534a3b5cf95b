#include "app/generation_defaults.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/files.h"

namespace cellm::app {
namespace {

Status out_of_range(const std::string& where, std::string_view key, double value,
                    std::string_view range) {
  return data_loss("{}: '{}' is {}, outside {}; fix or remove it", where, key, value, range);
}

// Range checks shared by both sources.
Status check(const SamplingDefaults& d, const std::string& where, std::string_view temp_key,
             std::string_view top_p_key, std::string_view top_k_key,
             std::string_view penalty_key) {
  if (d.temperature && !(*d.temperature >= 0.0f && *d.temperature <= 10.0f)) {
    return out_of_range(where, temp_key, *d.temperature, "[0, 10]");
  }
  if (d.top_p && !(*d.top_p > 0.0f && *d.top_p <= 1.0f)) {
    return out_of_range(where, top_p_key, *d.top_p, "(0, 1]");
  }
  if (d.top_k && *d.top_k < 0) return out_of_range(where, top_k_key, *d.top_k, "[0, inf)");
  if (d.repetition_penalty && !(*d.repetition_penalty > 0.0f)) {
    return out_of_range(where, penalty_key, *d.repetition_penalty, "(0, inf)");
  }
  return Status::ok();
}

Result<std::optional<double>> json_number(const nlohmann::json& config, const std::string& where,
                                          const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::optional<double>();
  if (!it->is_number()) return data_loss("{}: '{}' must be a number, got {}", where, key, it->dump());
  return std::optional<double>(it->get<double>());
}

}  // namespace

Result<SamplingDefaults> parse_generation_config(const nlohmann::json& config,
                                                 const std::string& where) {
  SamplingDefaults d;
  if (!config.is_object()) return data_loss("{}: expected a JSON object", where);
  bool do_sample = false;
  if (auto it = config.find("do_sample"); it != config.end() && !it->is_null()) {
    if (!it->is_boolean()) return data_loss("{}: 'do_sample' must be true or false", where);
    do_sample = it->get<bool>();
  }
  CELLM_ASSIGN_OR_RETURN(auto temperature, json_number(config, where, "temperature"));
  CELLM_ASSIGN_OR_RETURN(auto top_p, json_number(config, where, "top_p"));
  CELLM_ASSIGN_OR_RETURN(auto top_k, json_number(config, where, "top_k"));
  CELLM_ASSIGN_OR_RETURN(auto penalty, json_number(config, where, "repetition_penalty"));
  if (do_sample) {
    // transformers samples at temperature 1 unless the config says otherwise.
    d.temperature = static_cast<float>(temperature.value_or(1.0));
    if (top_p) d.top_p = static_cast<float>(*top_p);
    if (top_k) {
      if (*top_k != static_cast<double>(static_cast<std::int64_t>(*top_k)) || *top_k > 1e9) {
        return data_loss("{}: 'top_k' must be a whole number, got {}", where, *top_k);
      }
      d.top_k = static_cast<std::int32_t>(*top_k);
    }
  } else if (temperature || top_p || top_k) {
    // Sampling settings without do_sample: transformers decodes greedily.
    d.temperature = 0.0f;
  }
  if (penalty) d.repetition_penalty = static_cast<float>(*penalty);
  CELLM_RETURN_IF_ERROR(
      check(d, where, "temperature", "top_p", "top_k", "repetition_penalty"));
  if (d.any()) d.source = where;
  return d;
}

Result<SamplingDefaults> gguf_sampling_defaults(const format::GgufFile& gguf) {
  SamplingDefaults d;
  const std::string where = gguf.path();
  auto number = [&](std::string_view key) -> Result<std::optional<double>> {
    const format::GgufValue* v = gguf.find(key);
    if (v == nullptr) return std::optional<double>();
    std::optional<double> x = v->as_float();
    if (!x) {
      if (auto i = v->as_int()) x = static_cast<double>(*i);
    }
    if (!x) return data_loss("{}: GGUF metadata '{}' must be a number", where, key);
    return x;
  };
  CELLM_ASSIGN_OR_RETURN(auto temperature, number("general.sampling.temp"));
  CELLM_ASSIGN_OR_RETURN(auto top_p, number("general.sampling.top_p"));
  CELLM_ASSIGN_OR_RETURN(auto top_k, number("general.sampling.top_k"));
  CELLM_ASSIGN_OR_RETURN(auto penalty, number("general.sampling.penalty_repeat"));
  if (temperature) d.temperature = static_cast<float>(*temperature);
  if (top_p) d.top_p = static_cast<float>(*top_p);
  // top_k <= 0 means off, as llama.cpp reads it.
  if (top_k) d.top_k = static_cast<std::int32_t>(std::clamp(*top_k, 0.0, 1e9));
  if (penalty) d.repetition_penalty = static_cast<float>(*penalty);
  CELLM_RETURN_IF_ERROR(check(d, where, "general.sampling.temp", "general.sampling.top_p",
                              "general.sampling.top_k", "general.sampling.penalty_repeat"));
  if (d.any()) d.source = "GGUF general.sampling.*";
  return d;
}

Result<SamplingDefaults> load_generation_defaults(const model::LoadedModel& model) {
  if (const format::GgufFile* gguf = model.gguf_metadata()) return gguf_sampling_defaults(*gguf);
  const std::filesystem::path file = model.path / "generation_config.json";
  if (!std::filesystem::is_regular_file(file)) return SamplingDefaults{};
  CELLM_ASSIGN_OR_RETURN(const std::string text, read_file(file));
  auto doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded()) return data_loss("{} is not valid JSON", file.string());
  return parse_generation_config(doc, file.string());
}

std::string describe_sampling_defaults(const SamplingDefaults& d) {
  std::vector<std::string> parts;
  if (d.temperature) parts.push_back(fmt::format("temperature {}", *d.temperature));
  if (d.top_p) parts.push_back(fmt::format("top_p {}", *d.top_p));
  if (d.top_k) parts.push_back(fmt::format("top_k {}", *d.top_k));
  if (d.repetition_penalty) {
    parts.push_back(fmt::format("repetition_penalty {} (read, not applied yet)",
                                *d.repetition_penalty));
  }
  if (parts.empty()) return "none";
  return fmt::format("{} from {}", fmt::join(parts, ", "), d.source);
}

}  // namespace cellm::app
