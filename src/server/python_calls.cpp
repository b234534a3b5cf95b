#include "server/python_calls.h"

#include <cctype>

#include <nlohmann/json.hpp>

namespace cellm::server {
namespace {

using json = nlohmann::ordered_json;

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

class PythonCalls {
 public:
  explicit PythonCalls(std::string_view s) : s_(s) {}

  std::optional<std::vector<ParsedCall>> parse() {
    std::vector<ParsedCall> calls;
    skip();
    const bool list = eat('[');
    while (true) {
      skip();
      if (list && eat(']')) break;
      if (!list && pos_ == s_.size()) break;
      std::optional<ParsedCall> call = parse_call();
      if (!call) return std::nullopt;
      calls.push_back(std::move(*call));
      skip();
      if (list) {
        if (eat(',')) continue;
        if (!eat(']')) return std::nullopt;
        break;
      }
      eat(',') || eat(';');
    }
    skip();
    if (pos_ != s_.size() || calls.empty()) return std::nullopt;
    return calls;
  }

 private:
  void skip() {
    while (pos_ < s_.size() && is_space(s_[pos_])) ++pos_;
  }
  bool eat(char c) {
    skip();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  std::string identifier(bool dotted) {
    skip();
    std::size_t start = pos_;
    while (pos_ < s_.size()) {
      const auto c = static_cast<unsigned char>(s_[pos_]);
      const bool ok = std::isalpha(c) != 0 || c == '_' ||
                      (pos_ > start && (std::isdigit(c) != 0 || (dotted && c == '.')));
      if (!ok) break;
      ++pos_;
    }
    return std::string(s_.substr(start, pos_ - start));
  }

  std::optional<ParsedCall> parse_call() {
    std::string name = identifier(/*dotted=*/true);
    if (name.empty() || !eat('(')) return std::nullopt;
    if (name == "print") {  // ```tool_code print(f(x=1)) ```
      std::optional<ParsedCall> inner = parse_call();
      if (!inner || !eat(')')) return std::nullopt;
      return inner;
    }
    json args = json::object();
    while (!eat(')')) {
      std::string key = identifier(/*dotted=*/false);
      if (key.empty() || !eat('=')) return std::nullopt;  // positional: names unknown
      std::optional<json> value = parse_value(0);
      if (!value) return std::nullopt;
      args[key] = std::move(*value);
      if (!eat(',')) {
        if (!eat(')')) return std::nullopt;
        break;
      }
    }
    return ParsedCall{std::move(name), args.dump()};
  }

  std::optional<json> parse_value(int depth) {
    if (depth > 64) return std::nullopt;
    skip();
    if (pos_ >= s_.size()) return std::nullopt;
    const char c = s_[pos_];
    if (c == '"' || c == '\'') return parse_string();
    if (c == '[' || c == '(') return parse_sequence(c == '[' ? ']' : ')', depth);
    if (c == '{') return parse_dict(depth);
    if (c == '-' || c == '+' || c == '.' || std::isdigit(static_cast<unsigned char>(c)) != 0) {
      return parse_number();
    }
    const std::string word = identifier(/*dotted=*/false);
    if (word == "True") return json(true);
    if (word == "False") return json(false);
    if (word == "None") return json(nullptr);
    return std::nullopt;
  }

  std::optional<json> parse_string() {
    const char quote = s_[pos_++];
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != quote) {
      char c = s_[pos_++];
      if (c == '\\') {
        if (pos_ >= s_.size()) return std::nullopt;
        c = s_[pos_++];
        switch (c) {
          case 'n': out += '\n'; break;
          case 't': out += '\t'; break;
          case 'r': out += '\r'; break;
          case '0': out += '\0'; break;
          default: out += c; break;  // \\ \' \" and the rest: the byte itself
        }
      } else {
        out += c;
      }
    }
    if (pos_ >= s_.size()) return std::nullopt;
    ++pos_;
    return json(std::move(out));
  }

  std::optional<json> parse_number() {
    std::size_t start = pos_;
    if (s_[pos_] == '-' || s_[pos_] == '+') ++pos_;
    bool real = false;
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (std::isdigit(static_cast<unsigned char>(c)) != 0) {
        ++pos_;
      } else if (c == '.' || c == 'e' || c == 'E') {
        real = true;
        ++pos_;
        if ((c == 'e' || c == 'E') && pos_ < s_.size() && (s_[pos_] == '-' || s_[pos_] == '+')) {
          ++pos_;
        }
      } else {
        break;
      }
    }
    // Python spellings JSON lacks: a leading '+', ".5", "5.".
    std::string_view digits = s_.substr(start, pos_ - start);
    std::string text;
    if (!digits.empty() && (digits[0] == '+' || digits[0] == '-')) {
      if (digits[0] == '-') text += '-';
      digits.remove_prefix(1);
    }
    if (!digits.empty() && digits[0] == '.') text += '0';
    text += digits;
    if (!text.empty() && text.back() == '.') text += '0';
    json v = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!v.is_number() || (!real && !v.is_number_integer())) return std::nullopt;
    return v;
  }

  std::optional<json> parse_sequence(char close, int depth) {
    ++pos_;
    json out = json::array();
    while (!eat(close)) {
      std::optional<json> v = parse_value(depth + 1);
      if (!v) return std::nullopt;
      out.push_back(std::move(*v));
      if (!eat(',')) {
        if (!eat(close)) return std::nullopt;
        break;
      }
    }
    return out;
  }

  std::optional<json> parse_dict(int depth) {
    ++pos_;
    json out = json::object();
    while (!eat('}')) {
      std::optional<json> key = parse_value(depth + 1);
      if (!key || !(key->is_string() || key->is_number()) || !eat(':')) return std::nullopt;
      std::optional<json> v = parse_value(depth + 1);
      if (!v) return std::nullopt;
      out[key->is_string() ? key->get<std::string>() : key->dump()] = std::move(*v);
      if (!eat(',')) {
        if (!eat('}')) return std::nullopt;
        break;
      }
    }
    return out;
  }

  std::string_view s_;
  std::size_t pos_ = 0;
};

}  // namespace

std::optional<std::vector<ParsedCall>> parse_python_calls(std::string_view text) {
  return PythonCalls(text).parse();
}

}  // namespace cellm::server
