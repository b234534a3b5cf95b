#include "executor/program_loading.h"

#include <utility>

#include "core/log.h"

namespace cellm::executor {

bool bind_and_load(program::Program& program, std::shared_ptr<cache::CellCache> cache,
                   std::span<const std::string_view> methods) {
  if (Status status = program.bind_cache(std::move(cache)); !status.is_ok()) {
    CELLM_LOG_ERROR("executor: initialization failed: binding the cell cache: {}",
                    status.to_string());
    return false;
  }
  for (std::string_view method : methods) {
    if (Status status = program.load_method(method); !status.is_ok()) {
      CELLM_LOG_ERROR("executor: initialization failed: loading {}: {}", method,
                      status.to_string());
      return false;
    }
  }
  return true;
}

}  // namespace cellm::executor
