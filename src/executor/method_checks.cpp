#include "executor/method_checks.h"

#include <charconv>
#include <limits>

#include "cellm/types.h"

namespace cellm::executor {
namespace {

std::string spec_string(const program::TensorSpec& spec) {
  return fmt::format("{}{}{}", dtype_name(spec.dtype), shape_string(spec.shape),
                     spec.device == Device::kCuda ? "@cuda" : "");
}

Status check_logits_output(std::string_view method, const program::TensorSpec& logits,
                           std::int64_t vocab) {
  if (logits.shape.size() != 2 || logits.shape[1] != vocab || !float_like(logits.dtype)) {
    return invalid_program("method {}: input 0 (logits) must be f32/f16/bf16 [R, {}], got {}",
                           method, vocab, spec_string(logits));
  }
  return Status::ok();
}

Status check_token_output(std::string_view method, const program::MethodMeta& meta) {
  if (meta.outputs.size() != 1 || meta.outputs[0].dtype != DType::kI64 ||
      meta.outputs[0].shape.size() != 1) {
    return invalid_program("method {}: must return exactly one i64[R] tensor of tokens", method);
  }
  if (meta.outputs[0].device != Device::kCpu) {
    return invalid_program(
        "method {}: returns its tokens on the device; they must come back to "
        "the host",
        method);
  }
  return Status::ok();
}

}  // namespace

bool float_like(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

std::optional<std::int32_t> static_method_width(std::string_view name) {
  if (!name.starts_with(program::kStaticMethodPrefix)) return std::nullopt;
  const std::string_view digits = name.substr(program::kStaticMethodPrefix.size());
  if (digits.empty()) return std::nullopt;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  std::int32_t value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error != std::errc() || end != digits.data() + digits.size() || value <= 0) {
    return std::nullopt;
  }
  return value;
}

Result<ForwardSignature> check_forward(std::string_view name, const program::MethodMeta& meta,
                                       SelectorRule selector) {
  ForwardSignature sig;
  sig.name = std::string(name);
  sig.dynamic = meta.dynamic;
  const std::size_t n = meta.inputs.size();
  const bool ok_count = selector == SelectorRule::kRequired ? n == 3 : (n == 2 || n == 3);
  if (!ok_count) {
    return invalid_program(
        "method {}: takes {} inputs; expected tokens, positions{} (export logits mode 'selected')",
        name, n, selector == SelectorRule::kRequired ? " and a row selector" : " [and a selector]");
  }
  const program::TensorSpec& tokens = meta.inputs[0];
  if (tokens.dtype != DType::kI64 || tokens.shape.size() != 2 || tokens.shape[0] != 1 ||
      tokens.shape[1] <= 0) {
    return invalid_program("method {}: input 0 (tokens) must be i64[1, T] with T > 0, got {}", name,
                           spec_string(tokens));
  }
  sig.width = tokens.shape[1];
  const program::TensorSpec& positions = meta.inputs[1];
  if (positions.dtype != DType::kI64 || positions.shape != Shape{sig.width}) {
    return invalid_program("method {}: input 1 (positions) must be i64[{}], got {}", name,
                           sig.width, spec_string(positions));
  }
  if (n == 3) {
    const program::TensorSpec& sel = meta.inputs[2];
    if (sel.dtype != DType::kI64 || sel.shape.size() != 1) {
      return invalid_program("method {}: input 2 (selector) must be a rank-1 i64, got {}", name,
                             spec_string(sel));
    }
    sig.selects_rows = true;
  }
  if (meta.outputs.empty()) {
    return invalid_program("method {}: returns nothing; output 0 must be the logits", name);
  }
  const program::TensorSpec& logits = meta.outputs[0];
  if (logits.shape.size() < 2 || logits.shape.back() <= 0 || !float_like(logits.dtype)) {
    return invalid_program(
        "method {}: output 0 (logits) must be f32/f16/bf16 of rank >= 2 with a positive vocab "
        "dimension, got {}",
        name, spec_string(logits));
  }
  sig.vocab = logits.shape.back();
  if (meta.outputs.size() > 1) {
    const program::TensorSpec& taps = meta.outputs[1];
    if (taps.shape.size() != 2 || taps.shape[0] != sig.width || !float_like(taps.dtype)) {
      return invalid_program("method {}: output 1 (taps) must be float [{}, D], got {}", name,
                             sig.width, spec_string(taps));
    }
    sig.has_taps = true;
  }
  if (meta.backends.size() != 1) {
    return invalid_program("method {}: runs on {} backends; a forward must run on exactly one",
                           name, meta.backends.size());
  }
  sig.backend = meta.backends[0];
  return sig;
}

Status check_cache_layout(const program::Program& program) {
  const program::CacheLayout layout = program.cache_layout();
  if (layout.layer_windows.empty()) {
    return invalid_program("program ({}) publishes a cache layout with no layers",
                           program.backend_name());
  }
  for (std::size_t l = 0; l < layout.layer_windows.size(); ++l) {
    if (layout.layer_windows[l] < 0) {
      return invalid_program("cache layout: layer {} has a negative window {}", l,
                             layout.layer_windows[l]);
    }
  }
  return Status::ok();
}

Status check_sample_method(const program::MethodMeta& meta, std::int64_t vocab) {
  const std::string_view name = program::kSampleMethod;
  if (meta.inputs.size() != 2 && meta.inputs.size() != 3) {
    return invalid_program(
        "method {}: takes {} inputs; expected logits [R, V], params [R, 4] and optionally "
        "suppressed ids [R, {}]",
        name, meta.inputs.size(), kMaxSuppressedTokens);
  }
  CELLM_RETURN_IF_ERROR(check_logits_output(name, meta.inputs[0], vocab));
  const program::TensorSpec& params = meta.inputs[1];
  if (params.dtype != DType::kF32 || params.shape.size() != 2 || params.shape[1] != 4) {
    return invalid_program("method {}: input 1 (params) must be f32[R, 4], got {}", name,
                           spec_string(params));
  }
  if (meta.inputs.size() == 3) {
    const program::TensorSpec& ids = meta.inputs[2];
    if (ids.dtype != DType::kI64 || ids.device != Device::kCpu || ids.shape.size() != 2 ||
        ids.shape[1] != static_cast<std::int64_t>(kMaxSuppressedTokens)) {
      return invalid_program("method {}: input 2 (suppressed ids) must be host i64[R, {}], got {}",
                             name, kMaxSuppressedTokens, spec_string(ids));
    }
    // Rows without suppression call it with two inputs.
    if (meta.optional_inputs < 1) {
      return invalid_program("method {}: input 2 (suppressed ids) must be optional", name);
    }
  }
  return check_token_output(name, meta);
}

Status check_penalize_method(const program::MethodMeta& meta, std::int64_t vocab) {
  const std::string_view name = program::kPenalizeMethod;
  if (meta.inputs.size() != 4) {
    return invalid_program(
        "method {}: takes {} inputs; expected logits [R, V], rows [R, {}], offsets [R + 1] and "
        "entries [N, 4]",
        name, meta.inputs.size(), program::kPenalizeRowParams);
  }
  CELLM_RETURN_IF_ERROR(check_logits_output(name, meta.inputs[0], vocab));
  const auto host = [](const program::TensorSpec& t, DType dtype, std::size_t rank) {
    return t.dtype == dtype && t.device == Device::kCpu && t.shape.size() == rank;
  };
  if (!host(meta.inputs[1], DType::kF32, 2) ||
      meta.inputs[1].shape[1] != program::kPenalizeRowParams ||
      !host(meta.inputs[2], DType::kI32, 1) || !host(meta.inputs[3], DType::kI32, 2) ||
      meta.inputs[3].shape[1] != 4) {
    return invalid_program(
        "method {}: inputs 1..3 must be host f32[R, {}], i32[R + 1] and "
        "i32[N, 4], got {}, {}, {}",
        name, program::kPenalizeRowParams, spec_string(meta.inputs[1]), spec_string(meta.inputs[2]),
        spec_string(meta.inputs[3]));
  }
  return Status::ok();
}

Status check_mask_method(const program::MethodMeta& meta, std::int64_t vocab) {
  const std::string_view name = program::kMaskMethod;
  if (meta.inputs.size() != 2) {
    return invalid_program("method {}: takes {} inputs; expected logits [R, V] and words [R, {}]",
                           name, meta.inputs.size(), (vocab + 31) / 32);
  }
  CELLM_RETURN_IF_ERROR(check_logits_output(name, meta.inputs[0], vocab));
  const program::TensorSpec& w = meta.inputs[1];
  if (w.dtype != DType::kI32 || w.device != Device::kCpu || w.shape.size() != 2 ||
      w.shape[1] != (vocab + 31) / 32) {
    return invalid_program("method {}: input 1 must be host i32[R, {}], got {}", name,
                           (vocab + 31) / 32, spec_string(w));
  }
  return Status::ok();
}

Status check_logprobs_method(const program::MethodMeta& meta, std::int64_t vocab) {
  const std::string_view name = program::kLogprobsMethod;
  if (meta.inputs.size() != 4 || meta.optional_inputs != 1 || meta.outputs.size() != 2) {
    return invalid_program(
        "method {}: takes {} inputs ({} optional) and returns {} outputs; expected logits [R, V], "
        "params [R, {}], tokens [R] and optional suppressed ids [R, {}], returning logprobs "
        "[R, {}] and ids [R, {}]",
        name, meta.inputs.size(), meta.optional_inputs, meta.outputs.size(),
        program::kLogprobsParams, kMaxSuppressedTokens, 1 + program::kLogprobsMaxTop,
        program::kLogprobsMaxTop);
  }
  CELLM_RETURN_IF_ERROR(check_logits_output(name, meta.inputs[0], vocab));
  const auto host = [](const program::TensorSpec& t, DType dtype, std::size_t rank,
                       std::int64_t last) {
    return t.dtype == dtype && t.device == Device::kCpu && t.shape.size() == rank &&
           (rank < 2 || t.shape[1] == last);
  };
  if (!host(meta.inputs[1], DType::kF32, 2, program::kLogprobsParams) ||
      !host(meta.inputs[2], DType::kI64, 1, 0) ||
      !host(meta.inputs[3], DType::kI64, 2, static_cast<std::int64_t>(kMaxSuppressedTokens)) ||
      !host(meta.outputs[0], DType::kF32, 2, 1 + program::kLogprobsMaxTop) ||
      !host(meta.outputs[1], DType::kI64, 2, program::kLogprobsMaxTop)) {
    return invalid_program(
        "method {}: expected host f32[R, {}], i64[R], i64[R, {}] inputs and host f32[R, {}], "
        "i64[R, {}] outputs, got {}, {}, {} and {}, {}",
        name, program::kLogprobsParams, kMaxSuppressedTokens, 1 + program::kLogprobsMaxTop,
        program::kLogprobsMaxTop, spec_string(meta.inputs[1]), spec_string(meta.inputs[2]),
        spec_string(meta.inputs[3]), spec_string(meta.outputs[0]), spec_string(meta.outputs[1]));
  }
  return Status::ok();
}

Status check_argmax_method(const program::MethodMeta& meta, std::int64_t vocab) {
  const std::string_view name = program::kArgmaxMethod;
  if (meta.inputs.size() != 1) {
    return invalid_program("method {}: takes {} inputs; expected logits [R, V]", name,
                           meta.inputs.size());
  }
  CELLM_RETURN_IF_ERROR(check_logits_output(name, meta.inputs[0], vocab));
  return check_token_output(name, meta);
}

}  // namespace cellm::executor
