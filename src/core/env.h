// The process environment, read in one place (env.cpp holds the project's
// only call into the C library for it). The CELLM_* variables the product
// knows are one table (known_knobs: name, accepted values, default, a line of
// doc) parsed by one function, so a knob is added, documented and checked in
// one place; README's knob table lists the same rows.
//
// `cellm` calls check_process_environment() before any work: an unknown
// CELLM_* name, or a known one with a malformed or out-of-range value, stops
// it with a message naming the variable, the value and what is accepted, so
// an A/B run can never measure the default by mistake. The test suites and
// scripts name their own variables CELLMDEV_* (CELLMDEV_E2E_*, ...): outside
// the product's namespace, so the product needs no list of them and never
// mistakes one for a knob. The one exception is CELLM_TESTDATA, the fixture
// folder the shared test data's README defines, which cellm lets pass.
//
// Thread-safety: parse_knobs and check_environment are pure functions of
// their arguments; knobs() parses the process environment once (a
// function-local static) and is safe from any thread after that, as long as
// nobody calls setenv concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "cellm/status.h"

namespace cellm {

// One CELLM_* variable the product reads.
struct KnobInfo {
  const char* name;
  const char* accepted;       // the values it takes, as an error message lists them
  const char* default_value;  // what unset means
  const char* doc;            // one line: what it selects
};
// Every CELLM_* variable the product reads, in README's order.
std::span<const KnobInfo> known_knobs();

// Projections of a GEMV step (up to gemv_max_rows rows) that may run on
// tensor cores (CELLM_GEMV_MMA; backend/cuda/kernels/kernel_choice.h's
// GemvMma bits, in this order: qkv, o, gate_up, down, lm_head), and "quant":
// steps of 2..8 rows over weights kept quantized on the tensor-core GEMV of
// kernels/qgemv_mma.cuh instead of the CUDA-core one (a live experiment: off
// until its GPU tests and benchmark have run).
inline constexpr const char* kGemvMmaProjections[] = {"qkv",  "o",       "gate_up",
                                                      "down", "lm_head", "quant"};
inline constexpr std::uint32_t kGemvMmaAll = (1u << 6) - 1;
// qkv, o, gate_up and down: the measured default (bench/results, sessions 19-21).
inline constexpr std::uint32_t kGemvMmaDefault = 0b01111;

// The CUDA kernel choices still open to experiment (the live knobs); the
// settled ones are constants in kernel_choice.h.
struct KernelKnobs {
  // CELLM_GEMV_MAX_ROWS: steps of at most this many rows run their
  // projections on the fused GEMV instead of cuBLASLt.
  std::int32_t gemv_max_rows = 1;
  // CELLM_GEMV_MMA: kGemvMmaProjections bits that run on tensor cores.
  std::uint32_t gemv_mma = kGemvMmaDefault;

  friend bool operator==(const KernelKnobs&, const KernelKnobs&) = default;
};

// The parsed CELLM_* variables.
struct Knobs {
  std::optional<std::string> model;   // CELLM_MODEL
  std::optional<std::string> commit;  // CELLM_COMMIT
  KernelKnobs kernels;
};

// A variable's value as `lookup` reports it (nullopt: unset).
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;

// The known knobs from `lookup`; an unset or empty variable keeps its
// default. A bad value is kInvalidArgument naming the variable, the value and
// the accepted values.
Result<Knobs> parse_knobs(const EnvLookup& lookup);

// parse_knobs, and also: every CELLM_* name in `names` is a known knob or a
// tool variable, else kInvalidArgument naming it and listing the known ones.
Status check_environment(std::span<const std::string> names, const EnvLookup& lookup);

// check_environment over the process environment: `cellm` calls it first.
Status check_process_environment();

// The process's knobs, parsed on first use. A bad value here (a binary that
// skipped check_process_environment) aborts with the same message: never a
// silent default.
const Knobs& knobs();

// A variable's value, or nullopt when unset or empty. For variables outside
// the knob table (HOME, XDG_*; the tests' CELLM_TESTDATA and the like).
std::optional<std::string> env_string(const char* name);

}  // namespace cellm
