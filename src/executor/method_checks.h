// Checks of a program's exported methods, shared by the executors: forward
// signatures (tokens Long[1, T], positions Long[T], optional selector
// Long[R] -> logits [R, V] (+ taps)), sampler signatures, and the parsing of
// static method names (batching_spec §4.1 items 7 and 12).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "cellm/status.h"
#include "core/tensor.h"
#include "program/program.h"

namespace cellm::executor {

// What an executor needs to know about one forward method.
struct ForwardSignature {
  std::string name;
  std::int64_t width = 0;  // exported token extent (upper bound if dynamic)
  bool dynamic = false;
  bool selects_rows = false;  // takes a selector (else returns a row per token)
  std::int64_t vocab = 0;     // last dimension of the logits
  std::string backend;
  bool has_taps = false;  // output 1 is [T, D]
};

// N for a name "forward_<N>" with N a positive decimal that fits int32;
// nullopt for anything else (forward_others, forward_0, forward_4x, ...).
std::optional<std::int32_t> static_method_width(std::string_view name);

// InvalidProgram naming the method and the offending input or output.
// `selector`: kRequired (CudaExecutor) or kOptional (ModuleExecutor).
enum class SelectorRule : std::uint8_t { kRequired, kOptional };
Result<ForwardSignature> check_forward(std::string_view name, const program::MethodMeta& meta,
                                       SelectorRule selector);

// `sample`: (logits [R, V] float-like, params [R, 4] f32[, optional
// suppressed ids host Long[R, kMaxSuppressedTokens]]) -> Long[R];
// `sample_argmax`: (logits [R, V]) -> Long[R]. The tokens must come back on
// the host (the executor never touches device memory).
Status check_sample_method(const program::MethodMeta& meta, std::int64_t vocab);
Status check_argmax_method(const program::MethodMeta& meta, std::int64_t vocab);

// `sample_penalize` (program.h): logits [R, V] float, rows f32[R, 3],
// offsets host i32[R + 1], entries host i32[N, 4]; no outputs.
Status check_penalize_method(const program::MethodMeta& meta, std::int64_t vocab);
// `sample_mask` (program.h): logits [R, V] float and host i32 words
// [R, ceil(V / 32)].
Status check_mask_method(const program::MethodMeta& meta, std::int64_t vocab);

// `sample_logprobs` (program.h): logits [R, V] float, params host f32[R, 2],
// tokens host i64[R], optional suppressed ids host i64[R, 8]; outputs host
// f32[R, 1 + 20] and host i64[R, 20].
Status check_logprobs_method(const program::MethodMeta& meta, std::int64_t vocab);

// The program's cache layout: at least one layer, no negative window.
Status check_cache_layout(const program::Program& program);

bool float_like(DType dtype);

}  // namespace cellm::executor
