#include "step_driver.h"

#include <algorithm>
#include <map>

namespace cellm::cpu::testing {

Result<std::unique_ptr<StepDriver>> StepDriver::create(std::unique_ptr<CpuProgram> program,
                                                       const cache::CellCacheConfig& config) {
  CELLM_ASSIGN_OR_RETURN(std::unique_ptr<cache::CellCache> made, cache::CellCache::create(config));
  std::shared_ptr<cache::CellCache> shared = std::move(made);
  CELLM_RETURN_IF_ERROR(program->bind_cache(shared));
  for (const std::string& name : program->method_names()) {
    CELLM_RETURN_IF_ERROR(program->load_method(name));
  }
  return std::unique_ptr<StepDriver>(new StepDriver(std::move(program), std::move(shared)));
}

std::string StepDriver::narrowest_method(std::size_t n) const {
  std::int64_t best = -1;
  for (const std::string& name : program_->method_names()) {
    if (name.rfind("forward_", 0) != 0 || name == "forward_others") continue;
    const std::int64_t w = std::stoll(name.substr(8));
    if (w >= static_cast<std::int64_t>(n) && (best < 0 || w < best)) best = w;
  }
  return best < 0 ? std::string("forward_others") : "forward_" + std::to_string(best);
}

Result<std::vector<std::vector<float>>> StepDriver::step(std::span<const DriverToken> tokens,
                                                         const std::string& method_in) {
  const std::string method = method_in.empty() ? narrowest_method(tokens.size()) : method_in;
  CELLM_ASSIGN_OR_RETURN(program::MethodMeta meta, program_->method_meta(method));
  const std::int64_t n = static_cast<std::int64_t>(tokens.size());
  const std::int64_t width = meta.dynamic ? n : meta.inputs[0].shape[1];

  std::vector<cache::SeqId> seqs;
  std::vector<std::int32_t> positions;
  std::map<cache::SeqId, std::int32_t> next;
  std::vector<std::int64_t> selector;
  for (std::int64_t i = 0; i < n; ++i) {
    const DriverToken& tok = tokens[static_cast<std::size_t>(i)];
    auto [it, fresh] = next.try_emplace(tok.seq, cache_->pos(tok.seq));
    seqs.push_back(tok.seq);
    positions.push_back(it->second++);
    if (tok.want_logits) selector.push_back(i);
  }
  CELLM_ASSIGN_OR_RETURN(cache::StepPlacement placed, cache_->place_step(seqs, positions));
  (void)placed;
  const std::size_t wanted = selector.size();
  if (selector.empty()) selector.push_back(n - 1);
  const std::int64_t rows = meta.dynamic ? static_cast<std::int64_t>(selector.size()) : width;
  while (static_cast<std::int64_t>(selector.size()) < rows) selector.push_back(selector.back());

  Tensor tok_t = Tensor::empty(DType::kI64, {1, width});
  Tensor pos_t = Tensor::empty(DType::kI64, {width});
  for (std::int64_t i = 0; i < n; ++i) {
    tok_t.data_as<std::int64_t>()[i] = tokens[static_cast<std::size_t>(i)].token;
    pos_t.data_as<std::int64_t>()[i] = positions[static_cast<std::size_t>(i)];
  }
  Tensor sel_t = Tensor::empty(DType::kI64, {static_cast<std::int64_t>(selector.size())});
  std::copy(selector.begin(), selector.end(), sel_t.data_as<std::int64_t>());
  std::vector<Tensor> inputs = {tok_t, pos_t, sel_t};
  CELLM_ASSIGN_OR_RETURN(std::vector<Tensor> out, program_->execute(method, inputs));
  const std::int64_t vocab = out[0].dim(1);
  std::vector<std::vector<float>> logits;
  for (std::size_t r = 0; r < wanted; ++r) {
    const float* row = out[0].data_as<float>() + static_cast<std::int64_t>(r) * vocab;
    logits.emplace_back(row, row + vocab);
  }
  last_taps_.clear();
  if (out.size() > 1) {
    last_taps_.assign(out[1].data_as<float>(), out[1].data_as<float>() + out[1].numel());
  }
  return logits;
}

Result<std::vector<std::vector<float>>> StepDriver::feed(cache::SeqId seq,
                                                         std::span<const std::int64_t> tokens,
                                                         std::size_t chunk,
                                                         const std::string& method) {
  std::vector<std::vector<float>> all;
  for (std::size_t begin = 0; begin < tokens.size(); begin += chunk) {
    const std::size_t end = std::min(tokens.size(), begin + chunk);
    std::vector<DriverToken> step_tokens;
    for (std::size_t i = begin; i < end; ++i) step_tokens.push_back({seq, tokens[i], true});
    CELLM_ASSIGN_OR_RETURN(auto logits, step(step_tokens, method));
    for (auto& row : logits) all.push_back(std::move(row));
  }
  return all;
}

}  // namespace cellm::cpu::testing
