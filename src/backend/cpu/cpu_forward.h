// CpuForward: the float32 transformer forward of every supported
// architecture (llama, qwen2, qwen3, mistral, gemma3_text, phi3) over a KV
// pool of cells. The caller resolves which cells each row writes and reads;
// this class only does arithmetic (BLAS for matrix products, OpenMP for
// attention). Scratch buffers are reused across calls.
//
// Thread-safety: not thread-safe (scratch buffers); one caller at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/cpu/forward_common.h"
#include "cellm/status.h"
#include "model/model_spec.h"
#include "model/weights.h"

namespace cellm::cpu {

// Checks what the forward relies on (positive sizes, heads divisible by KV
// heads, one layer spec per layer with a valid rotary dim and window).
Status check_spec(const model::ModelSpec& spec);

// K and V of every layer: [cells, kv_heads, head_dim] float32 each, zeroed.
// The storage comes from calloc, so pages the pool never reaches are never
// touched: a generous cell budget costs address space, not memory.
class KvStore {
 public:
  // OutOfResources when the allocation fails.
  static Result<std::unique_ptr<KvStore>> create(std::int32_t layers, std::int32_t cells,
                                                 std::int32_t kv_heads, std::int32_t head_dim);
  std::int32_t cells() const { return cells_; }
  std::int64_t cell_floats() const { return cell_floats_; }  // kv_heads * head_dim
  float* k(std::int32_t layer) { return k_[static_cast<std::size_t>(layer)].get(); }
  float* v(std::int32_t layer) { return v_[static_cast<std::size_t>(layer)].get(); }
  // Bytes reserved for K and V together.
  std::size_t bytes() const;

 private:
  struct FreeDeleter {
    void operator()(float* p) const;
  };
  using Buffer = std::unique_ptr<float[], FreeDeleter>;
  KvStore(std::int32_t cells, std::int64_t cell_floats)
      : cells_(cells), cell_floats_(cell_floats) {}

  std::int32_t cells_;
  std::int64_t cell_floats_;
  std::vector<Buffer> k_;
  std::vector<Buffer> v_;
};

// One step as the forward sees it. Row r writes its K/V into write_cells[r]
// and attends the suffix of history[r] that the layer's window allows;
// history[r] lists the cells of positions 0..positions[r] of the row's
// sequence (its own cell last). Padding rows carry {scratch cell} in both.
struct StepRows {
  std::span<const std::int64_t> tokens;
  std::span<const std::int64_t> positions;
  std::vector<std::int32_t> write_cells;
  std::vector<std::span<const std::int32_t>> history;
};

// What CpuProgram runs a step through: the float32 reference (CpuForward)
// or the fast program's forward (fast_forward.h). Same contract as
// CpuForward::run below.
class ForwardPass {
 public:
  virtual ~ForwardPass() = default;
  virtual const model::ModelSpec& spec() const = 0;
  virtual void run(const StepRows& rows, std::span<const std::int64_t> selector, KvStore& kv,
                   float* logits, float* taps) = 0;
};

class CpuForward final : public ForwardPass {
 public:
  // `weights` must come from to_f32_weights(spec, ...); `spec` must pass
  // check_spec. RoPE frequencies are rounded to `rope_table_dtype` (see
  // rope_inv_freq and ProgramOptions::rope_table_dtype).
  CpuForward(model::ModelSpec spec, model::Weights weights, DType rope_table_dtype = DType::kF32);

  const model::ModelSpec& spec() const override { return spec_; }

  // Runs every row through the model, writing K/V into `kv` first in each
  // layer, then logits [selector.size(), vocab] for the selected rows and, if
  // `taps` is non-null, taps [rows, hidden]: the final-norm output of every
  // row (the LM head's input). The caller validated tokens, cells and selector.
  void run(const StepRows& rows, std::span<const std::int64_t> selector, KvStore& kv, float* logits,
           float* taps) override;

 private:
  void attention_block(std::int32_t layer, const StepRows& rows, KvStore& kv);
  void mlp_block(std::int32_t layer, std::int64_t t);

  model::ModelSpec spec_;
  model::Weights weights_;
  std::vector<std::vector<float>> inv_freq_;  // per layer
  float attention_scale_;

  // Scratch, grown on demand.
  StepBuffers b_;
};

}  // namespace cellm::cpu
