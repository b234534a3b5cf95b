#include "backend/cuda/kernel_trace.h"

#if CELLM_KERNEL_TRACE

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include <cuda_runtime.h>

namespace cellm::cuda::trace {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<const void*> tables;  // device symbols, in first-use order
  std::vector<int> slot_table;      // per slot: index into tables
  std::vector<std::string> labels;  // per slot
};

Registry& registry() {
  static Registry* r = new Registry;  // outlives every static destructor
  return *r;
}

void report() {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mu);
  if (cudaDeviceSynchronize() != cudaSuccess) return;
  std::vector<unsigned long long> marks(static_cast<std::size_t>(kTableEntries));
  for (std::size_t t = 0; t < r.tables.size(); ++t) {
    if (cudaMemcpyFromSymbol(marks.data(), r.tables[t], marks.size() * sizeof(marks[0])) !=
        cudaSuccess) {
      std::fprintf(stderr, "ktrace: could not read table %zu\n", t);
      continue;
    }
    for (std::size_t slot = 0; slot < r.labels.size(); ++slot) {
      if (r.slot_table[slot] != static_cast<int>(t)) continue;
      std::fprintf(stderr, "ktrace\t%zu\t%s", slot, r.labels[slot].c_str());
      for (int m = 0; m < kMarks; ++m) {
        int blocks = 0;
        unsigned long long lo = ~0ull;
        unsigned long long hi = 0;
        for (int b = 0; b < kBlocks; ++b) {
          const unsigned long long v = marks[(slot * kBlocks + b) * kMarks + m];
          if (v == 0) continue;
          ++blocks;
          lo = std::min(lo, v);
          hi = std::max(hi, v);
        }
        std::fprintf(stderr, "\t%d %llu %llu", blocks, blocks > 0 ? lo : 0ull, hi);
      }
      std::fprintf(stderr, "\n");
    }
  }
}

}  // namespace

int take_slot(const void* table, std::string label) {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mu);
  if (static_cast<int>(r.labels.size()) >= kSlots) return -1;
  auto it = std::find(r.tables.begin(), r.tables.end(), table);
  if (it == r.tables.end()) {
    // atexit handlers run in reverse order: registered after the CUDA
    // runtime's own, the report runs while the context is still alive.
    if (r.tables.empty()) std::atexit(report);
    r.tables.push_back(table);
    it = r.tables.end() - 1;
  }
  r.slot_table.push_back(static_cast<int>(it - r.tables.begin()));
  r.labels.push_back(std::move(label));
  return static_cast<int>(r.labels.size()) - 1;
}

}  // namespace cellm::cuda::trace

#endif  // CELLM_KERNEL_TRACE
