// The CUDA program's sample_logprobs method (program.h): the log
// probabilities of the step's drawn tokens from the logits the sampler read.
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_program_impl.h"
#include "backend/cuda/kernels/sample_logprobs.cuh"
#include "program/forward_methods.h"

namespace cellm::cuda::detail {

static_assert(kLogprobsTop == program::kLogprobsMaxTop);
static_assert(kLogprobsParamsPerRow == program::kLogprobsParams);

Status CudaProgram::allocate_logprobs(std::size_t steps) {
  constexpr auto kTop = static_cast<std::size_t>(kLogprobsTop);
  LogprobsBuffers& b = logprobs_;
  const std::size_t params = steps * kLogprobsParamsPerRow;
  const std::size_t suppressed = steps * kLogprobsMaxSuppressed;
  CELLM_ASSIGN_OR_RETURN(b.params_host, PinnedBuffer<float>::allocate(params));
  CELLM_ASSIGN_OR_RETURN(b.params_device, DeviceBuffer<float>::allocate(params));
  CELLM_ASSIGN_OR_RETURN(b.tokens_host, PinnedBuffer<std::int32_t>::allocate(steps));
  CELLM_ASSIGN_OR_RETURN(b.tokens_device, DeviceBuffer<std::int32_t>::allocate(steps));
  CELLM_ASSIGN_OR_RETURN(b.suppressed_host, PinnedBuffer<std::int32_t>::allocate(suppressed));
  CELLM_ASSIGN_OR_RETURN(b.suppressed_device, DeviceBuffer<std::int32_t>::allocate(suppressed));
  CELLM_ASSIGN_OR_RETURN(b.values_host, PinnedBuffer<float>::allocate(steps * (1 + kTop)));
  CELLM_ASSIGN_OR_RETURN(b.values_device, DeviceBuffer<float>::allocate(steps * (1 + kTop)));
  CELLM_ASSIGN_OR_RETURN(b.ids_host, PinnedBuffer<std::int32_t>::allocate(steps * kTop));
  CELLM_ASSIGN_OR_RETURN(b.ids_device, DeviceBuffer<std::int32_t>::allocate(steps * kTop));
  b.values.reserve(steps * (1 + kTop));
  b.ids.reserve(steps * kTop);
  return Status::ok();
}

Result<std::vector<Tensor>> CudaProgram::run_logprobs(std::span<const Tensor> inputs) {
  CELLM_ASSIGN_OR_RETURN(program::LogprobsCall call,
                         methods_.check_logprobs(inputs, spec().vocab_size, Device::kCuda));
  LogprobsBuffers& b = logprobs_;
  const auto rows = static_cast<std::size_t>(call.rows);
  constexpr auto kTop = static_cast<std::size_t>(kLogprobsTop);
  const std::int64_t vocab = spec().vocab_size;
  // The previous call's copies finished at its wait: the staging is free.
  std::memcpy(b.params_host.data(), call.params.data(), call.params.size() * sizeof(float));
  for (std::size_t r = 0; r < rows; ++r) {
    // check_logprobs vouched for the ids of rows that ask; others are unread.
    const std::int64_t id = call.tokens[r];
    b.tokens_host.data()[r] = id >= 0 && id < vocab ? static_cast<std::int32_t>(id) : 0;
  }
  const cudaStream_t stream = stream_.get();
  CELLM_CUDA_CHECK(cudaMemcpyAsync(b.params_device.data(), b.params_host.data(),
                                   call.params.size() * sizeof(float), cudaMemcpyHostToDevice,
                                   stream));
  CELLM_CUDA_CHECK(cudaMemcpyAsync(b.tokens_device.data(), b.tokens_host.data(),
                                   rows * sizeof(std::int32_t), cudaMemcpyHostToDevice, stream));
  LogprobsParams p;
  if (!call.suppressed.empty()) {
    for (std::size_t i = 0; i < call.suppressed.size(); ++i) {
      // Anything outside the vocabulary suppresses nothing.
      const std::int64_t id = call.suppressed[i];
      b.suppressed_host.data()[i] = id >= 0 && id < vocab ? static_cast<std::int32_t>(id) : -1;
    }
    CELLM_CUDA_CHECK(cudaMemcpyAsync(b.suppressed_device.data(), b.suppressed_host.data(),
                                     call.suppressed.size() * sizeof(std::int32_t),
                                     cudaMemcpyHostToDevice, stream));
    p.suppressed = b.suppressed_device.data();
  }
  p.logits = static_cast<const float*>(inputs[0].data());
  p.params = b.params_device.data();
  p.tokens = b.tokens_device.data();
  p.values = b.values_device.data();
  p.ids = b.ids_device.data();
  p.logits_stride = vocab;
  p.rows = call.rows;
  p.vocab = static_cast<std::int32_t>(vocab);
  CELLM_RETURN_IF_ERROR(p.validate());
  launch_sample_logprobs(p, stream);
  CELLM_CUDA_CHECK(cudaMemcpyAsync(b.values_host.data(), b.values_device.data(),
                                   rows * (1 + kTop) * sizeof(float), cudaMemcpyDeviceToHost,
                                   stream));
  CELLM_CUDA_CHECK(cudaMemcpyAsync(b.ids_host.data(), b.ids_device.data(),
                                   rows * kTop * sizeof(std::int32_t), cudaMemcpyDeviceToHost,
                                   stream));
  // A second wait in the step, paid only by steps where a session asked for
  // logprobs (the executor calls this method for no other).
  stream_.synchronize();
  b.values.assign(b.values_host.data(), b.values_host.data() + rows * (1 + kTop));
  b.ids.assign(b.ids_host.data(), b.ids_host.data() + rows * kTop);
  const auto r64 = static_cast<std::int64_t>(rows);
  std::vector<Tensor> out;
  out.push_back(
      Tensor::view(b.values.data(), DType::kF32, {r64, static_cast<std::int64_t>(1 + kTop)}));
  out.push_back(Tensor::view(b.ids.data(), DType::kI64, {r64, static_cast<std::int64_t>(kTop)}));
  return out;
}

}  // namespace cellm::cuda::detail
