// `cellm bench mask`: what constrained decoding costs the host, per token.
//
// Part 1 (per token): every schema of a folder (bench/schemas/*.json, each
// {"schema": ..., "example": ...}; a null schema means response_format
// json_object) is compiled against a real tokenizer (a GGUF model's), its
// example is tokenized, and at each token boundary the next-token mask is
// timed twice: the trie walk alone (a cache miss) and the engine's call
// through the per-grammar cache (cold at the start of each schema). Thread
// CPU time, median and p99 over all tokens of all schemas.
//
// Part 2 (served steps): N sessions generate their schema's example through
// the Runner over a fake executor whose forward sleeps --forward-ms while
// the step's masks are settled (as the CUDA executor overlaps them with the
// device's forward) and whose sampler draws the example's token (or an
// allowed one).
// Each request gets a fresh grammar (a cold mask cache: the worst case).
// The wall time per step unconstrained and constrained (the engine computes
// each mask on its thread when the sampler reads it).
//
// Each result is printed and, with --json, appended as one JSON line.
//
// Thread-safety: one call at a time.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cellm/status.h"

namespace cellm::bench {

struct MaskBenchOptions {
  std::vector<std::string> models = {"models/SmolLM2-135M-Instruct.Q4_1.gguf"};
  std::string schemas = "bench/schemas";
  std::string json_path;
  std::string machine;  // recorded in the JSON lines (e.g. cpu-2core)
  // Part 2; sessions 0 skips it.
  std::int32_t sessions = 16;
  double forward_ms = 5.0;
};

Status run_mask_bench(const MaskBenchOptions& options, std::FILE* out);

}  // namespace cellm::bench
