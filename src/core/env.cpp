#include "core/env.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <unistd.h>  // environ
#include <vector>

namespace cellm {
namespace {

constexpr KnobInfo kKnobs[] = {
    {"CELLM_MODEL", "a model file, a folder holding one, or a name in the model folders", "smollm2",
     "the model a command loads when --model is not given"},
    {"CELLM_COMMIT", "any text", "unknown",
     "the commit a benchmark's JSON lines carry (scripts/gpu-env sets it)"},
    {"CELLM_GEMV_MAX_ROWS", "an integer from 1 to 8", "1",
     "CUDA: steps of at most this many rows run their projections on the fused GEMV instead of "
     "cuBLASLt (live experiment: the many-row GEMV)"},
    {"CELLM_GEMV_MMA", "0 (none), 1 (all) or a comma list of qkv, o, gate_up, down, lm_head, quant",
     "qkv,o,gate_up,down",
     "CUDA: which projections of a one-row step run on tensor cores where their walk is short, "
     "and (quant) whether 2..8-row steps over quantized weights do (live experiment)"},
    {"CELLM_THREADS", "an integer from 1 to 4096", "every core",
     "CPU: the fast program's threads when --threads is not given"},
};

std::string known_names() {
  std::string out;
  for (const KnobInfo& k : kKnobs) out += (out.empty() ? "" : ", ") + std::string(k.name);
  return out;
}

Status bad_value(const char* name, const std::string& value) {
  for (const KnobInfo& k : kKnobs) {
    if (std::string_view(k.name) == name) {
      return invalid_argument("{}='{}' is not a valid value: expected {} (default {})", name, value,
                              k.accepted, k.default_value);
    }
  }
  return invalid_argument("{}='{}' is not a valid value", name, value);
}

Result<std::int32_t> parse_int(const char* name, const std::string& value, std::int32_t lo,
                               std::int32_t hi) {
  std::int32_t out = 0;
  const char* end = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(value.data(), end, out);
  if (ec != std::errc() || ptr != end || out < lo || out > hi) return bad_value(name, value);
  return out;
}

// 0, 1 or a comma list of kGemvMmaProjections.
Result<std::uint32_t> parse_projections(const char* name, const std::string& value) {
  if (value == "0") return 0u;
  if (value == "1") return kGemvMmaAll;
  std::uint32_t bits = 0;
  std::size_t at = 0;
  while (at <= value.size()) {
    const std::size_t comma = std::min(value.find(',', at), value.size());
    const std::string_view item = std::string_view(value).substr(at, comma - at);
    bool known = false;
    for (std::uint32_t i = 0; i < std::size(kGemvMmaProjections); ++i) {
      if (item == kGemvMmaProjections[i]) {
        bits |= 1u << i;
        known = true;
      }
    }
    if (!known) return bad_value(name, value);
    at = comma + 1;
  }
  return bits;
}

bool is_known(std::string_view name) {
  for (const KnobInfo& k : kKnobs) {
    if (name == k.name) return true;
  }
  return false;
}

std::optional<std::string> process_lookup(const char* name) {
  const char* v = std::getenv(name);  // the project's one read of the environment
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

}  // namespace

std::span<const KnobInfo> known_knobs() {
  return kKnobs;
}

Result<Knobs> parse_knobs(const EnvLookup& lookup) {
  Knobs k;
  k.model = lookup("CELLM_MODEL");
  k.commit = lookup("CELLM_COMMIT");
  if (auto v = lookup("CELLM_GEMV_MAX_ROWS")) {
    CELLM_ASSIGN_OR_RETURN(k.kernels.gemv_max_rows, parse_int("CELLM_GEMV_MAX_ROWS", *v, 1, 8));
  }
  if (auto v = lookup("CELLM_GEMV_MMA")) {
    CELLM_ASSIGN_OR_RETURN(k.kernels.gemv_mma, parse_projections("CELLM_GEMV_MMA", *v));
  }
  return k;
}

// The fixture folder the shared test data defines (its README): read by the
// test suites, never by cellm, and set around the e2e tests that start it.
// Every other variable of the tests and scripts is CELLMDEV_*, outside the
// product's namespace.
constexpr std::string_view kTestDataVariable = "CELLM_TESTDATA";

Status check_environment(std::span<const std::string> names, const EnvLookup& lookup) {
  for (const std::string& name : names) {
    if (!name.starts_with("CELLM_") || is_known(name) || name == kTestDataVariable) continue;
    const std::optional<std::string> value = lookup(name.c_str());
    return invalid_argument(
        "unknown environment variable {}='{}': cellm reads {} (README, \"Environment "
        "variables\"); unset it or correct its name",
        name, value.value_or(""), known_names());
  }
  return parse_knobs(lookup).status();
}

Status check_process_environment() {
  std::vector<std::string> names;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    names.emplace_back(entry.substr(0, entry.find('=')));
  }
  return check_environment(names, process_lookup);
}

const Knobs& knobs() {
  static const Knobs parsed = [] {
    Result<Knobs> k = parse_knobs(process_lookup);
    if (!k.ok()) {
      // Only a binary that skipped check_process_environment gets here.
      std::fprintf(stderr, "cellm: %s\n", k.status().to_string().c_str());
      std::abort();
    }
    return *std::move(k);
  }();
  return parsed;
}

std::optional<std::string> env_string(const char* name) {
  return process_lookup(name);
}

}  // namespace cellm
