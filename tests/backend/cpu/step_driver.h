// StepDriver: a test-only stand-in for the executor. It owns a CellCache
// bound to a CpuProgram, places each step's tokens, pads static widths with
// token 0 at position 0 (scratch cell), builds the selector and returns the
// wanted rows' logits — so the program is checked without the executor.
//
// Thread-safety: not thread-safe.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/cpu_program.h"
#include "cache/cell_cache.h"

namespace cellm::cpu::testing {

struct DriverToken {
  cache::SeqId seq = 0;
  std::int64_t token = 0;
  bool want_logits = false;
};

class StepDriver {
 public:
  // Binds a new cache of `config` to the program and loads every method.
  static Result<std::unique_ptr<StepDriver>> create(std::unique_ptr<CpuProgram> program,
                                                    const cache::CellCacheConfig& config);

  CpuProgram& program() { return *program_; }
  cache::CellCache& cache() { return *cache_; }

  // One step: the tokens continue their sequences in order. `method` empty:
  // the narrowest static forward that holds them, else forward_others. Static
  // methods get padding rows; the selector repeats its last real entry.
  Result<std::vector<std::vector<float>>> step(std::span<const DriverToken> tokens,
                                               const std::string& method = {});

  // Feeds `tokens` to `seq` in chunks of `chunk`, returning every position's logits.
  Result<std::vector<std::vector<float>>> feed(cache::SeqId seq,
                                               std::span<const std::int64_t> tokens,
                                               std::size_t chunk, const std::string& method = {});

  // Taps [T, D] of the last step (empty unless the program has taps on).
  const std::vector<float>& last_taps() const { return last_taps_; }

  std::string narrowest_method(std::size_t n) const;

 private:
  StepDriver(std::unique_ptr<CpuProgram> program, std::shared_ptr<cache::CellCache> cache)
      : program_(std::move(program)), cache_(std::move(cache)) {}

  std::unique_ptr<CpuProgram> program_;
  std::shared_ptr<cache::CellCache> cache_;
  std::vector<float> last_taps_;
};

}  // namespace cellm::cpu::testing
