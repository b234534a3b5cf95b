// The draft model of `--speculate draft --draft-model PATH`: loads it
// through the same path as the target (create_executor, on the target's
// backend and CPU program), with a cell cache of its own sized for a few
// sessions, and wraps it in a DraftModelProposer (executor/
// draft_model_proposer.h), which refuses a vocabulary unlike the target's.
//
// Thread-safety: load_draft_proposer may run on any thread (the engine loads
// it before the target's executor, so that on CUDA the draft's small pool is
// taken before the target's pool claims its share of free memory); the
// proposer it returns belongs to the target executor's engine thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "cellm/status.h"
#include "executor/draft_model_proposer.h"
#include "program/program_options.h"

namespace cellm::app {

struct DraftModelOptions {
  std::filesystem::path model;  // Hugging Face folder or .gguf file
  std::string backend = "auto";
  std::string cpu_program;      // as CudaExecutorConfig::cpu_program
  std::int32_t threads = 0;
  program::ProgramOptions program;  // the target's; the pool and taps are set here
  // Draft sessions at once: the target's steps with more outputs than
  // SpeculationOptions::max_batch do not speculate, so a few suffice.
  std::int32_t sessions = 4;
  // Tokens a draft session holds at most (0: kDraftContextCap), never more
  // than the draft model's context. Longer target sessions decode without
  // drafts once they outgrow it.
  std::int32_t session_tokens = 0;
};

// The default cap of a draft session's tokens (modest: the draft's pool is
// its sessions times this).
inline constexpr std::int32_t kDraftContextCap = 16384;

// The option pair's rules, checked before anything loads: "draft" needs a
// draft model that exists, and a draft model needs "draft". InvalidArgument
// naming the flags (--speculate, --draft-model) otherwise.
Status check_speculation_options(const std::string& speculate,
                                 const std::filesystem::path& draft_model);

// InvalidArgument for an unreadable path or a vocabulary size other than
// `target_vocab` (naming both); the loader's error for a model it cannot read.
Result<std::shared_ptr<executor::DraftModelProposer>> load_draft_proposer(
    const DraftModelOptions& options, std::int64_t target_vocab);

}  // namespace cellm::app
