// Embedding gather: out[t] = table[tokens[t]] * scale, bf16 rows. A token id
// outside [0, vocab) yields a zero row (ids are validated on the host; the
// device only guarantees defined, in-bounds behaviour).
//
// As a captured step's first kernel it also uploads the step: block t reads
// entry t of each step array (the tokens first) from page-locked host memory
// through the buffer's device mapping, stores it into the arrays' device
// copies, and gathers the row of the token it read. A copy-engine node in
// that place cost more than the kernel's one PCIe round trip, since the
// forward's first kernel had to wait for the hand-off between engines (H200,
// 1B batch 1, a separate upload kernel: 0.878-0.879 -> 0.869-0.870 ms/step;
// bench/results/README.md, session 17). Eager steps keep the copy engine,
// which moves a wide step's arrays faster than a kernel's reads.
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

// At most this many step arrays travel with the upload (a thread each).
inline constexpr std::int32_t kEmbeddingMaxUploadArrays = 32;

struct EmbeddingParams {
  const std::int32_t* tokens = nullptr;  // [num_tokens]
  const bf16* table = nullptr;           // [vocab, dim]
  bf16* out = nullptr;                   // [num_tokens, dim]
  std::int32_t num_tokens = 0;
  std::int32_t vocab = 0;
  std::int32_t dim = 0;  // multiple of 8 (16-byte rows)
  // Gemma multiplies by sqrt(hidden) rounded to bf16; the caller rounds.
  float scale = 1.0f;

  // The step's upload (see above): [upload_arrays, upload_pitch] each, the
  // tokens in row 0 (then `tokens` is where they go). Null: no upload.
  const std::int32_t* upload_src = nullptr;  // a page-locked buffer's device mapping
  std::int32_t* upload_dst = nullptr;
  std::int32_t upload_pitch = 0;   // >= num_tokens
  std::int32_t upload_arrays = 0;  // 1..kEmbeddingMaxUploadArrays

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
