// CellCache microbenchmarks at serving scale: 256 sequences x 4096 tokens.
// Each reports its cost per op (the benchmark time) and per token (the
// per_token counter). Setup and undo work run outside the timed region.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "cache/cell_cache.h"
#include "core/check.h"

namespace cellm::cache {
namespace {

constexpr std::int32_t kSeqs = 256;
constexpr std::int32_t kSeqLen = 4096;

std::unique_ptr<CellCache> make_pool() {
  auto cache = CellCache::create({kSeqs * kSeqLen + 1, kSeqs, kSeqLen});
  CELLM_CHECK(cache.ok(), "{}", cache.status().to_string());
  return std::move(cache).value();
}

void set_per_token(benchmark::State& state, std::int64_t tokens_per_op) {
  state.SetItemsProcessed(state.iterations() * tokens_per_op);
  state.counters["per_token"] = benchmark::Counter(
      static_cast<double>(tokens_per_op),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// Every sequence at 4095 tokens, filled by interleaved decode steps so each
// table is scattered over the pool; the timed step fills the last 256 cells.
void BM_DecodeStepFullPool(benchmark::State& state) {
  auto cache = make_pool();
  std::vector<SeqId> ids(kSeqs);
  std::vector<std::int32_t> positions(kSeqs);
  for (SeqId s = 0; s < kSeqs; ++s) {
    ids[static_cast<std::size_t>(s)] = *cache->seq_new();
  }
  for (std::int32_t p = 0; p < kSeqLen - 1; ++p) {
    std::fill(positions.begin(), positions.end(), p);
    CELLM_CHECK(cache->place_step(ids, positions).ok());
  }
  std::fill(positions.begin(), positions.end(), kSeqLen - 1);
  for (auto _ : state) {
    auto placed = cache->place_step(ids, positions);
    benchmark::DoNotOptimize(placed);
    state.PauseTiming();
    CELLM_CHECK(placed.ok() && cache->metrics().cells_free == 0);
    for (SeqId s : ids) cache->rewind(s, kSeqLen - 1);
    state.ResumeTiming();
  }
  set_per_token(state, kSeqs);
}
BENCHMARK(BM_DecodeStepFullPool);

// The same step and its undo (256 one-token rewinds), with no pause in the
// loop: an upper bound free of the timer's pause overhead.
void BM_DecodeStepAndRewind(benchmark::State& state) {
  auto cache = make_pool();
  std::vector<SeqId> ids(kSeqs);
  std::vector<std::int32_t> positions(kSeqs);
  for (SeqId s = 0; s < kSeqs; ++s) ids[static_cast<std::size_t>(s)] = *cache->seq_new();
  for (std::int32_t p = 0; p < kSeqLen - 1; ++p) {
    std::fill(positions.begin(), positions.end(), p);
    CELLM_CHECK(cache->place_step(ids, positions).ok());
  }
  std::fill(positions.begin(), positions.end(), kSeqLen - 1);
  for (auto _ : state) {
    auto placed = cache->place_step(ids, positions);
    benchmark::DoNotOptimize(placed);
    for (SeqId s : ids) cache->rewind(s, kSeqLen - 1);
  }
  set_per_token(state, kSeqs);
}
BENCHMARK(BM_DecodeStepAndRewind);

// 255 full sequences; one 4096-token prefill takes the remaining cells.
void BM_PrefillPlacement(benchmark::State& state) {
  auto cache = make_pool();
  std::vector<SeqId> ids(kSeqLen);
  std::vector<std::int32_t> positions(kSeqLen);
  for (std::int32_t p = 0; p < kSeqLen; ++p) positions[static_cast<std::size_t>(p)] = p;
  for (SeqId s = 0; s < kSeqs; ++s) {
    const SeqId seq = *cache->seq_new();
    std::fill(ids.begin(), ids.end(), seq);
    if (s + 1 < kSeqs) CELLM_CHECK(cache->place_step(ids, positions).ok());
  }
  for (auto _ : state) {
    auto placed = cache->place_step(ids, positions);
    benchmark::DoNotOptimize(placed);
    state.PauseTiming();
    CELLM_CHECK(placed.ok());
    cache->rewind(ids[0], 0);
    state.ResumeTiming();
  }
  set_per_token(state, kSeqLen);
}
BENCHMARK(BM_PrefillPlacement);

// Forking a full 4096-token sequence and dropping the fork, with 255 live
// sequences holding the whole pool.
void BM_CloneAndRemove(benchmark::State& state) {
  auto cache = make_pool();
  std::vector<SeqId> ids(kSeqLen);
  std::vector<std::int32_t> positions(kSeqLen);
  for (std::int32_t p = 0; p < kSeqLen; ++p) positions[static_cast<std::size_t>(p)] = p;
  for (SeqId s = 0; s + 1 < kSeqs; ++s) {
    std::fill(ids.begin(), ids.end(), *cache->seq_new());
    CELLM_CHECK(cache->place_step(ids, positions).ok());
  }
  const SeqId src = 0;
  for (auto _ : state) {
    const auto fork = cache->seq_clone(src, kSeqLen);
    benchmark::DoNotOptimize(fork);
    cache->seq_rm(*fork);
  }
  set_per_token(state, kSeqLen);
}
BENCHMARK(BM_CloneAndRemove);

// The admission check alone for a 256-token decode step.
void BM_CheckDecodeStep(benchmark::State& state) {
  auto cache = make_pool();
  std::vector<SeqId> ids(kSeqs);
  std::vector<std::int32_t> positions(kSeqs, 0);
  for (SeqId s = 0; s < kSeqs; ++s) ids[static_cast<std::size_t>(s)] = *cache->seq_new();
  for (auto _ : state) {
    Status status = cache->check_step(ids, positions);
    benchmark::DoNotOptimize(status);
  }
  set_per_token(state, kSeqs);
}
BENCHMARK(BM_CheckDecodeStep);

}  // namespace
}  // namespace cellm::cache
