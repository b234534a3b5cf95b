// FastForward: the fast CPU program's forward pass. The same arithmetic as
// the float32 reference (CpuForward) except for the matrix products: a
// weight kept in its GGUF blocks (Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K)
// multiplies activations quantized per block to int8 through the SIMD
// kernels of quant_dot.h, rows split over `threads`; any other weight (f32,
// f16, bf16, or a type without a kernel) goes through BLAS on its float32
// copy, as in the reference. Norms, RoPE, activations and attention over the
// cell cache are the reference's ops (ops.h) on the reference's KvStore, except
// attention, which runs in float32 vectors (fast_attention.h). The steps
// around the products and attention (embedding, norms, RoPE, K/V placement,
// residual adds, final norm) are the reference's own code, shared through
// forward_common.h.
//
// Thread-safety: not thread-safe (scratch buffers); one caller at a time.
// run() spreads its work over the forward's own ThreadPool of `threads`.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/cpu_forward.h"
#include "backend/cpu/forward_common.h"
#include "backend/cpu/qmatrix.h"
#include "backend/cpu/thread_pool.h"
#include "cellm/status.h"
#include "format/gguf.h"
#include "model/model_spec.h"
#include "model/weights.h"

namespace cellm::cpu {

struct FastOptions {
  int threads = 0;        // 0: the cores this process may run on
  Isa isa = Isa::kScalar;  // set by create from active_isa() unless forced
  bool force_isa = false;
};

// The cores this process may run on (sched affinity), at least 1.
int available_cores();

// One projection: in its blocks (q.defined()) or as float32 (f32).
struct FastLinear {
  QMatrix q;
  DotFn dot = nullptr;
  TileKernel tile;
  Tensor f32;
};

class FastForward final : public ForwardPass {
 public:
  // `weights` are the loader's canonical weights (float copies of every
  // tensor); `gguf`, when non-null, is the file they came from, whose
  // quantized matrices are used in their blocks. Checks shapes as the
  // reference does.
  static Result<std::unique_ptr<FastForward>> create(const model::ModelSpec& spec,
                                                     const model::Weights& weights,
                                                     const format::GgufFile* gguf,
                                                     DType rope_table_dtype, FastOptions options);

  const model::ModelSpec& spec() const override { return spec_; }
  void run(const StepRows& rows, std::span<const std::int64_t> selector, KvStore& kv, float* logits,
           float* taps) override;

  int threads() const { return options_.threads; }
  Isa isa() const { return options_.isa; }
  // "Q4_1 x210, Q8_0 x1, f32 x0": how many projections run in each form.
  std::string describe() const;

 private:
  struct LayerLinears {
    FastLinear q, k, v, o, gate, up, down;
  };
  FastForward(model::ModelSpec spec, model::Weights weights, DType rope_table_dtype,
              FastOptions options);
  Status attach_gguf(const format::GgufFile& gguf);

  // Quantized inputs of one float buffer, per activation kind, made on
  // first use within a step.
  struct Input {
    const float* x = nullptr;
    std::int64_t t = 0, cols = 0;
    bool ready[2] = {false, false};
  };
  void begin_input(const float* x, std::int64_t t, std::int64_t cols);
  void linear(const FastLinear& w, const Tensor& bias, float* y);
  // Several projections of the current input (q/k/v, gate/up): one pool run
  // (one barrier) when all are in blocks of one activation kind, else one
  // linear() each.
  void linear_group(std::initializer_list<std::pair<const FastLinear*, float*>> group,
                    std::initializer_list<const Tensor*> biases);

  void run_layers(const StepRows& rows, std::span<const std::int64_t> selector, KvStore& kv,
                  float* logits, float* taps);
  void attention_block(std::int32_t layer, const StepRows& rows, KvStore& kv);
  void mlp_block(std::int32_t layer, std::int64_t t);

  model::ModelSpec spec_;
  model::Weights weights_;
  FastOptions options_;
  std::vector<LayerLinears> layers_;
  FastLinear lm_head_;
  std::vector<std::vector<float>> inv_freq_;
  float attention_scale_;

  std::unique_ptr<ThreadPool> pool_;
  Input input_;
  std::array<QuantActs, 2> acts_;
  // Scratch, grown on demand.
  StepBuffers b_;
  std::vector<std::vector<float>> attn_scratch_;  // one per pool thread
};

}  // namespace cellm::cpu
