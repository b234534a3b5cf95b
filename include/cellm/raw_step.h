// The raw executor contract for model adapters: an Executor that also runs a
// caller-packed step over cache sequences the caller owns and hands back the
// step's logits (and taps) for the caller to read or sample. The batching
// executor over a program of forward methods (executor::CudaExecutor, on
// CUDA or on the CPU program that drives it in CI) implements it; a model
// adapter (speculative decoding, a draft/target pair, a golden check) writes
// against this header alone.
//
// Tensor is opaque here: pass RawTargetOutput::logits back to argmax_rows or
// sample_rows within the callback; its definition is internal. No CUDA (or
// other third-party) header is reached from this file.
//
// Thread-safety: as Executor, every call on one thread (the one that called
// initialize()); a RawTargetOutput and what it refers to are borrowed until
// the callback returns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "cellm/executor.h"
#include "cellm/types.h"

namespace cellm {

class Tensor;

// A packed step whose sequences the caller owns (created through the
// executor's cache, rewound by the caller). Do not mix these sequences with
// sessions.
struct RawTargetStep {
  std::vector<std::int64_t> tokens;
  std::vector<std::int64_t> positions;
  std::vector<std::int32_t> seq_ids;  // one cache sequence per token
  // Global token rows whose logits are wanted; -1 discards. Repeats and any
  // order are allowed: RawTargetOutput::selected_indices maps each returned
  // row back to its entry here.
  std::vector<std::int64_t> logit_indices;
};

// One forward's results (a wide step runs as several), borrowed until the
// callback returns.
struct RawTargetOutput {
  std::int64_t offset = 0;  // first token of the step in this forward
  std::int64_t length = 0;  // real tokens in this forward
  const Tensor& logits;     // [rows, V]; rows beyond selected_indices.size() are padding
  const Tensor* taps;       // [width, D] for every row, padding included; null if none
  const std::vector<std::size_t>& selected_indices;  // logits row i answers logit_indices[it]
};

class RawStepExecutor : public Executor {
 public:
  // Tokens one session may hold.
  virtual int max_session_tokens() const = 0;
  virtual std::int64_t vocab_size() const = 0;

  // Runs `step`, calling `consume` once per forward in order; false when the
  // step is malformed, a forward fails or `consume` returns false. The
  // callback must not call execute_raw() again and must copy what it needs
  // before returning. A failed step or callback may have written KV; the
  // sequences' owners must not continue them.
  virtual bool execute_raw(const RawTargetStep& step,
                           const std::function<bool(const RawTargetOutput&)>& consume) = 0;
  // Argmax of the first `rows` rows; no policy, no generator. Device logits
  // need the program's sample_argmax.
  virtual std::optional<std::vector<Token>> argmax_rows(const Tensor& logits, std::size_t rows) = 0;
  // Samples the first `rows` rows with params [rows, 4] (temperature, top_p,
  // top_k, coin in [0, 1)). Device logits need the program's sample method.
  virtual std::optional<std::vector<Token>> sample_rows(const Tensor& logits, std::size_t rows,
                                                        const std::vector<float>& params) = 0;
};

}  // namespace cellm
