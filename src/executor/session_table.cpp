#include "executor/session_table.h"

#include <algorithm>
#include <limits>
#include <random>
#include <utility>
#include <variant>

#include "core/check.h"
#include "core/log.h"
#include "sampling/logprobs.h"
#include "sampling/token_mask.h"

namespace cellm::executor {

SliceRows select_rows(const PackedStep& step, std::int64_t offset, std::int64_t length) {
  SliceRows rows;
  for (std::size_t i = 0; i < step.logit_indices.size(); ++i) {
    const std::int64_t index = step.logit_indices[i];
    if (index >= offset && index < offset + length) {
      rows.selector.push_back(index - offset);
      rows.inputs.push_back(i);
    }
  }
  if (rows.selector.empty()) rows.selector.push_back(length - 1);
  return rows;
}

SessionTable::SessionTable(cache::CellCache& cache, int max_sessions, int max_session_tokens,
                           std::int64_t vocab_size, SessionId first_id)
    : cache_(cache),
      max_sessions_(max_sessions),
      max_session_tokens_(max_session_tokens),
      vocab_size_(vocab_size),
      next_id_(first_id),
      seeds_((static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}()) {
  CELLM_CHECK(max_sessions > 0 && max_session_tokens > 0, "session limits {} x {}", max_sessions,
              max_session_tokens);
  CELLM_CHECK(first_id > 0, "session ids start above 0, got {}", first_id);
}

std::optional<SessionId> SessionTable::publish(cache::SeqId seq, std::vector<Token> history) {
  const SessionId id = next_id_;
  Entry entry;
  entry.seq = seq;
  entry.output_start = history.size();  // everything inherited is prompt
  entry.history = std::move(history);
  sessions_.emplace(id, std::move(entry));
  next_id_ = id == std::numeric_limits<SessionId>::max() ? 0 : id + 1;
  return id;
}

std::optional<SessionId> SessionTable::open() {
  if (sessions_.size() >= static_cast<std::size_t>(max_sessions_) || next_id_ == 0) {
    return std::nullopt;
  }
  const std::optional<cache::SeqId> seq = cache_.seq_new();
  if (!seq) return std::nullopt;
  if (cache_.pos(*seq) != 0) {
    cache_.seq_rm(*seq);
    return std::nullopt;
  }
  return publish(*seq);
}

void SessionTable::close(SessionId session) {
  const auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  cache_.seq_rm(it->second.seq);
  sessions_.erase(it);
}

std::optional<SessionId> SessionTable::clone(SessionId source, Position upto) {
  const auto it = sessions_.find(source);
  if (it == sessions_.end() || upto < 0 || upto > max_session_tokens_ ||
      sessions_.size() >= static_cast<std::size_t>(max_sessions_) || next_id_ == 0 ||
      upto > cache_.pos(it->second.seq)) {
    return std::nullopt;
  }
  const std::optional<cache::SeqId> seq = cache_.seq_clone(it->second.seq, upto);
  if (!seq) return std::nullopt;
  const std::vector<Token>& source_history = it->second.history;
  const std::size_t kept = std::min(source_history.size(), static_cast<std::size_t>(upto));
  return publish(*seq,
                 std::vector<Token>(source_history.begin(),
                                    source_history.begin() + static_cast<std::ptrdiff_t>(kept)));
}

void SessionTable::set_sampling(SessionId session, const SamplingParams& params,
                                std::optional<std::uint64_t> seed) {
  const auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  if (Status checked = sampling::check_policy(params, vocab_size_); !checked.is_ok()) {
    CELLM_LOG_ERROR("executor: session {}: sampling policy refused: {}", session,
                    checked.to_string());
    return;
  }
  const std::uint64_t s = seed ? *seed : seeds_();
  Entry& entry = it->second;
  entry.sampler.emplace(vocab_size_, params, s);
  entry.device_rng.emplace(s);
  // Counts are kept only while a penalty reads them (no cost otherwise).
  entry.counting = params.repetition_penalty != 1.0f || params.frequency_penalty != 0.0f ||
                   params.presence_penalty != 0.0f;
  entry.counts.clear();
  if (entry.counting) {
    for (std::size_t i = 0; i < entry.history.size(); ++i) {
      entry.counts.add(entry.history[i], i >= entry.output_start);
    }
  }
}

void SessionTable::feed(Entry& entry, std::size_t start, std::span<const Token> tokens) {
  std::vector<Token>& h = entry.history;
  while (h.size() > start) {
    if (entry.counting) entry.counts.remove(h.back(), h.size() - 1 >= entry.output_start);
    h.pop_back();
  }
  entry.output_start = std::min(entry.output_start, h.size());
  const bool output = tokens.size() == 1 && entry.last_draw && entry.last_draw->first == start &&
                      entry.last_draw->second == tokens[0];
  entry.last_draw.reset();
  if (!output) {
    // A prompt: whatever was output so far now belongs to the context.
    if (entry.counting && entry.output_start < h.size()) entry.counts.forget_output();
    entry.output_start = start + tokens.size();
  }
  for (Token t : tokens) {
    h.push_back(t);
    if (entry.counting) entry.counts.add(t, output);
  }
}

Result<PackedStep> SessionTable::pack(const BatchInput& batch) {
  // Each session's cursor (where its inputs so far end) lives in its entry,
  // stamped with this call's number: no map per step, and a refused call's
  // stamps are simply stale for the next.
  const std::uint64_t stamp = ++packs_;
  std::vector<std::pair<cache::SeqId, Position>> rewinds;
  PackedStep step;
  const std::size_t total = batch.size();
  step.tokens.reserve(total);
  step.positions.reserve(total);
  step.seq_ids.reserve(total);
  step.logit_indices.reserve(batch.inputs.size());
  constexpr std::int64_t kMaxPosition = std::numeric_limits<std::int32_t>::max();

  for (std::size_t i = 0; i < batch.inputs.size(); ++i) {
    const Input& in = batch.inputs[i];
    const auto it = sessions_.find(in.sid);
    if (it == sessions_.end()) {
      return invalid_argument("input {}: session {} at position {} is not open", i, in.sid,
                              in.position);
    }
    const cache::SeqId seq = it->second.seq;
    const auto* tokens_ptr = std::get_if<TokenInputPtr>(&in.payload);
    if (tokens_ptr == nullptr) {
      return invalid_argument(
          "input {}: session {} at position {}: prepared inputs are not accepted here; send tokens",
          i, in.sid, in.position);
    }
    if (!*tokens_ptr) {
      return invalid_argument("input {}: session {} at position {}: the token payload is null", i,
                              in.sid, in.position);
    }
    const std::vector<Token>& tokens = **tokens_ptr;
    if (!valid_position_count(tokens.size())) {
      return invalid_argument(
          "input {}: session {} at position {}: the payload holds {} tokens (need 1 to 2^31-1)", i,
          in.sid, in.position, tokens.size());
    }
    if (in.size == 0) {
      return invalid_argument("input {}: session {} at position {}: the slice is empty", i, in.sid,
                              in.position);
    }
    if (in.offset > tokens.size() || in.size > tokens.size() - in.offset) {
      return invalid_argument(
          "input {}: session {} at position {}: slice [{}, {}) is outside its payload of {} tokens",
          i, in.sid, in.position, in.offset, in.offset + in.size, tokens.size());
    }
    const std::int64_t start =
        static_cast<std::int64_t>(in.position) + static_cast<std::int64_t>(in.offset);
    const std::int64_t end = start + static_cast<std::int64_t>(in.size);
    if (in.position < 0 || end > kMaxPosition) {
      return invalid_argument("input {}: session {}: positions [{}, {}) are outside [0, 2^31-1)", i,
                              in.sid, start, end);
    }
    for (std::size_t k = in.offset; k < in.offset + in.size; ++k) {
      if (vocab_size_ > 0 && tokens[k] >= static_cast<Token>(vocab_size_)) {
        return invalid_argument(
            "input {}: session {} at position {}: token {} is outside the vocabulary of {}", i,
            in.sid, start + static_cast<std::int64_t>(k - in.offset), tokens[k], vocab_size_);
      }
    }

    Entry::Cursor& cursor = it->second.cursor;
    if (cursor.stamp != stamp) cursor = {stamp, cache_.pos(seq), false};
    if (start > cursor.end) {
      return invalid_argument(
          "input {}: session {} at position {}: leaves a gap after position {} where the session "
          "ends",
          i, in.sid, start, cursor.end);
    }
    if (start < cursor.end) {
      if (cursor.seen) {
        return invalid_argument(
            "input {}: session {} at position {}: overlaps its earlier input in this batch, which "
            "ends at {}",
            i, in.sid, start, cursor.end);
      }
      if (start == 0) {
        return invalid_argument(
            "input {}: session {} at position 0: reopens from the start of a session of {} "
            "positions; close it and open a new one",
            i, in.sid, cursor.end);
      }
      rewinds.emplace_back(seq, static_cast<Position>(start));
    }
    if (end > max_session_tokens_) {
      return out_of_resources(
          "input {}: session {} at position {}: ends at {}, past the limit of {} tokens per "
          "session",
          i, in.sid, start, end, max_session_tokens_);
    }
    cursor.end = end;
    cursor.seen = true;

    for (std::size_t k = 0; k < in.size; ++k) {
      step.tokens.push_back(static_cast<std::int64_t>(tokens[in.offset + k]));
      step.positions.push_back(start + static_cast<std::int64_t>(k));
      step.seq_ids.push_back(seq);
    }
    step.logit_indices.push_back(
        in.produce_output ? static_cast<std::int64_t>(step.tokens.size()) - 1 : -1);
  }

  for (const auto& [seq, position] : rewinds) {
    if (!cache_.rewind(seq, position)) {
      return internal_error("sequence {} refused a rewind to position {} it had validated", seq,
                            position);
    }
  }
  // Everything is valid: the histories follow the batch, input by input.
  for (const Input& in : batch.inputs) {
    const std::vector<Token>& tokens = **std::get_if<TokenInputPtr>(&in.payload);
    feed(sessions_.at(in.sid), static_cast<std::size_t>(in.position) + in.offset,
         std::span(tokens).subspan(in.offset, in.size));
  }
  return step;
}

std::optional<Token> SessionTable::sample(SessionId session, const Tensor& logits, std::int64_t row,
                                          TokenLogprobs* logprobs) {
  const auto it = sessions_.find(session);
  if (it == sessions_.end() || !it->second.sampler) return std::nullopt;
  if (logits.device() != Device::kCpu || logits.rank() != 2 || logits.dim(1) != vocab_size_ ||
      row < 0 || row >= logits.dim(0) || logits.data() == nullptr) {
    return std::nullopt;
  }
  if (logits.dtype() != DType::kF32 && logits.dtype() != DType::kF16 &&
      logits.dtype() != DType::kBF16) {
    return std::nullopt;
  }
  std::optional<std::int64_t> token;
  const auto vocab = static_cast<std::size_t>(vocab_size_);
  Entry& entry = it->second;
  const SamplingParams& params = entry.sampler->params();
  const bool adjusted = sampling::needs_adjustment(params);
  const bool masked = params.masks_tokens();
  // The row the draw sees, widened to f32 where the mask, the logprobs or
  // the adjustments need it (the plain f32 path reads the logits in place).
  std::span<const float> seen;
  if (adjusted || masked || logits.dtype() != DType::kF32) {
    sampling::row_to_f32(logits, row, row_);
    // The mask first, as the device does (sampling/token_mask.h), once
    // settled (a deferred mask is computed here, on the engine thread).
    if (masked) {
      params.token_mask->settle();
      sampling::apply_token_mask(row_, params.token_mask->words);
    }
    if (adjusted) {
      sampling::build_entries(params, entry.counts, vocab_size_, entries_);
      sampling::adjust_row(row_, params, entries_);
    }
    seen = row_;
  } else {
    seen = std::span(logits.data_as<float>() + row * vocab_size_, vocab);
  }
  token = entry.sampler->sample(seen);
  if (!token || *token < 0 || *token >= vocab_size_) return std::nullopt;
  if (logprobs != nullptr && params.wants_logprobs()) {
    // Adjusted rows already hold the suppressed ids at -inf.
    sampling::row_logprobs(seen, params.temperature,
                           adjusted ? std::span<const Token>{} : params.suppressed_tokens(),
                           static_cast<Token>(*token), params.logprobs, *logprobs);
  }
  entry.last_draw.emplace(entry.history.size(), static_cast<Token>(*token));
  return static_cast<Token>(*token);
}

const SamplingParams* SessionTable::policy(SessionId session) const {
  const auto it = sessions_.find(session);
  if (it == sessions_.end() || !it->second.sampler) return nullptr;
  return &it->second.sampler->params();
}

std::int32_t SessionTable::logprobs_wanted(SessionId session) const {
  const auto it = sessions_.find(session);
  if (it == sessions_.end() || !it->second.sampler) return -1;
  const std::int32_t k = it->second.sampler->params().logprobs;
  return k >= 0 ? std::min(k, kMaxTopLogprobs) : -1;
}

std::optional<DevicePenaltyRow> SessionTable::device_penalties(
    SessionId session, std::vector<sampling::PenaltyEntry>& entries) {
  const auto it = sessions_.find(session);
  if (it == sessions_.end() || !it->second.sampler) return std::nullopt;
  const SamplingParams& p = it->second.sampler->params();
  if (!sampling::needs_adjustment(p)) return std::nullopt;
  sampling::build_entries(p, it->second.counts, vocab_size_, entries_);
  entries.insert(entries.end(), entries_.begin(), entries_.end());
  DevicePenaltyRow row;
  row.repetition = p.repetition_penalty;
  row.temperature = p.temperature > 0.0f ? p.temperature : 0.0f;
  row.min_p_log_threshold = sampling::min_p_log_threshold(p.min_p);
  return row;
}

TokenMaskPtr SessionTable::token_mask(SessionId session) const {
  const auto it = sessions_.find(session);
  if (it == sessions_.end() || !it->second.sampler) return nullptr;
  const SamplingParams& p = it->second.sampler->params();
  if (!p.masks_tokens()) return nullptr;
  // The caller reads the words next: they must be final.
  p.token_mask->settle();
  return p.token_mask;
}

bool SessionTable::adjusts_logits(SessionId session) const {
  const auto it = sessions_.find(session);
  return it != sessions_.end() && it->second.sampler &&
         sampling::needs_adjustment(it->second.sampler->params());
}

void SessionTable::note_draw(SessionId session, Token token) {
  const auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  it->second.last_draw.emplace(it->second.history.size(), token);
}

void SessionTable::commit_last_draw(SessionId session) {
  const auto it = sessions_.find(session);
  if (it == sessions_.end() || !it->second.last_draw) return;
  const auto [at, token] = *it->second.last_draw;
  feed(it->second, at, std::span<const Token>(&token, 1));
}

std::optional<sampling::Xorshift64Star> SessionTable::device_rng(SessionId session) const {
  const auto it = sessions_.find(session);
  if (it == sessions_.end() || !it->second.device_rng) return std::nullopt;
  return *it->second.device_rng;
}

void SessionTable::set_device_rng(SessionId session, const sampling::Xorshift64Star& rng) {
  const auto it = sessions_.find(session);
  if (it == sessions_.end() || !it->second.device_rng) return;
  it->second.device_rng = rng;
}

std::optional<std::span<const Token>> SessionTable::history(SessionId session) const {
  const auto it = sessions_.find(session);
  if (it == sessions_.end()) return std::nullopt;
  return std::span<const Token>(it->second.history);
}

std::optional<std::size_t> SessionTable::output_start(SessionId session) const {
  const auto it = sessions_.find(session);
  if (it == sessions_.end()) return std::nullopt;
  return it->second.output_start;
}

std::optional<sampling::TokenCounts::Count> SessionTable::token_count(SessionId session,
                                                                      Token token) const {
  const auto it = sessions_.find(session);
  if (it == sessions_.end() || !it->second.counting) return std::nullopt;
  return it->second.counts.count(token);
}

std::optional<DeviceSamplingRow> SessionTable::device_sampling(SessionId session) {
  const auto it = sessions_.find(session);
  if (it == sessions_.end() || !it->second.sampler) return std::nullopt;
  const SamplingParams& p = it->second.sampler->params();
  DeviceSamplingRow row;
  row.temperature = p.temperature > 0.0f ? p.temperature : 0.0f;
  row.top_p = p.top_p;
  row.top_k = static_cast<float>(p.top_k);
  if (p.temperature > 0.0f) row.coin = it->second.device_rng->next_f32();
  std::size_t slot = 0;
  for (Token id : p.suppressed_tokens()) {
    // An id past the vocabulary can never be drawn anyway.
    if (vocab_size_ > 0 && id >= static_cast<Token>(vocab_size_)) continue;
    row.suppressed[slot++] = static_cast<std::int64_t>(id);
  }
  row.suppresses = slot > 0;
  return row;
}

bool SessionTable::greedy(SessionId session) const {
  const auto it = sessions_.find(session);
  return it != sessions_.end() && (!it->second.sampler || it->second.sampler->greedy());
}

std::optional<cache::SeqId> SessionTable::sequence(SessionId session) const {
  const auto it = sessions_.find(session);
  if (it == sessions_.end()) return std::nullopt;
  return it->second.seq;
}

}  // namespace cellm::executor
