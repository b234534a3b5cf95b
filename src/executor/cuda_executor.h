// CudaExecutor: the batching executor over a program of several forward
// methods (DESIGN §4, batching_spec §4): static `forward_N` methods of
// exactly N tokens (graph-captured on CUDA) and an optional dynamic
// `forward_others` for anything wider. Every session is one sequence of a
// CellCache the executor builds from the program's constants; a batch is
// packed onto one token axis and cut by plan_slices into forwards, each on
// the narrowest method that holds it, static ones padded with token 0 at
// position 0 (the scratch cell). Tokens are sampled on the host, or by the
// program's `sample`/`sample_argmax` methods when logits stay on the device.
// Nothing here depends on a backend: the CPU program drives it in CI. Its raw
// step surface is the public contract of include/cellm/raw_step.h.
//
// Thread-safety: not thread-safe; every call happens on the engine thread,
// except published_kv_cells(), which any thread may call.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "cache/cell_cache.h"
#include "cellm/executor.h"
#include "cellm/raw_step.h"
#include "cellm/status.h"
#include "core/tensor.h"
#include "executor/forward_pass.h"
#include "executor/kv_metrics.h"
#include "executor/session_table.h"
#include "executor/speculation.h"
#include "program/program.h"
#include "program/step_plan.h"

namespace cellm::executor {

// How often a forward method ran, for reporting.
struct ForwardMethodCalls {
  std::string name;
  std::uint64_t calls = 0;
};

// The raw step types are the public contract's (include/cellm/raw_step.h);
// a raw step's sequences are created through cache_control().
using ::cellm::RawTargetOutput;
using ::cellm::RawTargetStep;
static_assert(std::is_same_v<cache::SeqId, std::int32_t>,
              "RawTargetStep::seq_ids holds cache sequence ids");

class CudaExecutor final : public RawStepExecutor {
 public:
  ~CudaExecutor() override;

  // Validates the program (batching_spec §4.1 translated; each malformed
  // program gets InvalidProgram naming the method or constant) and builds the
  // cell cache. `max_sessions` counts every resident session, clones
  // included, and each reserves `max_session_tokens` cells; together they must
  // fit in get_offgraph_kv_max_cells minus the scratch cell
  // (InvalidArgument otherwise). `max_session_tokens = 0` divides the pool
  // evenly across sessions, capped by the context length. Methods load in
  // initialize().
  // `speculation` with a proposer turns on speculative decoding for small
  // decode batches (speculation.h).
  static Result<std::unique_ptr<CudaExecutor>> create(std::shared_ptr<program::Program> program,
                                                      int max_sessions, int max_session_tokens,
                                                      SpeculationOptions speculation = {});

  int max_session_tokens() const override { return max_session_tokens_; }
  std::int64_t vocab_size() const override { return vocab_size_; }
  // The widest method's step; a wider batch runs as several forwards.
  std::size_t preferred_batch_tokens() const override {
    return static_cast<std::size_t>(methods_.back().max_tokens);
  }

  // Binds the cache and loads every forward and sampler method, on the
  // thread that will run them. False (logged) on any failure.
  bool initialize() override;

  std::optional<SessionId> open_session() override;
  void close_session(SessionId session) override;
  std::optional<SessionId> clone(SessionId source, Position upto) override;
  void set_sampling(SessionId session, const SamplingParams& params,
                    std::optional<std::uint64_t> seed) override;
  // A session without a policy samples greedily.
  bool execute(const BatchInput& batch, BatchOutput& out) override;

  // The raw surface for model adapters (RawStepExecutor, raw_step.h). For
  // sample_rows, all-greedy rows of device logits take sample_argmax when
  // the program has it.
  bool execute_raw(const RawTargetStep& step,
                   const std::function<bool(const RawTargetOutput&)>& consume) override;
  std::optional<std::vector<Token>> argmax_rows(const Tensor& logits, std::size_t rows) override;
  std::optional<std::vector<Token>> sample_rows(const Tensor& logits, std::size_t rows,
                                                const std::vector<float>& params) override;

  program::Program& program() { return *program_; }
  cache::CellCache& cache_control() { return *cache_; }
  OffGraphKVMetrics kv_metrics() const;
  // Cells holding tokens and cells that can (scratch excluded), as of the
  // last engine-thread call that could change them. The one method safe
  // from any thread: a server's /metrics reads it while the engine steps.
  struct KvCells {
    std::int64_t used = 0;
    std::int64_t total = 0;
  };
  KvCells published_kv_cells() const {
    return {kv_cells_used_.load(std::memory_order_relaxed), kv_cells_total_};
  }
  // Speculative decoding's totals; nullopt when it is off. Any thread.
  std::optional<SpeculationCounters> speculation_counters() const {
    if (!speculation_) return std::nullopt;
    return speculation_->counters();
  }
  // Every forward method, narrowest first (dynamic last), with its calls.
  std::vector<ForwardMethodCalls> method_calls() const;
  // Whether the program samples (device logits go to its `sample` method).
  bool samples_on_device() const { return has_sampler_; }
  // False only for a program whose `sample` has no suppressed-ids input.
  // Valid from create() on: both facts come from the program's metadata and
  // initialize() changes neither. Conservative: a program that exports
  // `sample` but returns host logits (seen only at the first forward) samples
  // on the host, which could suppress, yet is answered false.
  bool can_suppress_tokens() const override { return !has_sampler_ || sampler_suppresses_; }
  // Selector rows the dynamic method needs at least.
  int min_selected_rows() const { return min_selected_rows_; }

 private:
  // What inspect() learned from the program.
  struct Plan {
    std::int64_t vocab = 0;
    int max_session_tokens = 0;
    int max_sessions = 0;
    std::int32_t max_cells = 0;
    std::vector<program::ForwardMethod> methods;
    int min_selected_rows = 1;
    bool has_sampler = false;
    bool sampler_suppresses = false;  // `sample` declares the suppressed-ids input
    bool has_argmax = false;
    bool has_penalizer = false;  // `sample_penalize` (logit adjustments on the device)
    bool has_masker = false;     // `sample_mask` (constrained decoding on the device)
    bool has_logprobs = false;   // `sample_logprobs` (logprobs of device draws)
    std::uint64_t kv_cell_bytes = 0;
  };
  CudaExecutor(std::shared_ptr<program::Program> program, std::shared_ptr<cache::CellCache> cache,
               const Plan& plan);
  static Result<Plan> inspect(const program::Program& program, int max_sessions,
                              int max_session_tokens);

  // Runs the slice's forward; `selector` is the unpadded row list.
  Result<ForwardOutputs> run_slice(const program::StepSlice& slice,
                                   std::span<const std::int64_t> tokens,
                                   std::span<const std::int64_t> positions,
                                   std::span<const cache::SeqId> seq_ids,
                                   std::vector<std::int64_t> selector);
  // Tokens for the first `rows` rows of device logits through the program.
  // `suppressed`: empty, or i64 [rows, kMaxSuppressedTokens] ids (-1: none)
  // passed to the sample method as its optional third input.
  Result<std::vector<Token>> run_device_sampler(const Tensor& logits, std::size_t rows,
                                                const std::vector<float>& params, bool all_greedy,
                                                const std::vector<std::int64_t>& suppressed = {});
  // Draws one token per session's row; where a session's policy asks for
  // logprobs, fills its entry of `logprobs` (resized to sessions.size();
  // other entries are left empty).
  Result<std::vector<Token>> sample_outputs(const Tensor& logits,
                                            const std::vector<SessionId>& sessions,
                                            std::vector<std::optional<TokenLogprobs>>& logprobs);
  // The logprobs of device draws through the program's sample_logprobs, for
  // the rows whose sessions ask; nothing when none does.
  Status logprobs_on_device(const Tensor& logits, const std::vector<SessionId>& sessions,
                            const std::vector<Token>& tokens,
                            const std::vector<std::int64_t>& suppressed,
                            std::vector<std::optional<TokenLogprobs>>& logprobs);
  // Runs the program's sample_logprobs over the first ids.size() rows of
  // `logits` (params and suppressed as that method takes them); fills
  // `logprobs` (resized to the rows) for every row whose count is >= 0.
  Status run_logprobs_method(const Tensor& logits, const std::vector<float>& params,
                             const std::vector<std::int64_t>& ids,
                             const std::vector<std::int64_t>& suppressed,
                             std::vector<std::optional<TokenLogprobs>>& logprobs);
  // The prompt rows of a slice (SamplingParams::prompt_logprobs): rows
  // relative to the slice whose next token the input's payload holds.
  struct PromptRows {
    std::vector<std::int64_t> rows;
    std::vector<SessionId> sessions;
    std::vector<Token> next;            // the token each row scores
    std::vector<std::int32_t> counts;   // top alternatives per row
  };
  PromptRows prompt_rows(const BatchInput& batch, std::int64_t offset, std::int64_t length) const;
  // Scores the prompt rows, which sit at logits rows first.., on the device
  // through sample_logprobs at temperature 0, on the host through
  // sampling::row_logprobs; queues them in pending_prompt_ until the
  // session's output carries them.
  Status score_prompt(const Tensor& logits, std::size_t first, const PromptRows& prompt);
  // Adjusts the rows of device logits whose sessions' policies ask for it
  // (bias, penalties, min_p) through the program's sample_penalize, in
  // groups of at most kPenalizeMaxEntries entries; nothing when none does.
  Status penalize_on_device(const Tensor& logits, const std::vector<SessionId>& sessions);
  // Applies the token masks of constrained sessions' rows of device logits
  // through the program's sample_mask (before penalties, as the host does),
  // in groups of at most kMaskMaxRows rows; nothing when no row has one.
  Status mask_on_device(const Tensor& logits, const std::vector<SessionId>& sessions);
  Status check_logits_home(const Tensor& logits);
  // Speculation (cuda_executor_speculate.cpp). plan_drafts picks the inputs
  // to draft for (drafted_), appends their drafts to the packed step and
  // takes their rows out of its logit indices; it leaves drafted_ empty when
  // the step is not one to speculate in. resolve_drafts samples the drafted
  // rows, which follow the plain rows from `first_row` on, keeps the agreed
  // prefix, rewinds the rest and fills the drafted inputs' outputs.
  bool speculates(SessionId sid) const;
  void plan_drafts(const BatchInput& batch, PackedStep& step);
  Status resolve_drafts(const Tensor& logits, std::size_t first_row, BatchOutput& out);
  Status resolve_drafts_on_device(const Tensor& logits, std::size_t first_row, BatchOutput& out);
  // Ends a drafted input's round: rewinds what was not accepted, counts it
  // and gives the input its output.
  void end_round(const DraftedInput& drafted, std::size_t accepted, Output output,
                 BatchOutput& out);
  // Hands a proposer that wants taps (DraftProposer::wants_taps) the tap of
  // each output's last kept row in this slice: the drafted inputs' (after
  // resolve_drafts, `plain` empty) or the plain `plain` inputs'. Host taps
  // [width, D] of the slice starting at `offset` only.
  void hand_taps(const Tensor& taps, std::int64_t offset, const std::vector<std::size_t>& plain,
                 const PackedStep& step, const BatchOutput& out);
  void publish_kv_cells();

  std::shared_ptr<program::Program> program_;
  std::shared_ptr<cache::CellCache> cache_;
  std::int64_t vocab_size_;
  int max_session_tokens_;
  // Sorted by max_tokens ascending; the dynamic method, if any, is last.
  std::vector<program::ForwardMethod> methods_;
  std::vector<std::uint64_t> calls_;
  int min_selected_rows_;
  std::uint64_t kv_cell_bytes_;
  SessionTable sessions_;
  bool has_sampler_;
  bool sampler_suppresses_;
  bool has_argmax_;
  bool has_penalizer_;
  // The step path's buffers, reused from step to step: the forward's inputs,
  // the rows' sessions and the device sampler's params and suppressed ids.
  ForwardScratch forward_scratch_;
  std::vector<SessionId> step_sessions_;
  std::vector<float> sample_params_;
  std::vector<std::int64_t> sample_suppressed_;
  bool has_masker_;
  std::vector<std::uint32_t> mask_words_;  // mask_on_device's staging
  bool has_logprobs_;
  // penalize_on_device's staging (reused from step to step).
  std::vector<sampling::PenaltyEntry> penalty_entries_;
  std::vector<sampling::PenaltyEntry> penalty_row_entries_;
  std::vector<float> penalty_rows_;
  std::vector<std::int32_t> penalty_offsets_;
  // Where the first sampled logits lived. Host and device sampling advance
  // separate generators, so every later forward must agree.
  std::optional<bool> device_logits_;
  std::unique_ptr<Speculation> speculation_;  // null: off
  std::vector<DraftedInput> drafted_;          // this step's drafted inputs
  std::vector<SessionId> draft_sessions_;      // resolve's row -> session
  std::vector<float> tap_scratch_;             // hand_taps' row
  // Prompt scores waiting for their session's next output (a chunked
  // prompt's rows come over several steps); dropped when it closes.
  std::unordered_map<SessionId, std::vector<TokenLogprobs>> pending_prompt_;
  bool initialized_ = false;
  bool raw_executing_ = false;
  std::atomic<std::int64_t> kv_cells_used_{0};
  std::int64_t kv_cells_total_ = 0;  // fixed at creation
};

}  // namespace cellm::executor
