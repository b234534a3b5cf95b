#include "server/json_prefix.h"

namespace cellm::server {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

bool is_hex(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

}  // namespace

JsonPrefixScanner::Step JsonPrefixScanner::fail() {
  mode_ = Mode::kFailed;
  Step s;
  s.ok = false;
  return s;
}

JsonPrefixScanner::Step JsonPrefixScanner::push(char c) {
  switch (mode_) {
    case Mode::kDone:
    case Mode::kFailed: return fail();
    case Mode::kString: {
      const auto b = static_cast<unsigned char>(c);
      if (utf8_left_ > 0) {
        if (b < utf8_lo_ || b > utf8_hi_) return fail();
        --utf8_left_;
        utf8_lo_ = 0x80;
        utf8_hi_ = 0xBF;
        return {};
      }
      if (b >= 0x80) return utf8_lead(b) ? Step{} : fail();
      if (need_low_ && c != '\\') return fail();  // a high surrogate needs its low half
      if (c == '"') {
        Step s;
        s.ends = true;
        s.key = string_is_key_;
        s.level = depth();
        mode_ = string_is_key_ ? Mode::kColon : after_value();
        return s;
      }
      if (c == '\\') {
        mode_ = Mode::kEscape;
      } else if (static_cast<unsigned char>(c) < 0x20) {
        return fail();  // raw control characters must be escaped
      }
      return {};
    }
    case Mode::kEscape: {
      static constexpr std::string_view kSimple = "\"\\/bfnrt";
      if (c == 'u') {
        mode_ = Mode::kHex;
        hex_left_ = 4;
        code_ = 0;
      } else if (need_low_) {
        return fail();
      } else if (kSimple.find(c) != std::string_view::npos) {
        mode_ = Mode::kString;
      } else {
        return fail();
      }
      return {};
    }
    case Mode::kHex: {
      if (!is_hex(c)) return fail();
      const int digit = is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10;
      code_ = code_ * 16 + digit;
      if (--hex_left_ > 0) return {};
      mode_ = Mode::kString;
      // UTF-16 surrogates come in pairs (\uD83D\uDE00); a lone half is not
      // a character, and parsers (nlohmann's) refuse it.
      const bool high = code_ >= 0xD800 && code_ <= 0xDBFF;
      const bool low = code_ >= 0xDC00 && code_ <= 0xDFFF;
      if (need_low_ != low) return fail();
      need_low_ = high;
      return {};
    }
    case Mode::kLiteral: {
      if (c != literal_rest_.front()) return fail();
      literal_rest_.remove_prefix(1);
      if (!literal_rest_.empty()) return {};
      Step s;
      s.ends = true;
      s.level = depth();
      mode_ = after_value();
      return s;
    }
    case Mode::kNumber:
      if (number_continues(c)) return {};
      if (!number_can_end()) return fail();
      mode_ = after_value();
      if (mode_ == Mode::kDone) return fail();  // nothing may follow a top-level value
      return structural(c);
    default: return structural(c);
  }
}

JsonPrefixScanner::Step JsonPrefixScanner::structural(char c) {
  if (is_space(c)) return {};
  switch (mode_) {
    case Mode::kValueOrClose:
      if (c == ']') return close_container();
      return begin_value(c);
    case Mode::kValue: return begin_value(c);
    case Mode::kKeyOrClose:
    case Mode::kKey: {
      if (c == '}' && mode_ == Mode::kKeyOrClose) return close_container();
      if (c != '"') return fail();
      Step s;
      s.begins = true;
      s.key = true;
      s.level = depth();
      string_is_key_ = true;
      mode_ = Mode::kString;
      return s;
    }
    case Mode::kColon:
      if (c != ':') return fail();
      mode_ = Mode::kValue;
      return {};
    case Mode::kAfterValue: {
      const bool object = stack_.back() == '{';
      if (c == ',') {
        mode_ = object ? Mode::kKey : Mode::kValue;
        return {};
      }
      if (c == (object ? '}' : ']')) return close_container();
      return fail();
    }
    default: return fail();
  }
}

JsonPrefixScanner::Step JsonPrefixScanner::begin_value(char c) {
  Step s;
  s.begins = true;
  s.level = depth();
  switch (c) {
    case '{':
      stack_.push_back('{');
      mode_ = Mode::kKeyOrClose;
      return s;
    case '[':
      stack_.push_back('[');
      mode_ = Mode::kValueOrClose;
      return s;
    case '"':
      string_is_key_ = false;
      mode_ = Mode::kString;
      return s;
    case 't': literal_rest_ = "rue"; break;
    case 'f': literal_rest_ = "alse"; break;
    case 'n': literal_rest_ = "ull"; break;
    case '-': num_ = Num::kMinus; break;
    case '0': num_ = Num::kZero; break;
    default:
      if (c < '1' || c > '9') return fail();
      num_ = Num::kInt;
      break;
  }
  mode_ = literal_rest_.empty() ? Mode::kNumber : Mode::kLiteral;
  return s;
}

JsonPrefixScanner::Step JsonPrefixScanner::close_container() {
  stack_.pop_back();
  Step s;
  s.ends = true;
  s.level = depth();
  mode_ = after_value();
  return s;
}

bool JsonPrefixScanner::utf8_lead(unsigned char b) {
  // RFC 3629: no overlong forms, no encoded surrogates, nothing past U+10FFFF.
  utf8_lo_ = 0x80;
  utf8_hi_ = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) {
    utf8_left_ = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    utf8_left_ = 2;
    if (b == 0xE0) utf8_lo_ = 0xA0;
    if (b == 0xED) utf8_hi_ = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    utf8_left_ = 3;
    if (b == 0xF0) utf8_lo_ = 0x90;
    if (b == 0xF4) utf8_hi_ = 0x8F;
  } else {
    return false;
  }
  return !need_low_;  // a high surrogate's escape must be followed by its low half
}

bool JsonPrefixScanner::number_continues(char c) {
  const bool digit = is_digit(c);
  const bool exp = c == 'e' || c == 'E';
  switch (num_) {
    case Num::kMinus:
      if (!digit) return false;
      num_ = c == '0' ? Num::kZero : Num::kInt;
      return true;
    case Num::kZero:
    case Num::kInt:
      if (digit && num_ == Num::kInt) return true;
      if (c == '.')
        num_ = Num::kDot;
      else if (exp)
        num_ = Num::kExp;
      else
        return false;
      return true;
    case Num::kDot:
      if (!digit) return false;
      num_ = Num::kFrac;
      return true;
    case Num::kFrac:
      if (digit) return true;
      if (!exp) return false;
      num_ = Num::kExp;
      return true;
    case Num::kExp:
      if (c == '+' || c == '-')
        num_ = Num::kExpSign;
      else if (digit)
        num_ = Num::kExpDigits;
      else
        return false;
      return true;
    case Num::kExpSign:
      if (!digit) return false;
      num_ = Num::kExpDigits;
      return true;
    case Num::kExpDigits: return digit;
  }
  return false;
}

bool JsonPrefixScanner::number_can_end() const {
  return num_ == Num::kZero || num_ == Num::kInt || num_ == Num::kFrac || num_ == Num::kExpDigits;
}

}  // namespace cellm::server
