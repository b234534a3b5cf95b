#include "cellm/types.h"

#include <limits>

namespace cellm {

bool valid_position_count(std::size_t count) {
  return count > 0 && count <= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max());
}

std::size_t payload_size(const InputPayload& payload) {
  if (const auto* tokens = std::get_if<TokenInputPtr>(&payload)) {
    return *tokens ? (*tokens)->size() : 0;
  }
  const auto& prepared = std::get<PreparedInputPtr>(payload);
  return prepared ? prepared->size() : 0;
}

}  // namespace cellm
