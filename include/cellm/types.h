// The vocabulary shared by executors, the scheduler and the runner: tokens,
// sessions, positions, sampling parameters and the batch types that carry work
// to an Executor and results back.
//
// Thread-safety: plain values. PreparedInput objects are immutable and may be
// released on any thread.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <variant>
#include <vector>

namespace cellm {

using Token = std::uint64_t;
using SessionId = std::int64_t;
using Position = std::int32_t;
using TaskId = std::int64_t;

// A model-specific prompt backing (e.g. precomputed embeddings). Opaque to the
// runner; only an executor whose accepts() says yes may consume it.
class PreparedInput {
 public:
  virtual ~PreparedInput() = default;
  // One canonical address per concrete type; executors compare it in accepts().
  virtual const void* kind() const = 0;
  // Decoder positions the whole backing occupies (not bytes).
  virtual std::size_t size() const = 0;
  // A view starting `start` positions in that shares the backing; null when
  // start >= size().
  virtual std::shared_ptr<const PreparedInput> suffix(std::size_t start) const = 0;
  // A token to seed detokenization with, if the backing implies one.
  virtual std::optional<Token> initial_detokenization_token() const { return std::nullopt; }
};
using PreparedInputPtr = std::shared_ptr<const PreparedInput>;

using TokenInputPtr = std::shared_ptr<const std::vector<Token>>;
using InputPayload = std::variant<TokenInputPtr, PreparedInputPtr>;

// Suppressed ids a policy can carry: enough for a model's EOS set; fixed so
// that SamplingParams stays a trivially copyable value a device row can hold.
inline constexpr std::size_t kMaxSuppressedTokens = 8;

// Installed per generation (Executor::set_sampling), not carried per input.
// temperature <= 0 means greedy; top_k <= 0 and top_p >= 1 disable truncation.
// Suppressed ids are never drawn, greedy or not (min_tokens keeps EOS out this
// way); a policy that suppresses every id of the vocabulary is refused by
// sampling::check_policy before it is installed.
struct SamplingParams {
  float temperature = 0.0f;
  float top_p = 1.0f;
  std::int32_t top_k = 0;
  // Only the first suppressed_count entries count; the rest stay 0 so that
  // equality compares policies, not leftovers.
  std::array<Token, kMaxSuppressedTokens> suppressed{};
  std::uint32_t suppressed_count = 0;

  std::span<const Token> suppressed_tokens() const {
    return {suppressed.data(), std::min<std::size_t>(suppressed_count, kMaxSuppressedTokens)};
  }
  bool suppresses(Token id) const {
    for (Token t : suppressed_tokens()) {
      if (t == id) return true;
    }
    return false;
  }
  // Adds `id` unless present; false (nothing changed) when the list is full.
  bool suppress(Token id) {
    if (suppresses(id)) return true;
    if (suppressed_count >= kMaxSuppressedTokens) return false;
    suppressed[suppressed_count++] = id;
    return true;
  }
  void clear_suppressed() {
    suppressed = {};
    suppressed_count = 0;
  }

  friend bool operator==(const SamplingParams&, const SamplingParams&) = default;
};

// One slice of work for one session: payload[offset, offset + size) placed at
// absolute positions position + offset ... (position is the base of the whole
// payload, not of the slice).
struct Input {
  SessionId sid = 0;
  bool produce_output = false;
  std::size_t offset = 0;
  std::size_t size = 0;
  InputPayload payload;
  Position position = 0;
};

// Usually one token; several for a speculative executor (accepted tokens plus
// the model's own next prediction).
struct Output {
  SessionId sid = 0;
  std::vector<Token> tokens;
};

struct Task {
  TaskId tid = 0;
  bool cancelled = false;
  Input input;
  bool is_decode = false;
};

struct BatchInput {
  std::vector<Input> inputs;
  std::size_t size() const {
    std::size_t n = 0;
    for (const Input& in : inputs) n += in.size;
    return n;
  }
};

struct BatchOutput {
  std::vector<std::optional<Output>> outputs;
};

// Moves the inputs out of `tasks`, keeping their order.
inline BatchInput to_batch_input(std::vector<Task>& tasks) {
  BatchInput batch;
  batch.inputs.reserve(tasks.size());
  for (Task& t : tasks) batch.inputs.push_back(std::move(t.input));
  return batch;
}

// Metadata-only validity of a position count: 0 < count <= INT32_MAX.
bool valid_position_count(std::size_t count);
// Number of positions a payload holds (token count or prepared size); 0 when null.
std::size_t payload_size(const InputPayload& payload);

}  // namespace cellm
