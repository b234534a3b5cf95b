// One forward over a slice of a packed step, shared by the executors: place
// the slice's real tokens in the cache, build the padded inputs (padding rows
// carry token 0 at position 0 and use the scratch cell), run the method and
// check the logits it returns.
//
// Thread-safety: not thread-safe; the engine thread runs forwards.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "cache/cell_cache.h"
#include "cellm/status.h"
#include "core/tensor.h"
#include "program/program.h"

namespace cellm::executor {

struct ForwardInputs {
  std::string_view method;
  std::int64_t width = 0;                   // token rows the method runs (>= real tokens)
  std::span<const std::int64_t> tokens;     // real tokens of the slice
  std::span<const std::int64_t> positions;  // their positions
  std::span<const cache::SeqId> seq_ids;    // their sequences
  // Selected rows (already padded), or empty for a method that returns a
  // row per token.
  std::span<const std::int64_t> selector;
  bool selects_rows = true;
};

// Host buffers a forward's inputs are built in, kept by the caller from step
// to step so a step allocates none (the method reads views of them).
struct ForwardScratch {
  std::vector<std::int64_t> tokens;
  std::vector<std::int64_t> positions;
  std::vector<std::int64_t> selector;
  std::vector<std::int32_t> positions32;
  std::vector<Tensor> inputs;
};

struct ForwardOutputs {
  Tensor logits;               // [rows, vocab]; borrowed until the next execute
  std::optional<Tensor> taps;  // [width, D] when the method exports them
};

// Places the slice, then runs the method. Errors name the method; a refused
// placement changes nothing, a failed forward may have written KV. The
// inputs are built in `scratch` when given, else in buffers of this call.
Result<ForwardOutputs> run_forward(program::Program& program, cache::CellCache& cache,
                                   const ForwardInputs& inputs, std::int64_t vocab,
                                   ForwardScratch* scratch = nullptr);

// The selector padded to `rows` entries by repeating its last entry.
std::vector<std::int64_t> pad_selector(std::vector<std::int64_t> selector, std::int64_t rows);

}  // namespace cellm::executor
