#include "executor/forward_pass.h"

#include <algorithm>

#include "core/check.h"
#include "executor/method_checks.h"

namespace cellm::executor {

std::vector<std::int64_t> pad_selector(std::vector<std::int64_t> selector, std::int64_t rows) {
  CELLM_CHECK(!selector.empty(), "padding an empty selector");
  while (static_cast<std::int64_t>(selector.size()) < rows) selector.push_back(selector.back());
  return selector;
}

Result<ForwardOutputs> run_forward(program::Program& program, cache::CellCache& cache,
                                   const ForwardInputs& in, std::int64_t vocab,
                                   ForwardScratch* scratch) {
  const auto real = static_cast<std::int64_t>(in.tokens.size());
  CELLM_CHECK(real > 0 && real <= in.width && in.positions.size() == in.tokens.size() &&
                  in.seq_ids.size() == in.tokens.size(),
              "forward {} of {} real tokens at width {}", in.method, real, in.width);
  ForwardScratch local;
  ForwardScratch& s = scratch != nullptr ? *scratch : local;
  s.positions32.assign(in.positions.begin(), in.positions.end());
  auto placed = cache.place_step(in.seq_ids, s.positions32);
  if (!placed.ok()) return placed.status().with_context(fmt::format("method {}", in.method));

  // Padding rows carry token 0 at position 0.
  const auto width = static_cast<std::size_t>(in.width);
  s.tokens.assign(width, 0);
  s.positions.assign(width, 0);
  std::copy(in.tokens.begin(), in.tokens.end(), s.tokens.begin());
  std::copy(in.positions.begin(), in.positions.end(), s.positions.begin());
  s.inputs.clear();
  s.inputs.push_back(Tensor::view(s.tokens.data(), DType::kI64, {1, in.width}));
  s.inputs.push_back(Tensor::view(s.positions.data(), DType::kI64, {in.width}));
  std::int64_t rows = in.width;
  if (in.selects_rows) {
    rows = static_cast<std::int64_t>(in.selector.size());
    s.selector.assign(in.selector.begin(), in.selector.end());
    s.inputs.push_back(Tensor::view(s.selector.data(), DType::kI64, {rows}));
  }

  auto outputs = program.execute(in.method, s.inputs);
  if (!outputs.ok()) return outputs.status().with_context(fmt::format("method {}", in.method));
  if (outputs->empty()) {
    return internal_error("method {} returned no outputs; output 0 must be the logits", in.method);
  }
  const Tensor& logits = (*outputs)[0];
  if (logits.rank() < 2 || !float_like(logits.dtype()) || logits.dim(logits.rank() - 1) != vocab ||
      logits.numel() != rows * vocab || !(logits.numel() == 0 || logits.data() != nullptr)) {
    return internal_error("method {} returned logits {}; expected {} rows of vocab {}", in.method,
                          logits.describe(), rows, vocab);
  }
  ForwardOutputs out;
  out.logits = logits.reshape({rows, vocab});
  if (outputs->size() > 1) out.taps = (*outputs)[1];
  return out;
}

}  // namespace cellm::executor
