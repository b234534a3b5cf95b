// Embedding gather: out[t] = table[tokens[t]] * scale, bf16 rows. A token id
// outside [0, vocab) yields a zero row (ids are validated on the host; the
// device only guarantees defined, in-bounds behaviour).
//
// Fed-back tokens (a decode_greedy chain, program.h): with `feedback` set, a
// negative id -1 - h at row t stands for feedback[t], the id the previous
// step's argmax drew for row t, which the kernel also records at record[h]
// (h < record_size), so the chain's host reads every step's ids at its end.
//
// Thread-safety: launch_* are reentrant; params are plain values.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_types.h"
// Status is only declared here: .cu files must not pull fmt through nvcc
// (validate() is defined in the family's .cpp).
namespace cellm {
class Status;
}  // namespace cellm

namespace cellm::cuda {

struct EmbeddingParams {
  const std::int32_t* tokens = nullptr;  // [num_tokens]
  const bf16* table = nullptr;           // [vocab, dim]
  bf16* out = nullptr;                   // [num_tokens, dim]
  std::int32_t num_tokens = 0;
  std::int32_t vocab = 0;
  std::int32_t dim = 0;  // multiple of 8 (16-byte rows)
  // Gemma multiplies by sqrt(hidden) rounded to bf16; the caller rounds.
  float scale = 1.0f;
  const std::int32_t* feedback = nullptr;  // [num_tokens] or null: no fed-back ids
  std::int32_t* record = nullptr;          // [record_size] or null
  std::int32_t record_size = 0;

  // Programmatic dependent launch (launch.h): the kernel waits on the previous one itself.
  bool pdl = false;
#if CELLM_KERNEL_TRACE
  std::int32_t trace_slot = -1;  // kernel_trace.cuh
  // The timeline's name: the forward also gathers the selected rows of the
  // final hidden state with this kernel ("gather").
  const char* trace_name = "embedding";
#endif

  Status validate() const;
};

void launch_embedding(const EmbeddingParams& params, cudaStream_t stream);

}  // namespace cellm::cuda
