#include <string>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/embedding.cuh"
#include "backend/cuda/kernels/kernel_trace.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

constexpr int kThreads = 128;

// The step's first kernel: its gap in the timeline is the host's share of a
// step. The same kernel gathers the selected rows before the lm_head.
CELLM_TRACE_TABLE(embedding_trace);

__global__ void embedding_kernel(const __grid_constant__ EmbeddingParams p) {
  const trace::BlockScope traced(embedding_trace, trace::slot_of(p));
  // The next kernel may launch at once (its blocks request their weights
  // while this one waits): it waits for this one's rows itself.
  griddep_launch_dependents();
  griddep_wait();
  trace::mark(embedding_trace, trace::slot_of(p), trace::kWaitMark);
  const int t = blockIdx.x;
  // Both reads at once: a fed-back row needs the second, and waiting for the
  // first to ask for it is another round trip at the head of the step.
  std::int32_t token = p.tokens[t];
  const std::int32_t fed = p.feedback != nullptr ? p.feedback[t] : 0;
  if (token < 0 && p.feedback != nullptr) {
    const std::int32_t at = -1 - token;
    if (threadIdx.x == 0 && p.record != nullptr && at < p.record_size) p.record[at] = fed;
    token = fed;
  }
  const bool valid = token >= 0 && token < p.vocab;
  const bf16* src = p.table + static_cast<std::int64_t>(valid ? token : 0) * p.dim;
  bf16* dst = p.out + static_cast<std::int64_t>(t) * p.dim;
  for (int c = threadIdx.x * 8; c < p.dim; c += kThreads * 8) {
    float v[8];
    load8(src + c, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = valid ? v[i] * p.scale : 0.0f;
    store8(dst + c, v);
  }
}

}  // namespace

void launch_embedding(const EmbeddingParams& requested, cudaStream_t stream) {
  EmbeddingParams params = requested;
  trace::assign_slot(params, embedding_trace, [&] {
#if CELLM_KERNEL_TRACE
    const std::string name = params.trace_name;
#else
    const std::string name = "embedding";
#endif
    return name + " rows=" + std::to_string(params.num_tokens);
  });
  launch(embedding_kernel,
         LaunchConfig{dim3(params.num_tokens), dim3(kThreads), 0, stream, params.pdl}, params);
}

}  // namespace cellm::cuda
