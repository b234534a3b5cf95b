// SessionTable: the session <-> cache-sequence map shared by ModuleExecutor
// and CudaExecutor (batching_spec §2.4). It packs a batch onto one token axis
// after validating every input (a refusal rewinds nothing), and keeps each
// session's sampling policy with two generators seeded alike: the host
// Sampler's and the one that draws coins for a device sampler, so both paths
// draw the same tokens for one seed. Session ids are never reused; cache
// sequence slots are.
//
// Thread-safety: not thread-safe; the engine thread owns it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <unordered_map>
#include <vector>

#include "cache/cell_cache.h"
#include "cellm/status.h"
#include "cellm/types.h"
#include "core/tensor.h"
#include "sampling/sampler.h"
#include "sampling/xorshift.h"

namespace cellm::executor {

// A batch flattened onto one token axis, in input order.
struct PackedStep {
  std::vector<std::int64_t> tokens;
  std::vector<std::int64_t> positions;
  std::vector<cache::SeqId> seq_ids;
  // Per input: the index of its last token when it produces output, else -1.
  std::vector<std::int64_t> logit_indices;
};

// The rows a forward over tokens [offset, offset + length) must select.
struct SliceRows {
  std::vector<std::int64_t> selector;  // token rows relative to offset
  std::vector<std::size_t> inputs;     // the input each selected row answers
};

// Every input whose logit index falls in the slice, in input order. A slice
// nobody reads still selects its last row, since a program always returns
// at least one.
SliceRows select_rows(const PackedStep& step, std::int64_t offset, std::int64_t length);

// One row of a device sampler's params [R, 4] float32, plus the row of its
// optional suppressed-ids input i64 [R, kMaxSuppressedTokens] (-1: empty).
struct DeviceSamplingRow {
  float temperature = 0.0f;
  float top_p = 1.0f;
  float top_k = 0.0f;
  float coin = 0.0f;
  std::array<std::int64_t, kMaxSuppressedTokens> suppressed = filled_suppressed();
  bool suppresses = false;  // whether any slot is used

  static constexpr std::array<std::int64_t, kMaxSuppressedTokens> filled_suppressed() {
    std::array<std::int64_t, kMaxSuppressedTokens> ids{};
    ids.fill(-1);
    return ids;
  }
};

class SessionTable {
 public:
  // The cache must outlive the table. max_sessions and max_session_tokens > 0.
  // Ids count up from first_id (> 0); tests start near the top of the id space
  // to reach its end.
  SessionTable(cache::CellCache& cache, int max_sessions, int max_session_tokens,
               std::int64_t vocab_size, SessionId first_id = 1);

  // A fresh session at position 0; nullopt at capacity or out of ids.
  std::optional<SessionId> open();
  // Releases the session's sequence; unknown ids are ignored.
  void close(SessionId session);
  // A new session sharing source's first `upto` positions, with no policy.
  std::optional<SessionId> clone(SessionId source, Position upto);
  // Installs a policy; a missing seed is drawn from a generator seeded once
  // by std::random_device (a random_device per call cost ~10 us of the
  // engine thread for every generation started).
  // Unknown sessions are ignored; a policy sampling::check_policy refuses
  // (e.g. one suppressing the whole vocabulary) is logged and changes nothing.
  void set_sampling(SessionId session, const SamplingParams& params,
                    std::optional<std::uint64_t> seed);

  // Validates the whole batch, then performs the rewinds it asks for and
  // returns it packed. Refusals (nothing changed): InvalidArgument for an
  // unknown session, a payload that is not a non-empty token list covering
  // the slice, a token outside the vocabulary, a gap, an overlap with an
  // earlier input of the batch or a restart at position 0; OutOfResources for
  // a slice ending past max_session_tokens. Declaring the packed tokens to
  // the cache (place_step) is the caller's job.
  Result<PackedStep> pack(const BatchInput& batch);

  // Samples row `row` of host logits [R, V] with the session's policy
  // (advancing its host generator). nullopt for an unknown session, one
  // without a policy, a row out of range or logits that are not [R, V].
  std::optional<Token> sample(SessionId session, const Tensor& logits, std::int64_t row);
  // The params row for a device sampler; the coin comes from the session's
  // device-path generator and is drawn only when temperature > 0. nullopt for
  // an unknown session or one without a policy.
  std::optional<DeviceSamplingRow> device_sampling(SessionId session);
  // True when the session is known and samples greedily.
  bool greedy(SessionId session) const;

  std::optional<cache::SeqId> sequence(SessionId session) const;
  std::size_t size() const { return sessions_.size(); }
  int max_sessions() const { return max_sessions_; }
  int max_session_tokens() const { return max_session_tokens_; }

 private:
  struct Entry {
    cache::SeqId seq = 0;
    std::optional<sampling::Sampler> sampler;
    std::optional<sampling::Xorshift64Star> device_rng;
  };
  std::optional<SessionId> publish(cache::SeqId seq);

  cache::CellCache& cache_;
  int max_sessions_;
  int max_session_tokens_;
  std::int64_t vocab_size_;
  SessionId next_id_ = 1;  // 0 once every id is spent
  std::unordered_map<SessionId, Entry> sessions_;
  std::mt19937_64 seeds_;  // the seeds of policies given none
};

}  // namespace cellm::executor
