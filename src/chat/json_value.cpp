#include "chat/json_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace cellm::chat {
namespace {

void append_json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out.push_back('"');
  for (std::size_t i = 0; i < s.size();) {
    const char32_t cp = utf8::next(s, i);
    char buf[16];
    switch (cp) {
      case U'"': out += "\\\""; continue;
      case U'\\': out += "\\\\"; continue;
      case U'\n': out += "\\n"; continue;
      case U'\r': out += "\\r"; continue;
      case U'\t': out += "\\t"; continue;
      case U'\b': out += "\\b"; continue;
      case U'\f': out += "\\f"; continue;
      default: break;
    }
    if (cp < 0x20 || (ensure_ascii && cp >= 0x7F)) {
      if (cp >= 0x10000) {
        const char32_t v = cp - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                      static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      }
      out += buf;
    } else {
      utf8::append(out, cp);
    }
  }
  out.push_back('"');
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonDumpOptions& o) : o_(o) {}

  Status write(const Value& v, int level) {
    switch (v.kind()) {
      case ValueKind::kNone: out_ += "null"; return Status::ok();
      case ValueKind::kBool: out_ += v.as_bool() ? "true" : "false"; return Status::ok();
      case ValueKind::kInt: out_ += std::to_string(v.as_int()); return Status::ok();
      case ValueKind::kFloat: {
        const double d = v.as_float();
        if (std::isnan(d)) {
          out_ += "NaN";
        } else if (std::isinf(d)) {
          out_ += d < 0 ? "-Infinity" : "Infinity";
        } else {
          out_ += format_python_float(d);
        }
        return Status::ok();
      }
      case ValueKind::kString:
        append_json_string(out_, v.as_string(), o_.ensure_ascii);
        return Status::ok();
      case ValueKind::kArray: {
        const auto& items = v.as_array().items;
        if (items.empty()) {
          out_ += "[]";
          return Status::ok();
        }
        out_.push_back('[');
        for (std::size_t i = 0; i < items.size(); ++i) {
          if (i) out_ += o_.item_separator;
          newline(level + 1);
          CELLM_RETURN_IF_ERROR(write(items[i], level + 1));
        }
        newline(level);
        out_.push_back(']');
        return Status::ok();
      }
      case ValueKind::kObject: {
        const auto& entries = v.as_object().entries;
        if (entries.empty()) {
          out_ += "{}";
          return Status::ok();
        }
        std::vector<const std::pair<std::string, Value>*> order;
        for (const auto& e : entries) order.push_back(&e);
        if (o_.sort_keys) {
          std::stable_sort(order.begin(), order.end(),
                           [](const auto* a, const auto* b) { return a->first < b->first; });
        }
        out_.push_back('{');
        for (std::size_t i = 0; i < order.size(); ++i) {
          if (i) out_ += o_.item_separator;
          newline(level + 1);
          append_json_string(out_, order[i]->first, o_.ensure_ascii);
          out_ += o_.key_separator;
          CELLM_RETURN_IF_ERROR(write(order[i]->second, level + 1));
        }
        newline(level);
        out_.push_back('}');
        return Status::ok();
      }
      case ValueKind::kUndefined:
      case ValueKind::kNamespace:
      case ValueKind::kFunction: break;
    }
    return invalid_argument("Object of type {} is not JSON serializable", type_name(v));
  }

  std::string take() { return std::move(out_); }

 private:
  void newline(int level) {
    if (!o_.indent) return;
    out_.push_back('\n');
    for (int i = 0; i < level; ++i) out_ += *o_.indent;
  }

  const JsonDumpOptions& o_;
  std::string out_;
};

}  // namespace

Result<std::string> dump_json(const Value& v, const JsonDumpOptions& options) {
  JsonWriter writer(options);
  CELLM_RETURN_IF_ERROR(writer.write(v, 0));
  return writer.take();
}

}  // namespace cellm::chat
