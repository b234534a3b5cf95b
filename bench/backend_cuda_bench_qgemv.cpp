// The quantized decode GEMV (kernels/qgemv.cuh) in the projection shapes of
// Llama-3.2-1B and Llama-3.1-8B, for each block type a Q4_K_M or Q8_0 file
// holds (and Q6_K as the upload repacks it, Q6_K_R8), at 1, 2, 4 and 8
// rows. `bytes` is the quantized weights a launch
// reads, so `bytes_per_second` sets it against the copy roofline; the bf16
// GEMV of the same shape (BM_DecodeGemm, gemv:2) is the time to beat.
// Run: backend_cuda_bench --benchmark_filter='BM_QGemv/' --benchmark_counters_tabular=true
#include <cstdint>
#include <vector>

#include <benchmark/benchmark.h>

#include "backend/cuda/kernels/qgemv.cuh"
#include "backend/cuda/kernels/qgemv_mma.cuh"
#include "backend_cuda_bench_qgemv.h"
#include "backend_cuda_bench_util.h"
#include "cellm/status.h"
#include "core/check.h"

namespace cellm::cuda::bench {
namespace {

// One launch shape (state.range(0..3): type, m, n, k) on CUDA cores
// (launch_qgemv) or tensor cores (launch_qgemv_mma), timed over copies of
// the weights too large for L2.
void time_qgemv(benchmark::State& state, bool mma) {
  QGemvProblem q = qgemv_problem(state);
  QGemvParams& p = q.p;
  // FP8 rows: one scale a row (per-channel checkpoints, `--quantize fp8`).
  auto scales = filled<float>(static_cast<std::size_t>(p.n), 0x3c);
  if (p.type == QuantType::kF8_E4M3) p.scales = {scales.data(), p.k, 1};
  const Status valid = mma ? validate_qgemv_mma(p) : p.validate();
  if (!valid.is_ok()) {
    state.SkipWithError(valid.to_string().c_str());
    return;
  }
  time_launches(state, static_cast<double>(q.weight_bytes), [&](int i) {
    p.w = q.weights_at(i);
    if (mma) {
      launch_qgemv_mma(p, nullptr);
    } else {
      launch_qgemv(p, nullptr);
    }
  });
}

void BM_QGemv(benchmark::State& state) {
  if (!have_gpu(state)) return;
  time_qgemv(state, false);
}

void qgemv_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"type", "m", "n", "k"});
  struct Shape {
    int n, k;
  };
  // Llama-3.2-1B then Llama-3.1-8B: qkv, o, gate_up, down, lm_head.
  const Shape shapes[] = {{3072, 2048}, {2048, 2048}, {16384, 2048}, {2048, 8192},  {128256, 2048},
                          {6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}, {128256, 4096}};
  // 1000: FP8 E4M3; 1014: Q6_K repacked (Q6_K_R8: the wide-load kernel at
  // one row, against 14's generic decoder on the same shapes).
  for (const int type : {2, 8, 12, 14, 1014, 1000}) {
    for (const Shape& s : shapes) {
      for (const int m : {1, 2, 4, 8}) b->Args({type, m, s.n, s.k});
    }
  }
}
BENCHMARK(BM_QGemv)->Apply(qgemv_args)->UseManualTime();

// The tensor-core kernel (mma:1) against the CUDA-core kernels (mma:0) in
// Llama-3.1-8B's o/q, gate (or up), down and lm_head shapes, for the types
// of a Q4_K_M file (Q4_K, Q6_K as the upload repacks it) and FP8, at 1, 2,
// 4 and 8 rows: the rows the mma kernel takes for the price of one.
// Run: backend_cuda_bench --benchmark_filter=BM_QGemvMma --benchmark_counters_tabular=true
void BM_QGemvMma(benchmark::State& state) {
  if (!have_gpu(state)) return;
  time_qgemv(state, state.range(4) != 0);
}

void qgemv_mma_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"type", "m", "n", "k", "mma"});
  const int shapes[][2] = {{4096, 4096}, {14336, 4096}, {4096, 14336}, {128256, 4096}};
  for (const int type : {12, 1014, 1000}) {
    for (const auto& s : shapes) {
      for (const int m : {1, 2, 4, 8}) {
        for (const int mma : {0, 1}) b->Args({type, m, s[0], s[1], mma});
      }
    }
  }
}
BENCHMARK(BM_QGemvMma)->Apply(qgemv_mma_args)->UseManualTime();

}  // namespace
}  // namespace cellm::cuda::bench
