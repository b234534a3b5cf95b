// Program: a set of named methods over one set of weights, plus constants,
// built by a backend from a model (DESIGN §2). The executor discovers methods
// by name and validates their signatures, so any program (a CPU or CUDA
// backend, or a test double) can be driven the same way.
//
// Forward methods take (tokens Long[1,T], positions Long[T], selector Long[R])
// and return logits [R, V] (+ optional taps [T, D]). `sample` takes (logits
// [R, V], params f32[R, 4] and optionally suppressed ids Long[R, 8], -1 for
// an empty slot) and `sample_argmax` (logits) — both return Long[R]. Before running one, the
// executor places the step's real tokens in the bound CellCache; rows past the
// placed count are padding and use the scratch cell.
//
// Thread-safety: not thread-safe. One thread (the engine thread) binds, loads
// and executes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cellm/status.h"
#include "core/tensor.h"

namespace cellm::cache {
class CellCache;
}

namespace cellm::program {

// Method and constant names the executor looks for.
inline constexpr std::string_view kStaticMethodPrefix = "forward_";
inline constexpr std::string_view kDynamicMethod = "forward_others";
inline constexpr std::string_view kModuleMethod = "forward";
inline constexpr std::string_view kSampleMethod = "sample";
inline constexpr std::string_view kArgmaxMethod = "sample_argmax";
// Optional: adjusts device logits in place before `sample`/`sample_argmax`
// (logit_bias, penalties, min_p; sampling/penalties.h is the arithmetic).
// Inputs: logits [R, V] (written in place), rows f32[R, 3] (repetition
// penalty, temperature, min_p log threshold), offsets host i32[R + 1] (row
// r's entries are [offsets[r], offsets[r + 1])) and entries host i32[N, 4]
// (token, bias bits, subtract bits, flags: sampling::PenaltyEntry), N at
// most kPenalizeMaxEntries (a vocabulary of 262,144 ids fits one row). No
// outputs. The executor calls it only for steps where some row has
// adjustments.
inline constexpr std::string_view kPenalizeMethod = "sample_penalize";
inline constexpr std::int64_t kPenalizeMaxEntries = std::int64_t{1} << 18;
inline constexpr std::int64_t kPenalizeRowParams = 3;
// Optional: constrained decoding's vocabulary mask on device logits, in place,
// before sample_penalize and the samplers (sampling/token_mask.h is the
// arithmetic). Inputs: logits [R, V] (written in place) and words host i32
// [R, ceil(V / 32)] (bit t % 32 of word t / 32 set = id t allowed; every id
// whose bit is clear becomes -inf; a row of all ones is left alone). R is at
// most kMaskMaxRows. No outputs. The executor calls it only for steps where
// some row is constrained.
inline constexpr std::string_view kMaskMethod = "sample_mask";
inline constexpr std::int64_t kMaskMaxRows = 256;
// Optional: log probabilities of drawn tokens (sampling/logprobs.h is the
// arithmetic), run after `sample` on the same logits. Inputs: logits [R, V]
// (as the sampler saw them), params host f32[R, 2] (temperature, top count:
// -1 skips the row, else 0..kLogprobsMaxTop), tokens host i64[R] (the drawn
// ids) and, optionally, suppressed ids host i64[R, 8] (-1: empty). Outputs,
// on the host: f32[R, 1 + kLogprobsMaxTop] (the drawn id's logprob, then the
// top ones, most likely first) and i64[R, kLogprobsMaxTop] (the top ids; -1
// past a row's count). Skipped rows' outputs are unspecified. The executor
// calls it only for steps where some row asks for logprobs.
inline constexpr std::string_view kLogprobsMethod = "sample_logprobs";
inline constexpr std::int64_t kLogprobsMaxTop = 20;
inline constexpr std::int64_t kLogprobsParams = 2;
inline constexpr std::string_view kVocabSizeConstant = "get_vocab_size";
inline constexpr std::string_view kMaxContextConstant = "get_max_context_len";
inline constexpr std::string_view kMaxCellsConstant = "get_offgraph_kv_max_cells";
inline constexpr std::string_view kMinSelectedRowsConstant = "get_min_prefill_chunk";
// Optional: K and V bytes one cell holds over every layer (memory reporting).
inline constexpr std::string_view kKvCellBytesConstant = "get_kv_cell_bytes";

// One input or output of a method. For a dynamic dimension the shape holds
// its upper bound.
struct TensorSpec {
  DType dtype = DType::kF32;
  Shape shape;
  Device device = Device::kCpu;
};

struct MethodMeta {
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  // Backends that run parts of the method; a well-formed forward has exactly one.
  std::vector<std::string> backends;
  bool dynamic = false;  // the token extent may be anything in [1, shape bound]
  // The last this many inputs may be left out of a call (the sample method's
  // suppressed ids: callers without any pass only logits and params).
  std::int32_t optional_inputs = 0;
};

// What the cache must look like: one entry per layer, its sliding window (0 =
// full history). K/V shapes are the backend's business.
struct CacheLayout {
  std::vector<std::int32_t> layer_windows;
};

class Program {
 public:
  virtual ~Program() = default;

  virtual std::string backend_name() const = 0;
  virtual std::vector<std::string> method_names() const = 0;
  virtual Result<MethodMeta> method_meta(std::string_view method) const = 0;
  // A published constant (kVocabSizeConstant, ...); nullopt when not exported.
  virtual std::optional<std::int64_t> constant(std::string_view name) const = 0;
  virtual CacheLayout cache_layout() const = 0;

  // Binds the cache every forward reads and writes; call before load_method.
  virtual Status bind_cache(std::shared_ptr<cache::CellCache> cache) = 0;
  // Prepares a method (and, for CUDA, captures its graph when asked to).
  virtual Status load_method(std::string_view method) = 0;
  // Runs a loaded method. Output tensors are borrowed: valid until the next
  // execute() of any method.
  virtual Result<std::vector<Tensor>> execute(std::string_view method,
                                              std::span<const Tensor> inputs) = 0;
};

}  // namespace cellm::program
