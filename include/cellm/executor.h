// Executor: the seam between the runner and whatever runs a forward.
//
// An executor owns session identity and each session's sequence state (the
// committed positions, i.e. its KV), runs a batch of inputs as one or more
// forwards and samples a token for every input that asks for output.
//
// Session-state contract: a session's length is the absolute position of its
// next token (0 when fresh). Every input commits its slice; an
// output-producing input also commits all but the last token of its Output
// (the last one is the model's prediction, committed only when fed back). An
// input starting below the session's length rewinds to that start first; one
// starting above it leaves a gap and fails the whole batch.
//
// Thread-safety: every method is called on the runner's engine thread only;
// implementations need no locking and must never call back into the runner.
#pragma once

#include <cstddef>
#include <optional>

#include "cellm/types.h"

namespace cellm {

class Executor {
 public:
  virtual ~Executor() = default;

  // One-time set-up before any other call. False: the runner admits no work.
  virtual bool initialize() { return true; }

  // Tokens at which one execute() is a single pass over the weights (0 = no
  // preference). Wider batches are accepted and split.
  virtual std::size_t preferred_batch_tokens() const { return 0; }

  // A new empty session; nullopt at capacity. Ids are never reused.
  virtual std::optional<SessionId> open_session() = 0;
  // Unknown ids are ignored, so closing twice is harmless.
  virtual void close_session(SessionId session) = 0;

  // An independently writable copy of source's committed [0, upto), with no
  // sampling policy. Nullopt when unsupported, out of range or at capacity; a
  // failure leaves the source unchanged and retains nothing.
  virtual std::optional<SessionId> clone(SessionId /*source*/, Position /*upto*/) {
    return std::nullopt;
  }

  // Installs the policy for the next tasks of `session`; nullopt seed means
  // nondeterministic. Unknown sessions are ignored.
  virtual void set_sampling(SessionId session, const SamplingParams& params,
                            std::optional<std::uint64_t> seed) = 0;

  // Whether a policy's suppressed ids (min_new_tokens) can be honoured. A host
  // sampler always can; a device sampler only if its method takes them. The
  // answer is fixed once the executor is constructed: the Runner reads it then,
  // from its own thread, to let servers refuse such requests up front.
  virtual bool can_suppress_tokens() const { return true; }

  // Whether prepared inputs of this kind can be consumed (metadata only).
  virtual bool accepts(const PreparedInput& /*input*/) const { return false; }

  // Runs the batch. out.outputs is resized to batch.inputs.size() and entry i
  // is set exactly when input i has produce_output. False: the whole batch
  // failed and the runner poisons every session in it.
  virtual bool execute(const BatchInput& batch, BatchOutput& out) = 0;
};

}  // namespace cellm
