#include "app/sizing.h"

#include <algorithm>
#include <limits>

#include <unistd.h>

#include <fmt/format.h>

namespace cellm::app {
namespace {

constexpr std::int64_t kIntMax = std::numeric_limits<std::int32_t>::max();

// What the pool (or the memory budget) must hold for r request sessions of
// c tokens, and its inverses. In pool mode every session reserves a whole
// context, snapshots included: the executor admits only sessions x context
// <= pool, though a prompt snapshot shares its request's cells. In budget
// mode only the request sessions count (see sizing.h).
struct Capacity {
  bool pool_mode = true;
  std::int64_t cells = 0;  // the pool, or the budget in cells
  std::int64_t fixed = 0;
  std::int64_t per = 0;

  std::int64_t weight(std::int64_t r) const { return pool_mode ? r * (1 + per) + fixed : r; }
  bool fits(std::int64_t r, std::int64_t c) const { return weight(r) * c <= cells; }
  std::int64_t sessions_at(std::int64_t c) const {
    const std::int64_t slots = cells / c;
    if (!pool_mode) return slots;
    return slots <= fixed ? 0 : (slots - fixed) / (1 + per);
  }
  std::int64_t context_at(std::int64_t r) const { return cells / weight(r); }
  std::string what() const {
    return pool_mode ? fmt::format("the KV pool holds {} cells", cells)
                     : fmt::format("memory allows {} cells", cells);
  }
};

std::int32_t to_int(std::int64_t v) {
  return static_cast<std::int32_t>(std::clamp<std::int64_t>(v, 0, kIntMax));
}

}  // namespace

Result<Sizing> size_engine(const SizingRequest& q) {
  if (q.model_context <= 0) {
    return invalid_argument("the model publishes no context length ({}); pass --max-session-tokens",
                            q.model_context);
  }
  if (q.sessions < 0 || q.session_tokens < 0 || q.fixed_snapshots < 0 ||
      q.per_request_snapshots < 0) {
    return invalid_argument("sizing: negative sessions {}, tokens {} or snapshots {}+{}",
                            q.sessions, q.session_tokens, q.fixed_snapshots,
                            q.per_request_snapshots);
  }
  if (q.session_tokens > q.model_context) {
    return invalid_argument(
        "--max-session-tokens {} exceeds the model's context of {} tokens: use at most {} (or 0 "
        "for the model's own)",
        q.session_tokens, q.model_context, q.model_context);
  }
  Capacity cap;
  cap.fixed = q.fixed_snapshots;
  cap.per = q.per_request_snapshots;
  if (q.pool_cells > 0) {
    cap.cells = q.pool_cells;
  } else {
    cap.pool_mode = false;
    cap.cells = q.memory_budget_bytes > 0 && q.cell_bytes > 0
                    ? static_cast<std::int64_t>(q.memory_budget_bytes / q.cell_bytes)
                    : std::numeric_limits<std::int64_t>::max() / 4;  // unknown: no memory cap
  }

  Sizing out;
  std::int64_t r = q.sessions;
  std::int64_t c = q.session_tokens;
  if (r > 0 && c > 0) {
    if (!cap.fits(r, c)) {
      const std::int64_t c_ok = cap.context_at(r);
      const std::int64_t r_ok = cap.sessions_at(c);
      std::string fix;
      if (c_ok > 0) fix = fmt::format("use --max-session-tokens {}", c_ok);
      if (r_ok > 0) fix += fmt::format("{}--max-sessions {}", fix.empty() ? "use " : " or ", r_ok);
      if (fix.empty()) fix = "lower both";
      return out_of_resources(
          "--max-sessions {} with --max-session-tokens {} need {} cells of KV but {}: {}", r, c,
          cap.weight(r) * c, cap.what(), fix);
    }
    out.context_reason = "--max-session-tokens";
    out.sessions_reason = "--max-sessions";
  } else if (r > 0) {
    c = std::min(q.model_context, cap.context_at(r));
    if (c < 1) {
      const std::int64_t r_ok = cap.sessions_at(1);
      return out_of_resources("--max-sessions {} leaves no room for a single token ({}): {}", r,
                              cap.what(),
                              r_ok > 0 ? fmt::format("use at most --max-sessions {}", r_ok)
                                       : std::string("the pool is too small for any session"));
    }
    out.context_reason = c == q.model_context
                             ? std::string("the model's")
                             : fmt::format("{} over {} sessions", cap.what(), r);
    out.sessions_reason = "--max-sessions";
  } else if (c > 0) {
    r = std::min<std::int64_t>(kDefaultSessions, cap.sessions_at(c));
    if (r < 1) {
      const std::int64_t c_ok = cap.context_at(1);
      return out_of_resources(
          "--max-session-tokens {} does not fit one session ({}): {}", c, cap.what(),
          c_ok > 0 ? fmt::format("use at most --max-session-tokens {}", c_ok)
                   : std::string("the pool is too small for any session"));
    }
    out.context_reason = "--max-session-tokens";
    out.sessions_reason =
        r == kDefaultSessions ? "the default" : fmt::format("as many as fit: {}", cap.what());
  } else if (cap.pool_mode) {
    // A pool fixed by device memory serves many requests at once: keep the
    // default sessions and divide the pool among them (the executor's own
    // rule), up to the model's context; only when that leaves less than
    // kMinPoolContext tokens a session do fewer sessions get longer contexts.
    r = kDefaultSessions;
    c = std::min(q.model_context, cap.context_at(r));
    out.sessions_reason = "the default";
    out.context_reason =
        c == q.model_context
            ? std::string("the model's")
            : fmt::format("{} over {} sessions and their snapshots; the model's is {}",
                          cap.what(), r, q.model_context);
    const std::int64_t floor = std::min<std::int64_t>(q.model_context, kMinPoolContext);
    if (c < floor) {
      r = std::max<std::int64_t>(cap.sessions_at(floor), 1);
      c = std::min(q.model_context, cap.context_at(r));
      if (c < 1) {
        return out_of_resources(
            "the KV pool cannot hold one session ({}): free device memory or pass a smaller "
            "--max-session-tokens",
            cap.what());
      }
      out.sessions_reason = fmt::format("as many as fit at {} tokens: {}", floor, cap.what());
      out.context_reason = c == q.model_context
                               ? std::string("the model's")
                               : fmt::format("{} over {} sessions", cap.what(), r);
    }
  } else {
    c = q.model_context;
    r = std::min<std::int64_t>(kDefaultSessions, cap.sessions_at(c));
    out.context_reason = "the model's";
    out.sessions_reason =
        r == kDefaultSessions ? "the default" : fmt::format("as many as fit: {}", cap.what());
    if (r < kMinAutoSessions) {
      r = kMinAutoSessions;
      c = std::min(q.model_context, cap.context_at(r));
      if (c < 1) {
        return out_of_resources(
            "the KV memory cannot hold {} sessions ({}): pass a smaller --max-sessions and "
            "--max-session-tokens",
            r, cap.what());
      }
      out.context_reason = fmt::format("{} over {} sessions", cap.what(), r);
      out.sessions_reason = "the fewest sessions the automatic size keeps";
    }
  }
  const std::int64_t snapshots = q.fixed_snapshots + q.per_request_snapshots * r;
  if ((r + snapshots) * c > kIntMax) {
    return out_of_resources(
        "{} sessions ({} for snapshots) x {} tokens overflow the cell index: lower "
        "--max-sessions or --max-session-tokens",
        r + snapshots, snapshots, c);
  }
  out.sessions = to_int(r);
  out.snapshot_sessions = to_int(snapshots);
  out.context = to_int(c);
  out.pool_chosen = !cap.pool_mode;
  out.pool_cells = cap.pool_mode ? q.pool_cells
                                 : std::max<std::int64_t>((r + snapshots) * c, q.max_step);
  if (!cap.pool_mode && out.pool_cells + 1 > kIntMax) {
    return out_of_resources("a pool of {} cells overflows the cell index: lower --max-sessions "
                            "or --max-session-tokens",
                            out.pool_cells);
  }
  return out;
}

std::string sizing_summary(const Sizing& s, std::uint64_t cell_bytes) {
  const double gib = static_cast<double>(s.pool_cells) * static_cast<double>(cell_bytes) /
                     (1024.0 * 1024.0 * 1024.0);
  return fmt::format(
      "context {} ({}), {} sessions ({}) + {} for prefix snapshots, pool of {} cells = {:.2f} "
      "GiB{}",
      s.context, s.context_reason, s.sessions, s.sessions_reason, s.snapshot_sessions,
      s.pool_cells, gib, s.pool_chosen ? " (reserved; memory is committed as cells fill)" : "");
}

std::uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
}

}  // namespace cellm::app
