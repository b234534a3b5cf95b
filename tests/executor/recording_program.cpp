#include "recording_program.h"

#include <algorithm>
#include <utility>

namespace cellm::executor::testing {

std::vector<std::string> RecordingProgram::method_names() const {
  std::vector<std::string> names = inner_->method_names();
  std::erase_if(names, [&](const std::string& n) { return hidden(n); });
  return names;
}

Result<program::MethodMeta> RecordingProgram::method_meta(std::string_view method) const {
  if (hidden(method)) return not_found("method {} is hidden by the test", method);
  return inner_->method_meta(method);
}

Status RecordingProgram::load_method(std::string_view method) {
  if (hidden(method)) return not_found("method {} is hidden by the test", method);
  return inner_->load_method(method);
}

Result<std::vector<Tensor>> RecordingProgram::execute(std::string_view method,
                                                      std::span<const Tensor> inputs) {
  if (hidden(method)) return not_found("method {} is hidden by the test", method);
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
  return outputs;
}

}  // namespace cellm::executor::testing
