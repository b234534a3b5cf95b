// RecordingProgram: a test decorator over any Program that forwards every
// call, copies each forward's selector and logits rows (so tests can read
// what execute() sampled from), records the sampler calls, and can hide
// methods to present a narrower program to an executor. With
// flag_device_logits it presents a host program's logits as device ones, so
// an executor takes its device-sampling path into the program's own samplers.
// Thread-safety: not thread-safe; the engine thread (the test) drives it.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "program/program.h"

namespace cellm::executor::testing {

class RecordingProgram final : public program::Program {
 public:
  struct Call {
    std::string method;
    std::int64_t width = 0;                  // token rows given
    std::vector<std::int64_t> selector;      // empty for a method without one
    std::vector<std::vector<float>> logits;  // every returned row, padding included
  };

  struct SamplerCall {
    std::string method;
    std::size_t inputs = 0;
    std::int64_t rows = 0;
    std::vector<std::int64_t> suppressed;  // sample's third input, row-major
  };

  RecordingProgram(std::shared_ptr<program::Program> inner, std::set<std::string> hidden = {})
      : inner_(std::move(inner)), hidden_(std::move(hidden)) {}

  // Forward logits come back flagged Device::kCuda (they stay host memory);
  // the samplers' logits input is flagged back before the inner program sees it.
  void flag_device_logits(bool on) { device_logits_ = on; }
  const std::vector<SamplerCall>& sampler_calls() const { return sampler_calls_; }

  // Forward calls since construction or the last take_calls().
  std::vector<Call> take_calls() { return std::exchange(calls_, {}); }
  const std::vector<Call>& calls() const { return calls_; }
  program::Program& inner() { return *inner_; }

  std::string backend_name() const override { return inner_->backend_name(); }
  std::vector<std::string> method_names() const override;
  Result<program::MethodMeta> method_meta(std::string_view method) const override;
  std::optional<std::int64_t> constant(std::string_view name) const override {
    return inner_->constant(name);
  }
  program::CacheLayout cache_layout() const override { return inner_->cache_layout(); }
  Status bind_cache(std::shared_ptr<cache::CellCache> cache) override {
    return inner_->bind_cache(std::move(cache));
  }
  Status load_method(std::string_view method) override;
  Result<std::vector<Tensor>> execute(std::string_view method,
                                      std::span<const Tensor> inputs) override;

 private:
  bool hidden(std::string_view method) const { return hidden_.count(std::string(method)) > 0; }

  std::shared_ptr<program::Program> inner_;
  std::set<std::string> hidden_;
  std::vector<Call> calls_;
  std::vector<SamplerCall> sampler_calls_;
  bool device_logits_ = false;
};

}  // namespace cellm::executor::testing
