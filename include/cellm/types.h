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
// that a device row can hold them.
inline constexpr std::size_t kMaxSuppressedTokens = 8;

// One logit_bias entry: `bias` is added to the raw logit of `token`.
struct LogitBias {
  Token token = 0;
  float bias = 0.0f;
  friend bool operator==(const LogitBias&, const LogitBias&) = default;
};
// At most this many logit_bias entries per policy (OpenAI's limit).
inline constexpr std::size_t kMaxLogitBias = 300;
// Immutable once built and shared by every copy of a policy (the n choices
// of a request, the executor's installed copy), so copying a policy never
// copies the list. Sorted by token, one entry per token.
using LogitBiasList = std::shared_ptr<const std::vector<LogitBias>>;

// Completes a TokenMask whose words are not computed yet. The engine defers
// the next mask of a constrained generation until the sampler reads it, which
// the CUDA executor does after enqueueing the step's forward, so the mask is
// computed while the GPU runs. settle() computes it on the calling thread and
// returns once the words are final; a no-op when nothing is pending. Engine
// thread only (the thread every Executor method runs on).
class TokenMaskFill {
 public:
  virtual ~TokenMaskFill() = default;
  virtual void settle() = 0;
};

// Constrained decoding's per-step vocabulary mask: bit t % 32 of words[t / 32]
// set = token t may be drawn. The engine owns it and rewrites it before each
// step of a constrained generation (or leaves it to settle(), see
// TokenMaskFill); the executor calls settle() and then reads it when it
// samples that generation's row, so one installed policy follows the grammar
// step by step. The size of `words` never changes once installed. Empty
// words: no mask.
struct TokenMask {
  std::vector<std::uint32_t> words;
  // Set when the words may still be pending (see TokenMaskFill); null: they
  // are always final.
  std::shared_ptr<TokenMaskFill> fill;
  // Makes `words` final for the coming draw; call before reading them.
  void settle() const {
    if (fill) fill->settle();
  }
  bool allows(Token id) const {
    const std::size_t w = static_cast<std::size_t>(id / 32);
    return w < words.size() && ((words[w] >> (id % 32)) & 1u) != 0;
  }
};
using TokenMaskPtr = std::shared_ptr<const TokenMask>;
// Log probabilities a generation may ask for: the chosen token's and at most
// this many of the most likely alternatives per token (OpenAI's limit).
inline constexpr std::int32_t kMaxTopLogprobs = 20;

// One candidate token and its log probability.
struct TokenLogprob {
  Token token = 0;
  float logprob = 0.0f;
  friend bool operator==(const TokenLogprob&, const TokenLogprob&) = default;
};

// The log probabilities of one generated token, from the distribution it was
// drawn from: log-softmax of the logits after every adjustment (logit_bias,
// penalties, suppressed ids, min_p, token masks) divided by the temperature
// (greedy rows: not divided), before top-k/top-p truncation. `top` holds the
// most likely ids, most likely first (ties: lower id), as many as the policy
// asked for (SamplingParams::logprobs). An id the adjustments excluded has
// logprob -inf.
struct TokenLogprobs {
  Token token = 0;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;
};

// Installed per generation (Executor::set_sampling), not carried per input.
// temperature <= 0 means greedy; top_k <= 0 and top_p >= 1 disable truncation.
//
// Logit adjustments (vLLM/OpenAI order; sampling/penalties.h is the exact
// arithmetic): logit_bias is added to the raw logits, then the repetition
// penalty divides (logit > 0) or multiplies (logit <= 0) the logit of every
// token the session holds (prompt and output), then frequency and presence
// penalties subtract frequency_penalty * count + presence_penalty for every
// token drawn `count` > 0 times in this generation's output. Greedy rows see
// them too. After temperature, min_p drops every token whose probability is
// below min_p times the largest, before top-k and top-p. The neutral values
// (0, 0, 1, 0, no list) cost nothing.
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
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  float repetition_penalty = 1.0f;  // > 0; 1 disables
  float min_p = 0.0f;               // [0, 1]; 0 disables
  LogitBiasList logit_bias;         // null or empty: none
  // Constrained decoding (see TokenMask): every token outside the mask gets
  // probability 0, greedy or not, after the adjustments above. Null: none.
  TokenMaskPtr token_mask;

  bool masks_tokens() const { return token_mask && !token_mask->words.empty(); }
  // Log probabilities to report with every drawn token (Output::logprobs):
  // -1 none; 0..kMaxTopLogprobs the chosen token's and that many top
  // alternatives. Changes nothing about which token is drawn.
  std::int32_t logprobs = -1;
  bool wants_logprobs() const { return logprobs >= 0; }
  // Also score the prompt (OpenAI's `echo` with logprobs): every input row
  // whose next token is known (the payload's following token) reports that
  // token's log-softmax under the raw logits (no adjustment, no temperature)
  // with max(logprobs, 0) top alternatives, in Output::prompt_logprobs of the
  // session's next output. Prompt rows are only those an input feeds, so a
  // prompt served from a prefix cache is not scored: skip the cache.
  bool prompt_logprobs = false;

  // Whether any logit adjustment (penalty or bias) applies before sampling.
  bool adjusts_logits() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f ||
           (logit_bias && !logit_bias->empty());
  }
  std::span<const LogitBias> logit_bias_entries() const {
    if (!logit_bias) return {};
    return {logit_bias->data(), logit_bias->size()};
  }

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

  // Compares the bias lists by content: two policies built alike are equal.
  friend bool operator==(const SamplingParams& a, const SamplingParams& b) {
    const auto ab = a.logit_bias_entries();
    const auto bb = b.logit_bias_entries();
    return a.temperature == b.temperature && a.top_p == b.top_p && a.top_k == b.top_k &&
           a.suppressed == b.suppressed && a.suppressed_count == b.suppressed_count &&
           a.presence_penalty == b.presence_penalty && a.frequency_penalty == b.frequency_penalty &&
           a.repetition_penalty == b.repetition_penalty && a.min_p == b.min_p &&
           a.token_mask == b.token_mask && a.logprobs == b.logprobs &&
           a.prompt_logprobs == b.prompt_logprobs &&
           std::equal(ab.begin(), ab.end(), bb.begin(), bb.end());
  }
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
  // Empty unless the session's policy asks for logprobs; then one entry per
  // token, in order.
  std::vector<TokenLogprobs> logprobs;
  // Speculative decoding: draft tokens verified for this output and how many
  // of them the model kept (tokens.size() - 1 of them when all were kept).
  std::int32_t drafted = 0;
  std::int32_t accepted = 0;
  // Policies with prompt_logprobs: the entries of the prompt rows fed since
  // the session's last output (several inputs' worth when a prompt was
  // chunked), in position order; entry i scores the token at position p + 1
  // given the tokens up to p. Empty otherwise.
  std::vector<TokenLogprobs> prompt_logprobs;
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
