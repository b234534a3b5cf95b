// Helpers shared by backend_cuda_bench's files: device buffers filled with a
// finite bf16 pattern, how many copies of a buffer keep a cycle out of L2,
// and per-launch timing with CUDA events (manual time).
//
// Thread-safety: benchmarks run on one thread; the helpers touch only the
// current device and the default stream.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include <benchmark/benchmark.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/resources.h"
#include "core/check.h"

namespace cellm::cuda::bench {

inline constexpr std::size_t kColdBytes = std::size_t{256} << 20;  // ~5x the H200's L2
inline constexpr int kLaunchesPerIteration = 20;

inline bool have_gpu(benchmark::State& state) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    state.SkipWithError("no CUDA device");
    return false;
  }
  return true;
}

template <typename T>
DeviceBuffer<T> filled(std::size_t count, int byte) {
  auto buffer = DeviceBuffer<T>::allocate(std::max<std::size_t>(count, 1));
  CELLM_CHECK(buffer.ok(), "{}", buffer.status().to_string());
  // 0x3c3c as bf16 is ~0.0115: finite, so no kernel takes a NaN path.
  CELLM_CUDA_CHECK(cudaMemset(buffer->data(), byte, buffer->bytes()));
  return std::move(buffer).value();
}

// A device copy of `host`.
template <typename T>
DeviceBuffer<T> uploaded(const std::vector<T>& host) {
  auto buffer = filled<T>(host.size(), 0);
  CELLM_CUDA_CHECK(
      cudaMemcpy(buffer.data(), host.data(), host.size() * sizeof(T), cudaMemcpyDefault));
  return buffer;
}

// How many copies of `bytes` keep a cycle through them out of L2.
inline int copies_for(std::size_t bytes) {
  return static_cast<int>(
      std::clamp<std::size_t>(kColdBytes / std::max<std::size_t>(bytes, 1), 1, 32));
}

// Times `launch(i)` for i = 0, 1, ... with events; reports per-launch time.
template <typename Launch>
void time_launches(benchmark::State& state, double bytes_per_launch, Launch&& launch) {
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  CELLM_CUDA_CHECK(cudaEventCreate(&start));
  CELLM_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) launch(i);  // warm-up: plans, smem limits
  CELLM_CUDA_CHECK(cudaDeviceSynchronize());
  int next = 0;
  for (auto _ : state) {
    CELLM_CUDA_CHECK(cudaEventRecord(start, nullptr));
    for (int i = 0; i < kLaunchesPerIteration; ++i) launch(next++);
    CELLM_CUDA_CHECK(cudaEventRecord(stop, nullptr));
    CELLM_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CELLM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms / 1e3 / kLaunchesPerIteration);
  }
  state.counters["bytes"] = bytes_per_launch;
  state.counters["bytes_per_second"] =
      benchmark::Counter(bytes_per_launch, benchmark::Counter::kIsIterationInvariantRate);
  CELLM_CUDA_CHECK(cudaEventDestroy(start));
  CELLM_CUDA_CHECK(cudaEventDestroy(stop));
}

}  // namespace cellm::cuda::bench
