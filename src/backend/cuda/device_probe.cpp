#include "backend/cuda/device_probe.h"

#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_weights_fill.cuh"
#include "backend/cuda/gemm.h"
#include "backend/cuda/resources.h"

namespace cellm::cuda {
namespace {

template <typename Fn>
Result<float> median_ms(const Stream& stream, int warmup, int reps, Fn&& fn) {
  CELLM_ASSIGN_OR_RETURN(Event start, Event::create(true));
  CELLM_ASSIGN_OR_RETURN(Event stop, Event::create(true));
  for (int i = 0; i < warmup; ++i) CELLM_RETURN_IF_ERROR(fn());
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    start.record(stream.get());
    CELLM_RETURN_IF_ERROR(fn());
    stop.record(stream.get());
    stop.synchronize();
    ms.push_back(Event::elapsed_ms(start, stop));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

Result<DeviceCeilings> measure_device_ceilings() {
  DeviceCeilings c;
  cudaDeviceProp prop{};
  CELLM_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  c.name = prop.name;
  c.memory_bytes = static_cast<double>(prop.totalGlobalMem);
  CELLM_ASSIGN_OR_RETURN(Stream stream, Stream::create());

  {  // Copy: 2 GiB each way, random data (zeros can run faster than real data).
    const std::size_t elems = std::size_t{1} << 30;
    CELLM_ASSIGN_OR_RETURN(auto src, DeviceBuffer<bf16>::allocate(elems));
    CELLM_ASSIGN_OR_RETURN(auto dst, DeviceBuffer<bf16>::allocate(elems));
    launch_fill_uniform(src.data(), elems, 1.0f, 1, stream.get());
    CELLM_ASSIGN_OR_RETURN(
        float ms, median_ms(stream, 3, 10, [&]() -> Status {
          CELLM_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.bytes(),
                                           cudaMemcpyDeviceToDevice, stream.get()));
          return Status::ok();
        }));
    c.copy_bytes_per_s = 2.0 * static_cast<double>(src.bytes()) / (ms * 1e-3);
  }
  {  // GEMM: 8192^3 bf16 on random operands.
    const std::int64_t n = 8192;
    const auto elems = static_cast<std::size_t>(n * n);
    CELLM_ASSIGN_OR_RETURN(auto a, DeviceBuffer<bf16>::allocate(elems));
    CELLM_ASSIGN_OR_RETURN(auto b, DeviceBuffer<bf16>::allocate(elems));
    CELLM_ASSIGN_OR_RETURN(auto out, DeviceBuffer<bf16>::allocate(elems));
    launch_fill_uniform(a.data(), elems, 1.0f, 2, stream.get());
    launch_fill_uniform(b.data(), elems, 1.0f, 3, stream.get());
    CELLM_ASSIGN_OR_RETURN(GemmRunner gemm, GemmRunner::create(GemmRunner::kDefaultWorkspaceBytes));
    CELLM_ASSIGN_OR_RETURN(auto ws, DeviceBuffer<std::byte>::allocate(gemm.workspace_bytes()));
    GemmArgs args;
    args.a = a.data();
    args.b = b.data();
    args.out = out.data();
    args.m = args.n = args.k = n;
    args.lda = args.ldb = args.ldc = n;
    CELLM_ASSIGN_OR_RETURN(float ms, median_ms(stream, 3, 10, [&]() -> Status {
                             return gemm.run(args, ws.data(), stream.get());
                           }));
    c.gemm_flops_per_s = 2.0 * static_cast<double>(n) * n * n / (ms * 1e-3);
  }
  return c;
}

Result<std::string> device_name() {
  int device = 0;
  CELLM_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  CELLM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return std::string(prop.name);
}

}  // namespace cellm::cuda
