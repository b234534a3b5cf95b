// Engine sizing: how long a session may grow (the context) and how many
// requests run at once, from the model's context, the KV pool and, on the CPU,
// the machine's memory. A pure function so every rule is unit-tested; the
// Engine calls it once at load and logs its summary.
//
// The rules:
//   - context: --max-session-tokens when given (at most the model's), else the
//     model's own, lowered only when memory cannot hold kMinAutoSessions
//     sessions of it;
//   - sessions: --max-sessions when given, else kDefaultSessions or as many
//     as the pool holds at that context, whichever is fewer;
//   - snapshot sessions (prefix-cache entries, and per request a prompt
//     snapshot) come on top of the request sessions, so they never take an
//     admission slot.
// A CUDA pool is fixed by device memory before sizing, and every session
// (snapshots included) reserves a full context in it. Without flags it keeps
// kDefaultSessions and divides the pool, up to the model's context, giving up
// sessions only to keep kMinPoolContext tokens each. The CPU pool is chosen
// here and committed only as cells are first written (calloc), so only the
// request sessions' contexts are held to the RAM budget: snapshots share
// their source's cells.
//
// Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
#include <string>

#include "cellm/status.h"

namespace cellm::app {

inline constexpr std::int32_t kDefaultSessions = 64;
// Below this many sessions of the model's context, an automatic size lowers
// the context instead.
inline constexpr std::int32_t kMinAutoSessions = 4;
// A device pool divided among the default sessions keeps at least this many
// tokens a session (or the model's context, when shorter).
inline constexpr std::int32_t kMinPoolContext = 2048;

struct SizingRequest {
  std::int64_t model_context = 0;   // the model's max_position_embeddings
  std::int32_t sessions = 0;        // --max-sessions; 0: automatic
  std::int32_t session_tokens = 0;  // --max-session-tokens; 0: the model's context
  // Snapshot sessions beyond the request sessions: fixed ones (prefix-cache
  // entries) plus per_request_snapshots for each request session.
  std::int32_t fixed_snapshots = 0;
  std::int32_t per_request_snapshots = 0;
  // Either the pool the backend already built (cells, scratch excluded) ...
  std::int64_t pool_cells = 0;
  // ... or, when pool_cells is 0, the memory the request sessions' KV may
  // take and the bytes of one cell (the pool is then chosen here).
  std::uint64_t memory_budget_bytes = 0;
  std::uint64_t cell_bytes = 0;
  std::int32_t max_step = 0;  // widest forward; a chosen pool is made wider than it
};

struct Sizing {
  std::int32_t sessions = 0;           // request sessions (the admission limit)
  std::int32_t snapshot_sessions = 0;  // on top of them
  std::int32_t context = 0;            // tokens per session
  std::int64_t pool_cells = 0;         // scratch excluded
  bool pool_chosen = false;            // chosen here (CPU: committed as cells fill)
  std::string context_reason;          // "the model's", "--max-session-tokens", "memory ..."
  std::string sessions_reason;

  std::int32_t total_sessions() const { return sessions + snapshot_sessions; }
};

Result<Sizing> size_engine(const SizingRequest& request);

// One line for the start-up log: "context 8192 (the model's), 64 sessions
// (the default) + 80 for snapshots, pool of N cells = X GiB".
std::string sizing_summary(const Sizing& sizing, std::uint64_t cell_bytes);

// Physical memory of this machine in bytes (0 when unknown).
std::uint64_t physical_memory_bytes();

}  // namespace cellm::app
