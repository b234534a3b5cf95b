// Which attention kernel serves each row of an eagerly run (dynamic-width)
// step, and which of a row's keys are older than the step. A row whose sequence has only a few rows
// in the step (a decode, a short chunk) reads its history alone, which the split-KV decode kernel
// does in parallel; the prefill kernel shares K/V tiles among the rows of one sequence but walks
// the sequences of a 64-row tile one after another, so a tile of 64 decodes costs 64 full passes.
// Host code, no CUDA. Thread-safety: pure functions; the caller owns the scratch.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace cellm::cuda {

// A sequence with at least this many rows in a step goes to the prefill kernel.
inline constexpr std::int32_t kPrefillKernelMinRows = 16;

// Writes into `order` ([width]) the decode-kernel rows first, then the others
// (padding rows, slot < 0, among them), each group in step order; returns how
// many rows lead (at most `max_decode_rows`; any excess joins the others).
// `slots` holds each row's sequence slot; `scratch` is reused between calls.
std::int32_t split_attention_rows(std::span<const std::int32_t> slots, std::int32_t max_decode_rows,
                                  std::span<std::int32_t> order,
                                  std::vector<std::int32_t>& scratch);

// Writes into `fresh_from` ([width]) each row's lowest position among the
// rows of its sequence in the step (0 for padding rows, slot < 0): keys
// before it were written by earlier steps (AttentionParams::fresh_from).
void first_step_positions(std::span<const std::int32_t> slots,
                          std::span<const std::int32_t> positions,
                          std::span<std::int32_t> fresh_from, std::vector<std::int32_t>& scratch);

}  // namespace cellm::cuda
