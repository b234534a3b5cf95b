// The quantized GEMV benchmarks' problem (backend_cuda_bench_qgemv.cpp,
// backend_cuda_bench_qgemv_dp4a.cpp): the args (type, m, n, k), enough
// copies of the weights to keep a cycle out of L2, activations, output and
// launch_qgemv's params over them.
//
// Thread-safety: benchmarks run on one thread.
#pragma once

#include <cstdint>
#include <vector>

#include <benchmark/benchmark.h>

#include "backend/cuda/kernels/qgemv.cuh"
#include "backend_cuda_bench_util.h"

namespace cellm::cuda::bench {

struct QGemvProblem {
  std::size_t weight_bytes = 0;
  int copies = 0;
  std::vector<DeviceBuffer<std::uint8_t>> weights;
  DeviceBuffer<bf16> a, out;
  QGemvParams p;  // p.w the first copy; pdl on

  // Weights copy i % copies.
  const void* weights_at(int i) const {
    return weights[static_cast<std::size_t>(i % copies)].data();
  }
};

// state.range(0..3) = type, m, n, k. 0x3c bytes everywhere: every f16 scale
// is ~1.06, every quant a valid code, every bf16 ~0.0115.
inline QGemvProblem qgemv_problem(const benchmark::State& state) {
  QGemvProblem q;
  const auto type = static_cast<QuantType>(state.range(0));
  const auto m = static_cast<std::int32_t>(state.range(1));
  const auto n = static_cast<std::int32_t>(state.range(2));
  const auto k = static_cast<std::int32_t>(state.range(3));
  const std::int64_t row_bytes =
      static_cast<std::int64_t>(k / quant_block_elems(type)) * quant_block_bytes(type);
  q.weight_bytes = static_cast<std::size_t>(n) * row_bytes;
  q.copies = copies_for(q.weight_bytes);
  for (int i = 0; i < q.copies; ++i) {
    q.weights.push_back(filled<std::uint8_t>(q.weight_bytes, 0x3c));
  }
  q.a = filled<bf16>(static_cast<std::size_t>(m) * k, 0x3c);
  q.out = filled<bf16>(static_cast<std::size_t>(m) * n, 0);
  q.p.a = q.a.data();
  q.p.w = q.weights[0].data();
  q.p.type = type;
  q.p.out = q.out.data();
  q.p.m = m;
  q.p.n = n;
  q.p.k = k;
  q.p.lda = k;
  q.p.ldw_bytes = row_bytes;
  q.p.ldc = n;
  q.p.pdl = true;
  return q;
}

}  // namespace cellm::cuda::bench
