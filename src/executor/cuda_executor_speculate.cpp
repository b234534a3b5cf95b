// CudaExecutor's speculative decoding (speculation.h): which inputs get
// drafts, and how the drafted rows are sampled, accepted and rewound.
#include <algorithm>
#include <exception>

#include "core/log.h"
#include "executor/cuda_executor.h"
#include "sampling/penalties.h"
#include "sampling/sampler.h"

namespace cellm::executor {

bool CudaExecutor::speculates(SessionId sid) const {
  const SamplingParams* policy = sessions_.policy(sid);
  // No policy samples greedily. Adjusted, masked or suppressing policies
  // change a row's logits by state that would have to advance row by row.
  // Prompt scoring keeps per-session rows pending for its next output.
  return policy == nullptr || (!sampling::needs_adjustment(*policy) && !policy->masks_tokens() &&
                               policy->suppressed_tokens().empty() && !policy->prompt_logprobs);
}

void CudaExecutor::plan_drafts(const BatchInput& batch, PackedStep& step) {
  const SpeculationOptions& options = speculation_->options();
  const std::size_t outputs = static_cast<std::size_t>(std::count_if(
      batch.inputs.begin(), batch.inputs.end(), [](const Input& in) { return in.produce_output; }));
  if (outputs == 0 || outputs > options.max_batch) return;
  std::size_t extra = 0;
  std::vector<Token> drafts;
  for (std::size_t i = 0; i < batch.inputs.size(); ++i) {
    const Input& in = batch.inputs[i];
    if (!in.produce_output || in.size != 1 || step.logit_indices[i] < 0) continue;
    // Drafts go right after the session's last token of the step.
    const bool later = std::any_of(batch.inputs.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                                   batch.inputs.end(),
                                   [&](const Input& other) { return other.sid == in.sid; });
    if (later || !speculates(in.sid)) continue;
    const std::int64_t row = step.logit_indices[i];
    const std::int64_t position = step.positions[static_cast<std::size_t>(row)];
    const std::int64_t room = static_cast<std::int64_t>(max_session_tokens_) - 1 - position;
    if (room <= 0) continue;
    const std::size_t k =
        std::min<std::size_t>(speculation_->drafts_for(in.sid), static_cast<std::size_t>(room));
    const std::optional<std::span<const Token>> history = sessions_.history(in.sid);
    if (!history) continue;
    drafts.clear();
    try {
      options.proposer->propose(in.sid, *history, k, drafts);
    } catch (const std::exception& e) {
      // A proposer that fails costs the session its drafts, not its request.
      if (speculation_->first_failure(in.sid)) {
        CELLM_LOG_WARN("executor: draft proposer failed for session {} (it decodes without "
                       "drafts while this lasts): {}",
                       in.sid, e.what());
      }
      continue;
    }
    if (drafts.size() > k) drafts.resize(k);
    if (drafts.empty() ||
        std::any_of(drafts.begin(), drafts.end(),
                    [this](Token t) { return t >= static_cast<Token>(vocab_size_); })) {
      continue;
    }
    extra += drafts.size();
    drafted_.push_back(DraftedInput{i, in.sid, position, row, 0, drafts});
  }
  if (drafted_.empty()) return;
  const std::size_t total = step.tokens.size() + extra;
  // Every drafted row must come out of one forward, and the cells must be
  // there: otherwise this step runs plain.
  const cache::CellCacheMetrics cells = cache_->metrics();
  if (program::plan_slices(static_cast<std::int64_t>(total), methods_).size() != 1 ||
      static_cast<std::size_t>(cells.cells_free) < total || outputs + extra > 64) {
    drafted_.clear();
    return;
  }
  for (DraftedInput& d : drafted_) {
    const auto token_row = static_cast<std::size_t>(d.token_row);
    const cache::SeqId seq = step.seq_ids[token_row];
    step.logit_indices[d.input] = -1;
    d.first_draft_row = static_cast<std::int64_t>(step.tokens.size());
    for (std::size_t j = 0; j < d.drafts.size(); ++j) {
      step.tokens.push_back(d.drafts[j]);
      step.positions.push_back(d.position + 1 + static_cast<std::int64_t>(j));
      step.seq_ids.push_back(seq);
    }
  }
}

void CudaExecutor::end_round(const DraftedInput& drafted, std::size_t accepted, Output output,
                             BatchOutput& out) {
  if (accepted < drafted.drafts.size()) {
    // The real token and the accepted drafts stay; the rest go.
    const std::optional<cache::SeqId> seq = sessions_.sequence(drafted.sid);
    if (seq) {
      cache_->rewind(*seq,
                     static_cast<std::int32_t>(drafted.position + 1 +
                                               static_cast<std::int64_t>(accepted)));
    }
  }
  speculation_->record(drafted.sid, drafted.drafts.size(), accepted);
  output.drafted = static_cast<std::int32_t>(drafted.drafts.size());
  output.accepted = static_cast<std::int32_t>(accepted);
  out.outputs[drafted.input] = std::move(output);
}

Status CudaExecutor::resolve_drafts(const Tensor& logits, std::size_t first_row,
                                    BatchOutput& out) {
  CELLM_RETURN_IF_ERROR(check_logits_home(logits));
  if (logits.device() == Device::kCuda) return resolve_drafts_on_device(logits, first_row, out);
  std::size_t row = first_row;
  std::vector<float> scratch;
  for (const DraftedInput& d : drafted_) {
    Output output{d.sid, {}, {}};
    const bool wants_logprobs = sessions_.logprobs_wanted(d.sid) >= 0;
    std::size_t accepted = 0;
    // Row i predicts the token after draft i (the real token for i = 0) and
    // is sampled exactly as plain decoding would sample that position.
    for (std::size_t i = 0; i <= d.drafts.size(); ++i) {
      const auto r = static_cast<std::int64_t>(row + i);
      TokenLogprobs lp;
      std::optional<Token> token = sessions_.sample(d.sid, logits, r, &lp);
      if (!token && sessions_.greedy(d.sid)) {
        sampling::row_to_f32(logits, r, scratch);
        token = static_cast<Token>(sampling::argmax_row(scratch));
        sessions_.note_draw(d.sid, *token);
      }
      if (!token) {
        return internal_error("session {}: sampling drafted row {} of {} failed", d.sid, r,
                              logits.describe());
      }
      output.tokens.push_back(*token);
      if (wants_logprobs) output.logprobs.push_back(std::move(lp));
      if (i == d.drafts.size() || *token != d.drafts[i]) break;
      // The draw is the draft already in the cache at the next position.
      sessions_.commit_last_draw(d.sid);
      ++accepted;
    }
    row += 1 + d.drafts.size();
    end_round(d, accepted, std::move(output), out);
  }
  return Status::ok();
}

Status CudaExecutor::resolve_drafts_on_device(const Tensor& logits, std::size_t first_row,
                                              BatchOutput& out) {
  // Every drafted row is drawn in one sampler call, each with the next coin
  // of its session; the coins of rows past the first rejection go back.
  std::vector<float> params;
  std::vector<std::optional<sampling::Xorshift64Star>> saved;
  std::vector<SessionId>& sessions = draft_sessions_;
  sessions.clear();
  bool all_greedy = true;
  bool any_logprobs = false;
  for (const DraftedInput& d : drafted_) {
    saved.push_back(sessions_.device_rng(d.sid));
    any_logprobs = any_logprobs || sessions_.logprobs_wanted(d.sid) >= 0;
    for (std::size_t i = 0; i <= d.drafts.size(); ++i) {
      const DeviceSamplingRow r = sessions_.device_sampling(d.sid).value_or(DeviceSamplingRow{});
      params.insert(params.end(), {r.temperature, r.top_p, r.top_k, r.coin});
      all_greedy = all_greedy && !(r.temperature > 0.0f);
      sessions.push_back(d.sid);
    }
  }
  const std::size_t rows = sessions.size();
  const auto begin = static_cast<std::int64_t>(first_row);
  const Tensor view = logits.slice_rows(begin, begin + static_cast<std::int64_t>(rows));
  CELLM_ASSIGN_OR_RETURN(std::vector<Token> drawn,
                         run_device_sampler(view, rows, params, all_greedy));
  std::vector<std::optional<TokenLogprobs>> logprobs(rows);
  if (any_logprobs) {
    CELLM_RETURN_IF_ERROR(logprobs_on_device(view, sessions, drawn, {}, logprobs));
  }
  std::size_t row = 0;
  for (std::size_t n = 0; n < drafted_.size(); ++n) {
    const DraftedInput& d = drafted_[n];
    std::size_t accepted = 0;
    while (accepted < d.drafts.size() && drawn[row + accepted] == d.drafts[accepted]) ++accepted;
    // Give back the coins of the rows after the last one kept.
    if (saved[n]) {
      sessions_.set_device_rng(d.sid, *saved[n]);
      for (std::size_t i = 0; i <= accepted; ++i) (void)sessions_.device_sampling(d.sid);
    }
    Output output{d.sid, {}, {}};
    for (std::size_t i = 0; i <= accepted; ++i) {
      const Token token = drawn[row + i];
      output.tokens.push_back(token);
      if (logprobs[row + i]) output.logprobs.push_back(std::move(*logprobs[row + i]));
      sessions_.note_draw(d.sid, token);
      if (i < accepted) sessions_.commit_last_draw(d.sid);
    }
    row += 1 + d.drafts.size();
    end_round(d, accepted, std::move(output), out);
  }
  return Status::ok();
}

void CudaExecutor::hand_taps(const Tensor& taps, std::int64_t offset,
                             const std::vector<std::size_t>& plain, const PackedStep& step,
                             const BatchOutput& out) {
  if (!speculation_ || !speculation_->options().proposer->wants_taps() ||
      taps.device() != Device::kCpu || taps.rank() != 2) {
    return;
  }
  DraftProposer& proposer = *speculation_->options().proposer;
  std::vector<float>& tap = tap_scratch_;
  const auto give = [&](SessionId sid, std::int64_t row) {
    if (row < offset || row - offset >= taps.dim(0)) return;
    sampling::row_to_f32(taps, row - offset, tap);
    proposer.observe_taps(sid, step.positions[static_cast<std::size_t>(row)], tap);
  };
  if (plain.empty()) {
    for (const DraftedInput& d : drafted_) {
      const std::optional<Output>& o = out.outputs[d.input];
      const std::int64_t accepted = o ? o->accepted : 0;
      // The row whose draw was the last token kept: the real token's when
      // no draft was, else the last accepted draft's.
      give(d.sid, accepted == 0 ? d.token_row : d.first_draft_row + accepted - 1);
    }
    return;
  }
  for (std::size_t input : plain) {
    const std::optional<Output>& o = out.outputs[input];
    give(o ? o->sid : 0, step.logit_indices[input]);
  }
}

}  // namespace cellm::executor
