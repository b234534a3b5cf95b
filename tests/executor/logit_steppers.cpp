#include "logit_steppers.h"

#include <algorithm>
#include <map>
#include <utility>

namespace cellm::executor::testing {
namespace {

std::size_t argmax(const std::vector<float>& row) {
  return static_cast<std::size_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

// Per-token inputs for execute(): every token asks for output, so every row
// comes back; the executor's positions come from the session lengths.
BatchInput per_token_batch(std::span<const StreamToken> tokens,
                           std::map<StreamId, Position>& next) {
  BatchInput batch;
  for (const StreamToken& t : tokens) {
    Input in;
    in.sid = t.stream;
    in.produce_output = true;
    in.size = 1;
    in.payload = std::make_shared<const std::vector<Token>>(1, static_cast<Token>(t.token));
    in.position = next[t.stream]++;
    batch.inputs.push_back(std::move(in));
  }
  return batch;
}

// The executor's greedy tokens must be the argmax of the rows it was given.
Status check_sampled(const BatchOutput& out, const Rows& rows) {
  if (out.outputs.size() != rows.size()) {
    return internal_error("{} outputs for {} rows", out.outputs.size(), rows.size());
  }
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (!out.outputs[i] || out.outputs[i]->tokens.size() != 1) {
      return internal_error("input {} got no single-token output", i);
    }
    if (out.outputs[i]->tokens[0] != argmax(rows[i])) {
      return internal_error("input {} sampled token {} but its row's argmax is {}", i,
                            out.outputs[i]->tokens[0], argmax(rows[i]));
    }
  }
  return Status::ok();
}

// Shared session bookkeeping of the two execute() steppers.
template <typename Ex>
class SessionStepper : public LogitStepper {
 public:
  SessionStepper(std::shared_ptr<RecordingProgram> program, std::unique_ptr<Ex> ex)
      : program_(std::move(program)), ex_(std::move(ex)) {}

  std::optional<StreamId> open() override {
    auto sid = ex_->open_session();
    if (sid) next_[*sid] = 0;
    return sid;
  }
  std::optional<StreamId> clone(StreamId source, std::int32_t upto) override {
    auto sid = ex_->clone(source, upto);
    if (sid) next_[*sid] = upto;
    return sid;
  }
  void close(StreamId stream) override {
    ex_->close_session(stream);
    next_.erase(stream);
  }
  OffGraphKVMetrics kv_metrics() const override { return ex_->kv_metrics(); }
  cache::CellCache& cache() override { return ex_->cache_control(); }

  Result<Rows> step(std::span<const StreamToken> tokens) override {
    std::map<StreamId, Position> next = next_;
    const BatchInput batch = per_token_batch(tokens, next);
    program_->take_calls();
    BatchOutput out;
    if (!ex_->execute(batch, out)) return internal_error("{}: execute() failed", name());
    Rows rows;
    for (RecordingProgram::Call& call : program_->take_calls()) {
      const std::size_t real = real_rows(call);
      for (std::size_t r = 0; r < real; ++r) rows.push_back(std::move(call.logits[r]));
    }
    if (rows.size() != tokens.size()) {
      return internal_error("{}: {} logits rows for {} tokens", name(), rows.size(), tokens.size());
    }
    CELLM_RETURN_IF_ERROR(check_sampled(out, rows));
    next_ = std::move(next);
    return rows;
  }

 protected:
  // Every token asks for output, so a forward's selector is 0, 1, ...,
  // length - 1 followed by padding that repeats the last entry.
  static std::size_t real_rows(const RecordingProgram::Call& call) {
    std::size_t r = 0;
    while (r < call.selector.size() && r < call.logits.size() &&
           call.selector[r] == static_cast<std::int64_t>(r)) {
      ++r;
    }
    return r;
  }

  std::shared_ptr<RecordingProgram> program_;
  std::unique_ptr<Ex> ex_;
  std::map<StreamId, Position> next_;
};

class ModuleStepper final : public SessionStepper<ModuleExecutor> {
 public:
  using SessionStepper::SessionStepper;
  std::string name() const override { return "module"; }
};

class CudaStepper final : public SessionStepper<CudaExecutor> {
 public:
  using SessionStepper::SessionStepper;
  std::string name() const override { return "cuda"; }
};

class RawStepper final : public LogitStepper {
 public:
  explicit RawStepper(std::unique_ptr<CudaExecutor> ex) : ex_(std::move(ex)) {}
  std::string name() const override { return "raw"; }
  cache::CellCache& cache() override { return ex_->cache_control(); }
  std::optional<StreamId> open() override { return ex_->cache_control().seq_new(); }
  std::optional<StreamId> clone(StreamId source, std::int32_t upto) override {
    return ex_->cache_control().seq_clone(static_cast<cache::SeqId>(source), upto);
  }
  void close(StreamId stream) override {
    ex_->cache_control().seq_rm(static_cast<cache::SeqId>(stream));
  }
  OffGraphKVMetrics kv_metrics() const override { return ex_->kv_metrics(); }

  Result<Rows> step(std::span<const StreamToken> tokens) override {
    cache::CellCache& cache = ex_->cache_control();
    RawTargetStep step;
    std::map<StreamId, std::int64_t> next;
    for (const StreamToken& t : tokens) {
      const auto seq = static_cast<cache::SeqId>(t.stream);
      auto [it, fresh] = next.try_emplace(t.stream, 0);
      if (fresh) it->second = cache.pos(seq);
      step.tokens.push_back(t.token);
      step.positions.push_back(it->second++);
      step.seq_ids.push_back(seq);
    }
    // Every row, last first: the rows must still map back to their tokens.
    const auto n = static_cast<std::int64_t>(tokens.size());
    for (std::int64_t i = n - 1; i >= 0; --i) step.logit_indices.push_back(i);
    Rows rows(tokens.size());
    std::size_t filled = 0;
    std::string bad;
    const bool ok = ex_->execute_raw(step, [&](const RawTargetOutput& out) {
      const std::int64_t v = out.logits.dim(1);
      if (out.logits.rank() != 2 ||
          static_cast<std::size_t>(out.logits.dim(0)) < out.selected_indices.size()) {
        bad = "logits " + out.logits.describe() + " cannot hold the selected rows";
        return false;
      }
      const float* data = out.logits.data_as<float>();
      for (std::size_t r = 0; r < out.selected_indices.size(); ++r) {
        const std::int64_t token = step.logit_indices.at(out.selected_indices[r]);
        if (token < out.offset || token >= out.offset + out.length) {
          bad = "a row of forward [" + std::to_string(out.offset) + ", +" +
                std::to_string(out.length) + ") answers token " + std::to_string(token);
          return false;
        }
        auto& row = rows[static_cast<std::size_t>(token)];
        if (!row.empty()) {
          bad = "token " + std::to_string(token) + " answered twice";
          return false;
        }
        row.assign(data + static_cast<std::int64_t>(r) * v,
                   data + static_cast<std::int64_t>(r + 1) * v);
        ++filled;
      }
      return true;
    });
    if (!bad.empty()) return internal_error("raw: {}", bad);
    if (!ok) return internal_error("raw: execute_raw() failed");
    if (filled != tokens.size()) {
      return internal_error("raw: {} rows came back for {} tokens", filled, tokens.size());
    }
    return rows;
  }

 private:
  std::unique_ptr<CudaExecutor> ex_;
};

}  // namespace

std::string stepper_kind_name(StepperKind kind) {
  switch (kind) {
    case StepperKind::kModule: return "module";
    case StepperKind::kCuda: return "cuda";
    case StepperKind::kRaw: return "raw";
  }
  return "unknown";
}

Result<std::unique_ptr<LogitStepper>> make_stepper(StepperKind kind,
                                                   std::shared_ptr<program::Program> program,
                                                   int max_sessions, int max_session_tokens) {
  auto recording = std::make_shared<RecordingProgram>(std::move(program));
  switch (kind) {
    case StepperKind::kModule: {
      CELLM_ASSIGN_OR_RETURN(std::unique_ptr<ModuleExecutor> ex,
                             ModuleExecutor::create(recording, max_sessions, max_session_tokens));
      if (!ex->initialize()) return internal_error("ModuleExecutor::initialize() failed");
      return std::unique_ptr<LogitStepper>(new ModuleStepper(recording, std::move(ex)));
    }
    case StepperKind::kCuda:
    case StepperKind::kRaw: {
      CELLM_ASSIGN_OR_RETURN(std::unique_ptr<CudaExecutor> ex,
                             CudaExecutor::create(recording, max_sessions, max_session_tokens));
      if (!ex->initialize()) return internal_error("CudaExecutor::initialize() failed");
      if (kind == StepperKind::kRaw)
        return std::unique_ptr<LogitStepper>(new RawStepper(std::move(ex)));
      return std::unique_ptr<LogitStepper>(new CudaStepper(recording, std::move(ex)));
    }
  }
  return internal_error("unknown stepper kind");
}

}  // namespace cellm::executor::testing
