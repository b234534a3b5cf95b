// ForwardMethods: the method family every backend's program exports, built
// from ProgramOptions — static forward_N, dynamic forward_others and
// forward, and the optional samplers — with their signatures and the
// validation of a forward's inputs against the cache's placed step. Backends
// share it so that a CPU and a CUDA program answer discovery identically and
// refuse the same malformed calls with the same messages.
//
// Thread-safety: not thread-safe; owned by one program.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cache/cell_cache.h"
#include "cellm/status.h"
#include "core/tensor.h"
#include "program/program.h"
#include "program/program_options.h"

namespace cellm::program {

enum class MethodKind : std::uint8_t {
  kStatic,
  kDynamic,
  kModule,
  kSample,
  kArgmax,
  kPenalize,
  kMask,
  kLogprobs
};

// The kinds that take (tokens, positions, selector) and need a bound cache.
constexpr bool is_forward(MethodKind kind) {
  switch (kind) {
    case MethodKind::kStatic:
    case MethodKind::kDynamic:
    case MethodKind::kModule: return true;
    case MethodKind::kSample:
    case MethodKind::kArgmax:
    case MethodKind::kPenalize:
    case MethodKind::kMask:
    case MethodKind::kLogprobs: return false;
  }
  return false;
}

struct MethodEntry {
  MethodKind kind = MethodKind::kStatic;
  std::int32_t width = 0;  // static: exact token count; dynamic: upper bound; samplers: 0
  bool loaded = false;
};

// One row of a forward as the cache placed it. Padding rows (past the placed
// tokens) have seq -1 and the scratch cell.
struct PlacedRow {
  cache::SeqId seq = -1;
  std::int32_t position = 0;
  cache::CellId cell = cache::kScratchCell;
};

// A validated sample_penalize call (program.h): spans into its host inputs.
struct PenalizeCall {
  std::int32_t rows = 0;
  std::span<const float> row_params;      // [rows, kPenalizeRowParams]
  std::span<const std::int32_t> offsets;  // [rows + 1]
  std::span<const std::int32_t> entries;  // [N, 4]
};

// A validated sample_mask call (program.h): the host mask words.
struct MaskCall {
  std::int32_t rows = 0;
  std::int32_t words_per_row = 0;
  std::span<const std::uint32_t> words;  // [rows, words_per_row]
};

// A validated sample_logprobs call (program.h): spans into its host inputs.
struct LogprobsCall {
  std::int32_t rows = 0;
  std::span<const float> params;             // [rows, kLogprobsParams]
  std::span<const std::int64_t> tokens;      // [rows]
  std::span<const std::int64_t> suppressed;  // [rows, kMaxSuppressedTokens] or empty
};

// A validated forward call.
struct ForwardCall {
  std::span<const std::int64_t> tokens;     // [T]
  std::span<const std::int64_t> positions;  // [T]
  std::span<const std::int64_t> selector;   // [R]
  std::vector<PlacedRow> rows;              // [T]
  std::int32_t placed = 0;                  // real rows; the rest are padding
};

class ForwardMethods {
 public:
  // Checks the widths, max_step and min_prefill_chunk of `options`.
  static Result<ForwardMethods> build(const ProgramOptions& options, std::string backend);

  std::vector<std::string> names() const;
  // Null when the program does not export `name`.
  MethodEntry* find(std::string_view name);
  const MethodEntry* find(std::string_view name) const;
  // The method `execute` may run: NotFound when it is not exported,
  // InvalidArgument when it is not loaded yet.
  Result<const MethodEntry*> find_loaded(std::string_view name) const;

  // Signatures. Forward logits live on `logits_device`; taps (when enabled)
  // are f32 [T, hidden].
  Result<MethodMeta> meta(std::string_view name, std::int64_t vocab, std::int64_t hidden,
                          Device logits_device) const;

  // Checks a forward's three host inputs (shapes, widths, token ids inside
  // the vocabulary, selector rows inside [0, T)) and matches the first rows to
  // the cache's current placement. Nothing is changed on refusal.
  Result<ForwardCall> check_forward(std::string_view name, const MethodEntry& method,
                                    std::span<const Tensor> inputs, std::int64_t vocab,
                                    const cache::CellCache& cache) const;

  // Checks sample_penalize's inputs (program.h) for logits on `device`:
  // shapes, offsets that start at 0, never fall and end at N, at most
  // kPenalizeMaxEntries entries and every entry's token inside [0, vocab).
  // Nothing is changed on refusal.
  Result<PenalizeCall> check_penalize(std::span<const Tensor> inputs, std::int64_t vocab,
                                      Device device) const;
  // Checks sample_mask's inputs (program.h) for logits on `device`: logits
  // f32 [1..kMaskMaxRows, vocab] and host i32 words [rows, ceil(vocab / 32)].
  Result<MaskCall> check_mask(std::span<const Tensor> inputs, std::int64_t vocab,
                              Device device) const;
  // Checks sample_logprobs's inputs (program.h) for logits on `device`:
  // shapes, counts in [-1, kLogprobsMaxTop], drawn ids of the rows that ask
  // inside [0, vocab). Nothing is changed on refusal.
  Result<LogprobsCall> check_logprobs(std::span<const Tensor> inputs, std::int64_t vocab,
                                      Device device) const;
  // The narrowest static method of at least `rows` rows; null when none is.
  const MethodEntry* narrowest_static(std::int32_t rows) const;
  const ProgramOptions& options() const { return options_; }

 private:
  ProgramOptions options_;
  std::string backend_;
  std::map<std::string, MethodEntry, std::less<>> methods_;
};

// The usual input checks of a host tensor argument.
Status check_host_input(std::string_view method, std::string_view what, const Tensor& t,
                        DType dtype, int rank);

}  // namespace cellm::program
