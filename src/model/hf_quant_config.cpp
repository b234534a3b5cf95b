#include "model/hf_quant_config.h"

#include <regex>

namespace cellm::model {
namespace {

using nlohmann::json;

constexpr std::string_view kSupported =
    "cellm loads FP8 (E4M3) checkpoints: quant_method 'fp8' (per-tensor or weight_block_size), "
    "'fbgemm_fp8', or 'compressed-tensors' (format 'float-quantized' or 'naive-quantized', "
    "weights {num_bits: 8, type: 'float', strategy: 'tensor', 'channel' or 'block'})";

// "…/config.json: field 'quantization_config.<path>'".
std::string where(const std::string& source, std::string_view path) {
  return fmt::format("{}: field 'quantization_config.{}'", source, path);
}

const json* find(const json& obj, std::string_view key) {
  const auto it = obj.find(std::string(key));
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

Result<std::vector<std::string>> string_list(const json& obj, std::string_view key,
                                             const std::string& source) {
  std::vector<std::string> out;
  const json* v = find(obj, key);
  if (v == nullptr) return out;
  if (!v->is_array()) {
    return invalid_argument("{} is {}, expected a list of module names", where(source, key),
                            v->dump());
  }
  for (const json& e : *v) {
    if (!e.is_string()) {
      return invalid_argument("{} holds {}, not a module name", where(source, key), e.dump());
    }
    out.push_back(e.get<std::string>());
  }
  return out;
}

// [bo, bi], two positive integers.
Status block_shape(const json& v, const std::string& field, QuantSpec& spec) {
  if (!v.is_array() || v.size() != 2 || !v[0].is_number_unsigned() || !v[1].is_number_unsigned() ||
      v[0].get<std::uint64_t>() == 0 || v[1].get<std::uint64_t>() == 0 ||
      v[0].get<std::uint64_t>() > (1u << 20) || v[1].get<std::uint64_t>() > (1u << 20)) {
    return invalid_argument("{} is {}, expected [rows, cols]: two positive integers", field,
                            v.dump());
  }
  spec.granularity = ScaleGranularity::kBlock;
  spec.block_rows = v[0].get<std::int32_t>();
  spec.block_cols = v[1].get<std::int32_t>();
  return Status::ok();
}

Status parse_fp8(const json& q, const std::string& source, QuantSpec& spec) {
  spec.method = QuantMethod::kFp8;
  if (const json* fmt_v = find(q, "fmt")) {
    if (!fmt_v->is_string() || fmt_v->get<std::string>() != "e4m3") {
      return not_supported("{} is {}; only 'e4m3' weights are supported. {}", where(source, "fmt"),
                           fmt_v->dump(), kSupported);
    }
  }
  if (const json* act = find(q, "activation_scheme")) {
    if (!act->is_string() ||
        (act->get<std::string>() != "dynamic" && act->get<std::string>() != "static")) {
      return invalid_argument("{} is {}, expected 'dynamic' or 'static'",
                              where(source, "activation_scheme"), act->dump());
    }
  }
  if (const json* block = find(q, "weight_block_size")) {
    CELLM_RETURN_IF_ERROR(block_shape(*block, where(source, "weight_block_size"), spec));
    spec.scale_name = "weight_scale_inv";
  } else {
    spec.granularity = ScaleGranularity::kTensor;
    spec.scale_name = "weight_scale";
  }
  // vLLM writes ignored_layers, transformers modules_to_not_convert.
  for (const char* key : {"ignored_layers", "modules_to_not_convert"}) {
    CELLM_ASSIGN_OR_RETURN(auto list, string_list(q, key, source));
    spec.ignore.insert(spec.ignore.end(), list.begin(), list.end());
  }
  return Status::ok();
}

Status parse_fbgemm(const json& q, const std::string& source, QuantSpec& spec) {
  spec.method = QuantMethod::kFbgemmFp8;
  spec.granularity = ScaleGranularity::kChannel;
  spec.scale_name = "weight_scale";
  CELLM_ASSIGN_OR_RETURN(spec.ignore, string_list(q, "modules_to_not_convert", source));
  return Status::ok();
}

Status check_ct_format(const json* v, const std::string& field) {
  if (v == nullptr) return Status::ok();
  const std::string f = v->is_string() ? v->get<std::string>() : v->dump();
  if (f != "float-quantized" && f != "naive-quantized") {
    return not_supported("{} is '{}'. {}", field, f, kSupported);
  }
  return Status::ok();
}

// One config group's `weights` scheme (at quantization_config.<path>), into
// `scheme` (granularity and block).
Status parse_ct_weights(const json& w, const std::string& source, const std::string& path,
                        QuantSpec& scheme) {
  const auto field = [&](std::string_view key) {
    return where(source, path + "." + std::string(key));
  };
  if (!w.is_object()) {
    return invalid_argument("{} is {}, expected an object", where(source, path), w.dump());
  }
  const json* bits = find(w, "num_bits");
  if (bits == nullptr || !bits->is_number_integer() || bits->get<std::int64_t>() != 8) {
    return not_supported("{} is {}; only 8-bit weights are supported. {}", field("num_bits"),
                         bits == nullptr ? "missing" : bits->dump(), kSupported);
  }
  const json* type = find(w, "type");
  if (type == nullptr || !type->is_string() || type->get<std::string>() != "float") {
    return not_supported("{} is {}; only 'float' (FP8 E4M3) weights are supported. {}",
                         field("type"), type == nullptr ? "missing" : type->dump(), kSupported);
  }
  if (const json* sym = find(w, "symmetric"); sym != nullptr && *sym != json(true)) {
    return not_supported("{} is {}; asymmetric (zero-point) weights are not supported",
                         field("symmetric"), sym->dump());
  }
  if (const json* dyn = find(w, "dynamic"); dyn != nullptr && *dyn != json(false)) {
    return not_supported("{} is {}; weights must carry stored scales", field("dynamic"),
                         dyn->dump());
  }
  const json* strategy = find(w, "strategy");
  const std::string s = strategy != nullptr && strategy->is_string()
                            ? strategy->get<std::string>()
                            : (strategy == nullptr ? "missing" : strategy->dump());
  if (s == "tensor") {
    scheme.granularity = ScaleGranularity::kTensor;
  } else if (s == "channel") {
    scheme.granularity = ScaleGranularity::kChannel;
  } else if (s == "block") {
    const json* block = find(w, "block_structure");
    if (block == nullptr) {
      return invalid_argument("{} is missing (required for strategy 'block')",
                              field("block_structure"));
    }
    CELLM_RETURN_IF_ERROR(block_shape(*block, field("block_structure"), scheme));
  } else {
    return not_supported("{} is '{}'; 'tensor', 'channel' and 'block' are supported",
                         field("strategy"), s);
  }
  return Status::ok();
}

Status parse_compressed_tensors(const json& q, const std::string& source, QuantSpec& spec) {
  spec.method = QuantMethod::kCompressedTensors;
  spec.scale_name = "weight_scale";
  CELLM_RETURN_IF_ERROR(check_ct_format(find(q, "format"), where(source, "format")));
  for (const char* key : {"sparsity_config", "transform_config"}) {
    if (const json* v = find(q, key); v != nullptr && !(v->is_object() && v->empty())) {
      return not_supported("{} is set; sparse or transformed checkpoints are not supported. {}",
                           where(source, key), kSupported);
    }
  }
  const json* groups = find(q, "config_groups");
  if (groups == nullptr || !groups->is_object() || groups->empty()) {
    return invalid_argument("{} is {}, expected an object of quantization groups",
                            where(source, "config_groups"),
                            groups == nullptr ? "missing" : groups->dump());
  }
  bool first = true;
  for (const auto& [name, group] : groups->items()) {
    const std::string path = "config_groups." + name;
    const std::string field = where(source, path);
    if (!group.is_object()) {
      return invalid_argument("{} is {}, expected an object", field, group.dump());
    }
    CELLM_RETURN_IF_ERROR(check_ct_format(find(group, "format"), where(source, path + ".format")));
    if (find(group, "output_activations") != nullptr) {
      return not_supported("{} is set; quantized outputs are not supported",
                           where(source, path + ".output_activations"));
    }
    const json* weights = find(group, "weights");
    if (weights == nullptr) {
      return not_supported("{} is missing; groups must quantize weights. {}",
                           where(source, path + ".weights"), kSupported);
    }
    QuantSpec scheme = spec;
    CELLM_RETURN_IF_ERROR(parse_ct_weights(*weights, source, path + ".weights", scheme));
    if (first) {
      spec = scheme;
      first = false;
    } else if (scheme.granularity != spec.granularity || scheme.block_rows != spec.block_rows ||
               scheme.block_cols != spec.block_cols) {
      return not_supported(
          "{} differs from the first group's scheme; groups with "
          "different weight schemes are not supported",
          where(source, path + ".weights"));
    }
  }
  CELLM_ASSIGN_OR_RETURN(spec.ignore, string_list(q, "ignore", source));
  for (const auto& entry : spec.ignore) {
    if (!entry.starts_with("re:")) continue;
    try {
      const std::regex re(entry.substr(3));
    } catch (const std::regex_error& e) {
      return invalid_argument("{} holds '{}', which is not a valid regular expression ({})",
                              where(source, "ignore"), entry, e.what());
    }
  }
  return Status::ok();
}

}  // namespace

Result<QuantSpec> parse_quantization_config(const json& q, const std::string& source) {
  if (!q.is_object()) {
    return invalid_argument("{}: field 'quantization_config' is {}, expected an object", source,
                            q.dump());
  }
  const json* method = find(q, "quant_method");
  if (method == nullptr || !method->is_string()) {
    return invalid_argument("{} is {}, expected a string. {}", where(source, "quant_method"),
                            method == nullptr ? "missing" : method->dump(), kSupported);
  }
  const std::string m = method->get<std::string>();
  QuantSpec spec;
  if (m == "fp8") {
    CELLM_RETURN_IF_ERROR(parse_fp8(q, source, spec));
  } else if (m == "fbgemm_fp8") {
    CELLM_RETURN_IF_ERROR(parse_fbgemm(q, source, spec));
  } else if (m == "compressed-tensors") {
    CELLM_RETURN_IF_ERROR(parse_compressed_tensors(q, source, spec));
  } else {
    return not_supported("{} is '{}', which cellm does not load. {}", where(source, "quant_method"),
                         m, kSupported);
  }
  return spec;
}

}  // namespace cellm::model
