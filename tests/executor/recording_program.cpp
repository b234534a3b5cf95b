#include "recording_program.h"

#include <algorithm>
#include <utility>

namespace cellm::executor::testing {

std::vector<std::string> RecordingProgram::method_names() const {
  std::vector<std::string> names = inner_->method_names();
  std::erase_if(names, [&](const std::string& n) { return hidden(n); });
  return names;
}

namespace {
bool is_sampler(std::string_view method) {
  return method == program::kSampleMethod || method == program::kArgmaxMethod;
}
}  // namespace

Result<program::MethodMeta> RecordingProgram::method_meta(std::string_view method) const {
  if (hidden(method)) return not_found("method {} is hidden by the test", method);
  CELLM_ASSIGN_OR_RETURN(program::MethodMeta meta, inner_->method_meta(method));
  if (device_logits_) {
    if (is_sampler(method) && !meta.inputs.empty()) meta.inputs[0].device = Device::kCuda;
    if (method.starts_with(program::kModuleMethod) && !meta.outputs.empty()) {
      meta.outputs[0].device = Device::kCuda;
    }
  }
  return meta;
}

Status RecordingProgram::load_method(std::string_view method) {
  if (hidden(method)) return not_found("method {} is hidden by the test", method);
  return inner_->load_method(method);
}

Result<std::vector<Tensor>> RecordingProgram::execute(std::string_view method,
                                                      std::span<const Tensor> inputs) {
  if (hidden(method)) return not_found("method {} is hidden by the test", method);
  if (is_sampler(method)) {
    SamplerCall call{std::string(method), inputs.size(), 0, {}};
    if (!inputs.empty()) call.rows = inputs[0].rank() == 2 ? inputs[0].dim(0) : 0;
    if (inputs.size() >= 3 && inputs[2].dtype() == DType::kI64) {
      auto ids = inputs[2].span<const std::int64_t>();
      call.suppressed.assign(ids.begin(), ids.end());
    }
    sampler_calls_.push_back(std::move(call));
    if (!device_logits_ || inputs.empty()) return inner_->execute(method, inputs);
    std::vector<Tensor> host(inputs.begin(), inputs.end());
    host[0] = Tensor::view(inputs[0].data(), inputs[0].dtype(), inputs[0].shape(), Device::kCpu);
    return inner_->execute(method, host);
  }
  CELLM_ASSIGN_OR_RETURN(std::vector<Tensor> outputs, inner_->execute(method, inputs));
  if (!method.starts_with(program::kModuleMethod) || outputs.empty()) return outputs;
  Call call;
  call.method = std::string(method);
  if (!inputs.empty() && inputs[0].rank() == 2) call.width = inputs[0].dim(1);
  if (inputs.size() >= 3) {
    auto s = inputs[2].span<std::int64_t>();
    call.selector.assign(s.begin(), s.end());
  }
  const Tensor& logits = outputs[0];
  if (logits.rank() == 2 && logits.dtype() == DType::kF32 && logits.device() == Device::kCpu) {
    const std::int64_t v = logits.dim(1);
    const float* data = logits.data_as<float>();
    for (std::int64_t r = 0; r < logits.dim(0); ++r) {
      call.logits.emplace_back(data + r * v, data + (r + 1) * v);
    }
  }
  calls_.push_back(std::move(call));
  if (device_logits_) {
    outputs[0] = Tensor::view(logits.data(), logits.dtype(), logits.shape(), Device::kCuda);
  }
  return outputs;
}

}  // namespace cellm::executor::testing
