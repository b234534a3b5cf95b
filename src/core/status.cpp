#include "cellm/status.h"

namespace cellm {

int http_status(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return 200;
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kOutOfResources: return 429;
    case StatusCode::kCancelled: return 499;
    case StatusCode::kInternal: return 500;
    case StatusCode::kInvalidProgram: return 500;
    case StatusCode::kInvalidType: return 500;
    case StatusCode::kDataLoss: return 422;
    case StatusCode::kNotSupported: return 501;
    case StatusCode::kUnavailable: return 503;
    case StatusCode::kDeadlineExceeded: return 504;
  }
  return 500;
}

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kOutOfResources: return "out_of_resources";
    case StatusCode::kCancelled: return "cancelled";
    case StatusCode::kInternal: return "internal";
    case StatusCode::kInvalidProgram: return "invalid_program";
    case StatusCode::kInvalidType: return "invalid_type";
    case StatusCode::kDataLoss: return "data_loss";
    case StatusCode::kNotSupported: return "not_supported";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kDeadlineExceeded: return "deadline_exceeded";
  }
  return "unknown";
}

Status::Status(StatusCode code, std::string message) {
  if (code != StatusCode::kOk) {
    state_ = std::make_unique<State>(State{code, std::move(message)});
  }
}

Status::Status(const Status& other)
    : state_(other.state_ ? std::make_unique<State>(*other.state_) : nullptr) {}

Status& Status::operator=(const Status& other) {
  if (this != &other) {
    state_ = other.state_ ? std::make_unique<State>(*other.state_) : nullptr;
  }
  return *this;
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  return fmt::format("{}: {}", status_code_name(code()), message());
}

Status Status::with_context(std::string_view context) const {
  if (is_ok()) return Status();
  return Status(code(), fmt::format("{}: {}", context, message()));
}

}  // namespace cellm
