// SessionTable: the session <-> cache-sequence map shared by ModuleExecutor
// and CudaExecutor (batching_spec §2.4). It packs a batch onto one token axis
// after validating every input (a refusal rewinds nothing), and keeps each
// session's sampling policy with two generators seeded alike: the host
// Sampler's and the one that draws coins for a device sampler, so both paths
// draw the same tokens for one seed. Session ids are never reused; cache
// sequence slots are.
//
// It also keeps each session's token history (every token packed, by
// position; a rewind truncates it) and, while the installed policy has a
// repetition, frequency or presence penalty, per-token counts over it. The
// history splits into prompt and this generation's output: an input that is
// exactly the one token the session's last draw produced, at the position
// after it, is output; any other input is prompt and turns all earlier
// output into prompt (a new turn). So "output so far" is what the session
// drew since prompt tokens were last fed, whichever policy drew it (a
// re-installed policy mid-generation, as min_tokens does, keeps it). A clone
// inherits its source's history up to the clone point, all of it as prompt:
// a clone's output starts empty.
//
// Thread-safety: not thread-safe; the engine thread owns it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cache/cell_cache.h"
#include "cellm/status.h"
#include "cellm/types.h"
#include "core/tensor.h"
#include "sampling/penalties.h"
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

// A row's logit adjustment on a device sampler (the `sample_penalize`
// method's params row): the repetition penalty, the row's temperature and
// min_p's log threshold (-inf: none). Its entries travel beside it.
struct DevicePenaltyRow {
  float repetition = 1.0f;
  float temperature = 0.0f;
  float min_p_log_threshold = 0.0f;
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
  // When the policy asks for logprobs and `logprobs` is not null, fills it
  // from the row the draw used (sampling/logprobs.h); otherwise leaves it.
  std::optional<Token> sample(SessionId session, const Tensor& logits, std::int64_t row,
                              TokenLogprobs* logprobs = nullptr);
  // The top-logprobs count the session's policy asks for (0..20), or -1
  // when it asks for none, is unknown or has no policy.
  std::int32_t logprobs_wanted(SessionId session) const;
  // The installed policy; null for an unknown session or one without.
  const SamplingParams* policy(SessionId session) const;
  // The params row for a device sampler; the coin comes from the session's
  // device-path generator and is drawn only when temperature > 0. nullopt for
  // an unknown session or one without a policy.
  std::optional<DeviceSamplingRow> device_sampling(SessionId session);
  // The session's constrained-decoding mask (SamplingParams::token_mask);
  // null for an unknown session, one without a policy or an unconstrained one.
  // Settled (TokenMask::settle): its words are final for this draw.
  TokenMaskPtr token_mask(SessionId session) const;
  // Whether the session's policy adjusts logits (sampling::needs_adjustment).
  bool adjusts_logits(SessionId session) const;
  // For a session whose policy adjusts logits (sampling::needs_adjustment):
  // appends its entries to `entries` and returns its row; nullopt (nothing
  // appended) for one that needs none, is unknown or has no policy.
  std::optional<DevicePenaltyRow> device_penalties(SessionId session,
                                                   std::vector<sampling::PenaltyEntry>& entries);
  // Records a token a device sampler (or a greedy fallback) drew for the
  // session, as sample() does for its own draws: the next input holding
  // exactly it is output. Unknown sessions are ignored.
  void note_draw(SessionId session, Token token);
  // Speculation: the last draw equalled the draft already fed after it, so it
  // joins the history as output now (as feeding it would) and the next draw
  // goes one position further. Unknown sessions or no draw: nothing.
  void commit_last_draw(SessionId session);
  // The device-path generator, to give back the coins of rejected draft rows.
  // nullopt for an unknown session or one without a sampling policy.
  std::optional<sampling::Xorshift64Star> device_rng(SessionId session) const;
  void set_device_rng(SessionId session, const sampling::Xorshift64Star& rng);
  // The session's token history (every position it holds) and how many of
  // its leading tokens are prompt; nullopt for an unknown session.
  std::optional<std::span<const Token>> history(SessionId session) const;
  std::optional<std::size_t> output_start(SessionId session) const;
  // The counts penalties read; nullopt for an unknown session or one whose
  // policy has no repetition, frequency or presence penalty.
  std::optional<sampling::TokenCounts::Count> token_count(SessionId session, Token token) const;

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
    std::vector<Token> history;    // by position
    std::size_t output_start = 0;  // history[output_start..] is this generation's output
    bool counting = false;         // counts are kept (the policy has a penalty)
    sampling::TokenCounts counts;
    // The last draw: where its token would go and the token.
    std::optional<std::pair<std::size_t, Token>> last_draw;
    // pack()'s cursor: where this session's inputs of pack call `stamp` end
    // and whether it has one yet.
    struct Cursor {
      std::uint64_t stamp = 0;
      std::int64_t end = 0;
      bool seen = false;
    } cursor;
  };
  std::optional<SessionId> publish(cache::SeqId seq, std::vector<Token> history = {});
  // Truncates the history to `start`, then appends `tokens` (output when
  // they are the last draw, else prompt).
  static void feed(Entry& entry, std::size_t start, std::span<const Token> tokens);

  cache::CellCache& cache_;
  int max_sessions_;
  int max_session_tokens_;
  std::int64_t vocab_size_;
  SessionId next_id_ = 1;  // 0 once every id is spent
  std::unordered_map<SessionId, Entry> sessions_;
  std::uint64_t packs_ = 0;  // pack() calls, the cursors' stamps
  std::mt19937_64 seeds_;    // the seeds of policies given none
  // Host sampling scratch (a widened row and its entries).
  std::vector<float> row_;
  std::vector<sampling::PenaltyEntry> entries_;
};

}  // namespace cellm::executor
