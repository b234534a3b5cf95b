// Test driver for GPU suites: teacher-forced steps through
// CudaExecutor::execute_raw over caller-owned cache sequences, collecting the
// logits of every position (copied to the host), so whole, chunked, batched
// and cloned feeding can be compared with reference logits.
//
// Thread-safety: single-threaded test code.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_program.h"
#include "executor/cuda_executor.h"

namespace cellm::gpu_testing {

// One sequence being fed a fixed token list (prompt + forced continuation).
struct FedSeq {
  cache::SeqId seq = -1;
  const std::vector<std::int64_t>* inputs = nullptr;
  std::size_t fed = 0;
  std::map<std::size_t, std::vector<float>> logits;  // by position
};

// Feeds `count` next tokens of each listed sequence in one raw step and
// records the logits of every fed row.
inline bool feed(executor::CudaExecutor& ex, std::vector<std::pair<FedSeq*, std::size_t>> parts) {
  executor::RawTargetStep step;
  std::vector<std::pair<FedSeq*, std::size_t>> row_owner;
  for (auto& [s, count] : parts) {
    for (std::size_t k = 0; k < count; ++k) {
      const std::size_t pos = s->fed + k;
      step.tokens.push_back((*s->inputs)[pos]);
      step.positions.push_back(static_cast<std::int64_t>(pos));
      step.seq_ids.push_back(s->seq);
      step.logit_indices.push_back(static_cast<std::int64_t>(row_owner.size()));
      row_owner.emplace_back(s, pos);
    }
  }
  bool copied = true;
  const bool ok = ex.execute_raw(step, [&](const executor::RawTargetOutput& out) {
    auto host = cuda::copy_to_host(out.logits);
    if (!host.ok()) {
      copied = false;
      return false;
    }
    const std::int64_t v = host->dim(1);
    for (std::size_t i = 0; i < out.selected_indices.size(); ++i) {
      const auto& [s, pos] = row_owner[out.selected_indices[i]];
      const float* row = host->data_as<float>() + static_cast<std::int64_t>(i) * v;
      s->logits[pos] = std::vector<float>(row, row + v);
    }
    return true;
  });
  if (!ok || !copied) return false;
  for (auto& [s, count] : parts) s->fed += count;
  return true;
}

// An initialised executor over `program` for `sessions` sessions (null, with
// a test failure, when either step fails).
inline std::unique_ptr<executor::CudaExecutor> make_test_executor(
    std::shared_ptr<program::Program> program, int sessions) {
  auto ex = executor::CudaExecutor::create(std::move(program), sessions, 0);
  EXPECT_TRUE(ex.ok()) << ex.status().to_string();
  if (!ex.ok()) return nullptr;
  EXPECT_TRUE((*ex)->initialize());
  return std::move(ex).value();
}

// ||got - ref|| / ||ref|| over one logits row.
inline double relative_error(const std::vector<float>& got, const std::vector<float>& ref) {
  double d = 0, n = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    d += (static_cast<double>(got[i]) - ref[i]) * (static_cast<double>(got[i]) - ref[i]);
    n += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(d / std::max(n, 1e-30));
}

// Where the reference's top-two margin exceeds `margin`, expects `got` to
// have the same argmax and returns true (the position counted as checked).
inline bool expect_argmax_where_clear(const std::vector<float>& got,
                                      const std::vector<float>& ref, float margin,
                                      const std::string& where) {
  std::vector<float> sorted = ref;
  std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
  if (!(sorted[0] - sorted[1] > margin)) return false;
  EXPECT_EQ(std::max_element(got.begin(), got.end()) - got.begin(),
            std::max_element(ref.begin(), ref.end()) - ref.begin())
      << where;
  return true;
}

}  // namespace cellm::gpu_testing
