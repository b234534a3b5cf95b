// The int8 quantized GEMV (kernels/qgemv_dp4a.cuh: the activation
// quantization and the GEMV, timed together) against launch_qgemv
// (BM_QGemvDp4aBase, the same shapes and bytes) in Llama-3.1-8B's
// projection shapes (o/q, gate or up, down, lm_head), for the types of
// Q4_K_M and Q8_0 files (Q6_K as the file has it, and repacked as the
// upload keeps it: 1014), at 1, 2, 4 and 8 rows. `bytes` is the quantized
// weights a launch reads: `bytes_per_second` against the copy roofline.
// Run: backend_cuda_bench --benchmark_filter=QGemvDp4a --benchmark_counters_tabular=true
#include <cstdint>
#include <vector>

#include <benchmark/benchmark.h>

#include "backend/cuda/kernels/qgemv_dp4a.cuh"
#include "backend_cuda_bench_qgemv.h"
#include "backend_cuda_bench_util.h"
#include "cellm/status.h"
#include "core/check.h"

namespace cellm::cuda::bench {
namespace {

// Runs `int8` (true: launch_qgemv_dp4a, false: launch_qgemv) over enough
// copies of the weights to keep a cycle out of L2.
void run_qgemv(benchmark::State& state, bool int8) {
  if (!have_gpu(state)) return;
  QGemvProblem q = qgemv_problem(state);
  QGemvParams& p = q.p;
  auto scratch = filled<std::uint8_t>(q8_rows_bytes(p.m, p.k), 0);
  const Q8Rows act = q8_rows_in(scratch.data(), p.m, p.k);
  const Status valid = int8 ? validate_qgemv_dp4a(p, act) : p.validate();
  if (!valid.is_ok()) {
    state.SkipWithError(valid.to_string().c_str());
    return;
  }
  time_launches(state, static_cast<double>(q.weight_bytes), [&](int i) {
    p.w = q.weights_at(i);
    if (int8) {
      launch_qgemv_dp4a(p, act, nullptr);
    } else {
      launch_qgemv(p, nullptr);
    }
  });
}

void BM_QGemvDp4a(benchmark::State& state) {
  run_qgemv(state, true);
}
void BM_QGemvDp4aBase(benchmark::State& state) {
  run_qgemv(state, false);
}

void dp4a_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"type", "m", "n", "k"});
  struct Shape {
    int n, k;
  };
  const Shape shapes[] = {{4096, 4096}, {14336, 4096}, {4096, 14336}, {128256, 4096}};
  for (const int type : {12, 14, 1014, 8}) {  // Q4_K, Q6_K, Q6_K_R8, Q8_0
    for (const Shape& s : shapes) {
      for (const int m : {1, 2, 4, 8}) b->Args({type, m, s.n, s.k});
    }
  }
}
BENCHMARK(BM_QGemvDp4a)->Apply(dp4a_args)->UseManualTime();
BENCHMARK(BM_QGemvDp4aBase)->Apply(dp4a_args)->UseManualTime();

}  // namespace
}  // namespace cellm::cuda::bench
