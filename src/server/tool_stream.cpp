#include "server/tool_stream.h"

#include <nlohmann/json.hpp>

namespace cellm::server {
namespace {

// The string a JSON string literal (quotes included) stands for.
std::string decode_string(const std::string& literal) {
  const nlohmann::json v = nlohmann::json::parse(literal, nullptr, /*allow_exceptions=*/false);
  return v.is_string() ? v.get<std::string>() : std::string();
}

}  // namespace

CallReader::State CallReader::invalid() {
  state_ = State::kInvalid;
  return state_;
}

CallReader::State CallReader::push(char c) {
  if (state_ != State::kReading) return invalid();
  const JsonPrefixScanner::Step step = scanner_.push(c);
  if (!step.ok) return invalid();
  if (step.begins && step.level == 0 && c != '{') return invalid();  // a call is an object
  // A member of the call object (level 1) begins: its key, then its value.
  if (step.begins && step.level == 1) {
    if (step.key) {
      role_ = Role::kKey;
      raw_.clear();
    } else {
      begin_member_value(c);
      if (state_ == State::kInvalid) return state_;
    }
  }
  switch (role_) {
    case Role::kKey:
    case Role::kName:
    case Role::kQuotedArgs: raw_ += c; break;
    case Role::kObjectArgs: arguments_ += c; break;
    case Role::kNone:
    case Role::kOther: break;
  }
  if (step.ends && step.level == 1) {
    if (step.key) {
      key_ = decode_string(raw_);
      role_ = Role::kNone;
    } else {
      end_member_value();
      if (state_ == State::kInvalid) return state_;
    }
  }
  if (step.ends && step.level == 0) {
    if (!named()) return invalid();  // JSON, but not a call
    if (!args_seen_) arguments_ = "{}";
    state_ = State::kComplete;
  }
  return state_;
}

void CallReader::begin_member_value(char c) {
  raw_.clear();
  role_ = Role::kOther;
  if (key_ == "name" && !named()) {
    if (c != '"') {
      invalid();
      return;
    }
    role_ = Role::kName;
  } else if ((key_ == "arguments" || key_ == "parameters") && !args_seen_) {
    args_seen_ = true;
    if (c == '{') {
      role_ = Role::kObjectArgs;
    } else if (c == '"') {
      role_ = Role::kQuotedArgs;
    } else {
      invalid();
    }
  }
}

void CallReader::end_member_value() {
  switch (role_) {
    case Role::kName:
      name_ = decode_string(raw_);
      if (name_.empty()) invalid();
      break;
    case Role::kQuotedArgs: {
      std::string text = decode_string(raw_);
      const nlohmann::json v = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (!v.is_object()) {
        invalid();
        return;
      }
      arguments_ = std::move(text);
      break;
    }
    default: break;
  }
  role_ = Role::kNone;
}

}  // namespace cellm::server
