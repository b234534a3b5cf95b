// Status and Result<T>: the recoverable error channel of every cellm API.
//
// A Status is either OK (no allocation) or a code plus a message that names
// what was wrong (the session, position, tensor or file involved) and, where
// it helps, what to do. Codes map one-to-one onto HTTP statuses so the server
// can answer without translating. Invariant violations are not Statuses: they
// abort through CELLM_CHECK (core/check.h).
//
// Thread-safety: values; safe to copy and move between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

namespace cellm {

enum class StatusCode : std::uint8_t {
  kOk = 0,
  kInvalidArgument,   // 400: the caller sent something malformed or inconsistent
  kNotFound,          // 404: a named thing (file, session, method) does not exist
  kOutOfResources,    // 429: capacity (cells, sessions, queue) is exhausted
  kCancelled,         // 499: the caller gave up
  kInternal,          // 500: a bug or an impossible state
  kInvalidProgram,    // 500: a program/model exports malformed methods or constants
  kInvalidType,       // 500: an object lacks a required interface
  kDataLoss,          // 422: a file is corrupt or truncated
  kNotSupported,      // 501: valid input that this build does not implement
  kUnavailable,       // 503: not ready yet (loading) or shutting down
  kDeadlineExceeded,  // 504: a timeout elapsed
};

// The HTTP status code the server answers for `code`.
int http_status(StatusCode code);
// "invalid_argument", "out_of_resources", ...: stable names for logs and JSON.
std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);
  Status(const Status& other);
  Status& operator=(const Status& other);
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;
  ~Status() = default;

  static Status ok() { return Status(); }

  bool is_ok() const { return state_ == nullptr; }
  StatusCode code() const { return state_ ? state_->code : StatusCode::kOk; }
  std::string_view message() const {
    return state_ ? std::string_view(state_->message) : std::string_view();
  }
  // "invalid_argument: session 3: position 7 leaves a gap after 5".
  std::string to_string() const;
  // The same code with "context: " put before the message; OK stays OK.
  Status with_context(std::string_view context) const;

  // Marks a status as deliberately ignored.
  void ignore() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code() == b.code() && a.message() == b.message();
  }

 private:
  struct State {
    StatusCode code;
    std::string message;
  };
  std::unique_ptr<State> state_;  // null means OK: success costs nothing
};

// Factories with fmt-style messages: invalid_argument("session {} is not open", sid).
#define CELLM_STATUS_FACTORY(fn, code)                                                 \
  template <typename... Args>                                                          \
  Status fn(fmt::format_string<Args...> format, Args&&... args) {                      \
    return Status(StatusCode::code, fmt::format(format, std::forward<Args>(args)...)); \
  }
CELLM_STATUS_FACTORY(invalid_argument, kInvalidArgument)
CELLM_STATUS_FACTORY(not_found, kNotFound)
CELLM_STATUS_FACTORY(out_of_resources, kOutOfResources)
CELLM_STATUS_FACTORY(cancelled, kCancelled)
CELLM_STATUS_FACTORY(internal_error, kInternal)
CELLM_STATUS_FACTORY(invalid_program, kInvalidProgram)
CELLM_STATUS_FACTORY(invalid_type, kInvalidType)
CELLM_STATUS_FACTORY(data_loss, kDataLoss)
CELLM_STATUS_FACTORY(not_supported, kNotSupported)
CELLM_STATUS_FACTORY(unavailable, kUnavailable)
CELLM_STATUS_FACTORY(deadline_exceeded, kDeadlineExceeded)
#undef CELLM_STATUS_FACTORY

// A value or the Status that explains its absence.
template <typename T>
class [[nodiscard]] Result {
  static_assert(!std::is_same_v<std::decay_t<T>, Status>, "Result<Status> is meaningless");

 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (status_.is_ok()) {
      status_ = Status(StatusCode::kInternal, "Result built from an OK status without a value");
    }
  }
  template <typename U, typename = std::enable_if_t<std::is_convertible_v<U&&, T> &&
                                                    !std::is_same_v<std::decay_t<U>, Status> &&
                                                    !std::is_same_v<std::decay_t<U>, T>>>
  Result(U&& value) : value_(T(std::forward<U>(value))) {}  // NOLINT

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T&& operator*() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

  template <typename U>
  T value_or(U&& fallback) const& {
    return ok() ? *value_ : T(std::forward<U>(fallback));
  }

 private:
  std::optional<T> value_;
  Status status_;
};

namespace detail {
inline const Status& status_of(const Status& s) {
  return s;
}
template <typename T>
const Status& status_of(const Result<T>& r) {
  return r.status();
}
}  // namespace detail

}  // namespace cellm

#define CELLM_CONCAT_INNER(a, b) a##b
#define CELLM_CONCAT(a, b) CELLM_CONCAT_INNER(a, b)

// Returns the Status of `expr` (a Status or Result) from the caller when it is not OK.
// Pass the Result itself, not `.status()` of a temporary (that reference dangles).
#define CELLM_RETURN_IF_ERROR(expr)                              \
  do {                                                           \
    auto&& cellm_status_or_ = (expr);                            \
    if (!::cellm::detail::status_of(cellm_status_or_).is_ok()) { \
      return ::cellm::detail::status_of(cellm_status_or_);       \
    }                                                            \
  } while (false)

// CELLM_ASSIGN_OR_RETURN(auto x, make_x()): binds the value or returns the error.
#define CELLM_ASSIGN_OR_RETURN(lhs, expr) \
  CELLM_ASSIGN_OR_RETURN_IMPL(CELLM_CONCAT(cellm_result_, __LINE__), lhs, expr)
#define CELLM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) {                                  \
    return tmp.status();                            \
  }                                                 \
  lhs = std::move(tmp).value()
