#include "chat/lexer.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>

#include "chat/utf8.h"

namespace cellm::chat {

std::string located(SourcePos pos, std::string_view message) {
  return fmt::format("chat template {}:{}: {}", pos.line, pos.column, message);
}

namespace {

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}

// Jinja splits the source on any newline sequence and rejoins with "\n",
// dropping one trailing newline (keep_trailing_newline is off).
std::string normalize_source(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Length of the Python-whitespace run starting at `i`.
std::size_t space_run(std::string_view s, std::size_t i) {
  std::size_t j = i;
  while (j < s.size()) {
    std::size_t k = j;
    if (!utf8::is_space(utf8::next(s, k))) break;
    j = k;
  }
  return j - i;
}

std::string rstrip_spaces(std::string_view s) {
  return utf8::strip(s, std::nullopt, false, true);
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {
    line_starts_.push_back(0);
    for (std::size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  Result<std::vector<Token>> run() {
    std::size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      const std::size_t tag = find_tag(pos);
      std::string text = src_.substr(pos, tag - pos);
      if (tag == src_.size()) {
        emit_text(std::move(text), pos);
        break;
      }
      const char type = src_[tag + 1];  // '{', '%' or '#'
      const char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign == '-') {
        text = rstrip_spaces(text);
      } else if (sign != '+' && type != '{') {
        // lstrip_blocks: drop the indentation before a block or comment tag
        // that starts its line.
        const std::size_t nl = text.rfind('\n');
        const std::size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
            space_run(text, l_pos) == text.size() - l_pos) {
          text.resize(l_pos);
        }
      }
      emit_text(std::move(text), pos);
      const std::size_t body = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      Result<std::size_t> next = type == '#' ? comment(tag, body) : expression_tag(type, tag, body);
      if (!next.ok()) return next.status();
      pos = *next;
      line_starting = line_starting_;
    }
    Token eof;
    eof.kind = TokenKind::kEof;
    eof.pos = pos_of(src_.size());
    out_.push_back(std::move(eof));
    return std::move(out_);
  }

 private:
  // Tokens are emitted left to right, so columns are counted on from the
  // previous position (a megabyte-long line must not cost a rescan per token).
  SourcePos pos_of(std::size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const std::size_t line = static_cast<std::size_t>(it - line_starts_.begin());
    std::size_t start = line_starts_[line - 1];
    std::size_t column = 1;
    if (cached_line_ == line && cached_offset_ <= offset) {
      start = cached_offset_;
      column = cached_column_;
    }
    column += utf8::length(std::string_view(src_).substr(start, offset - start));
    cached_line_ = line;
    cached_offset_ = offset;
    cached_column_ = column;
    SourcePos p;
    p.line = static_cast<std::uint32_t>(line);
    p.column = static_cast<std::uint32_t>(column);
    return p;
  }

  Status error(std::size_t offset, std::string_view message) const {
    return invalid_argument("{}", located(pos_of(offset), message));
  }

  std::size_t find_tag(std::size_t from) const {
    for (std::size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return src_.size();
  }

  void emit_text(std::string text, std::size_t offset) {
    if (text.empty()) return;
    Token t;
    t.kind = TokenKind::kText;
    t.text = std::move(text);
    t.pos = pos_of(offset);
    out_.push_back(std::move(t));
  }

  void emit(TokenKind kind, std::size_t offset, std::string text = {}) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    t.pos = pos_of(offset);
    out_.push_back(std::move(t));
  }

  // After a closing delimiter: `-` eats all following whitespace; a plain
  // block or comment end eats one newline (trim_blocks).
  std::size_t after_close(std::size_t pos, char sign, bool trims) {
    line_starting_ = false;
    if (sign == '-') {
      const std::size_t n = space_run(src_, pos);
      if (n > 0) line_starting_ = src_[pos + n - 1] == '\n';
      return pos + n;
    }
    if (sign != '+' && trims && pos < src_.size() && src_[pos] == '\n') {
      line_starting_ = true;
      return pos + 1;
    }
    return pos;
  }

  Result<std::size_t> comment(std::size_t tag, std::size_t body) {
    const std::size_t end = src_.find("#}", body);
    if (end == std::string::npos) return error(tag, "unterminated comment: missing '#}'");
    const char sign = end > body && src_[end - 1] == '-' ? '-' : '\0';
    return after_close(end + 2, sign, true);
  }

  // Recognizes "{% raw %}" (with optional -/+ signs); returns the offset past it.
  std::optional<std::pair<std::size_t, char>> raw_begin(std::size_t body) const {
    std::size_t i = body;
    while (i < src_.size() && is_ascii_space(src_[i])) ++i;
    if (src_.compare(i, 3, "raw") != 0) return std::nullopt;
    i += 3;
    if (i < src_.size() && is_name_char(src_[i])) return std::nullopt;
    while (i < src_.size() && is_ascii_space(src_[i])) ++i;
    char sign = '\0';
    if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) sign = src_[i++];
    if (src_.compare(i, 2, "%}") != 0) return std::nullopt;
    return std::make_pair(i + 2, sign);
  }

  Result<std::size_t> raw_block(std::size_t tag, std::size_t start, char begin_sign) {
    std::size_t content_begin = start;
    if (begin_sign == '-') content_begin += space_run(src_, start);
    for (std::size_t i = src_.find("{%", content_begin); i != std::string::npos;
         i = src_.find("{%", i + 2)) {
      std::size_t j = i + 2;
      char open_sign = '\0';
      if (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) open_sign = src_[j++];
      while (j < src_.size() && is_ascii_space(src_[j])) ++j;
      if (src_.compare(j, 6, "endraw") != 0) continue;
      j += 6;
      while (j < src_.size() && is_ascii_space(src_[j])) ++j;
      char close_sign = '\0';
      if (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) close_sign = src_[j++];
      if (src_.compare(j, 2, "%}") != 0) continue;
      std::string content = src_.substr(content_begin, i - content_begin);
      if (open_sign == '-') content = rstrip_spaces(content);
      emit_text(std::move(content), content_begin);
      return after_close(j + 2, close_sign, true);
    }
    return error(tag, "unterminated '{% raw %}' block: missing '{% endraw %}'");
  }

  Result<std::size_t> expression_tag(char type, std::size_t tag, std::size_t body) {
    const bool block = type == '%';
    if (block) {
      if (auto raw = raw_begin(body)) return raw_block(tag, raw->first, raw->second);
    }
    emit(block ? TokenKind::kBlockBegin : TokenKind::kVarBegin, tag);
    int balance = 0;
    std::size_t i = body;
    while (true) {
      while (i < src_.size() && is_ascii_space(src_[i])) ++i;
      if (i >= src_.size()) {
        return error(tag,
                     block ? "unterminated tag: missing '%}'" : "unterminated tag: missing '}}'");
      }
      if (balance == 0) {
        const std::string_view rest = std::string_view(src_).substr(i);
        const std::string_view close = block ? "%}" : "}}";
        char sign = '\0';
        std::size_t len = 0;
        if (rest.substr(0, 2) == close) {
          len = 2;
        } else if (rest.size() >= 3 && (rest[0] == '-' || (block && rest[0] == '+')) &&
                   rest.substr(1, 2) == close) {
          sign = rest[0];
          len = 3;
        }
        if (len > 0) {
          emit(block ? TokenKind::kBlockEnd : TokenKind::kVarEnd, i);
          return after_close(i + len, sign, block);
        }
      }
      CELLM_ASSIGN_OR_RETURN(i, expression_token(i, balance));
    }
  }

  Result<std::size_t> expression_token(std::size_t i, int& balance) {
    const char c = src_[i];
    if (c == '\'' || c == '"') return string_literal(i);
    if (is_digit(c)) return number(i);
    if (is_name_start(c)) {
      std::size_t j = i;
      while (j < src_.size() && is_name_char(src_[j])) ++j;
      emit(TokenKind::kName, i, src_.substr(i, j - i));
      return j;
    }
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwo) {
      if (src_.compare(i, 2, op) == 0) {
        emit(TokenKind::kOperator, i, std::string(op));
        return i + 2;
      }
    }
    static constexpr std::string_view kOne = "+-/*%~[](){}><=.:|,;";
    if (kOne.find(c) != std::string_view::npos) {
      if (c == '(' || c == '[' || c == '{') ++balance;
      if ((c == ')' || c == ']' || c == '}') && balance > 0) --balance;
      emit(TokenKind::kOperator, i, std::string(1, c));
      return i + 1;
    }
    std::size_t k = i;
    const char32_t cp = utf8::next(src_, k);
    std::string shown;
    utf8::append(shown, cp);
    return error(i, fmt::format("unexpected character '{}' in expression", shown));
  }

  Result<std::size_t> number(std::size_t i) {
    const bool after_dot =
        !out_.empty() && out_.back().kind == TokenKind::kOperator && out_.back().text == ".";
    const auto digits = [&](std::size_t j, auto pred) {
      while (j < src_.size() &&
             (pred(src_[j]) || (src_[j] == '_' && j + 1 < src_.size() && pred(src_[j + 1])))) {
        ++j;
      }
      return j;
    };
    std::string clean;
    const auto keep = [&](std::size_t a, std::size_t b) {
      for (std::size_t k = a; k < b; ++k) {
        if (src_[k] != '_') clean.push_back(src_[k]);
      }
    };
    if (src_[i] == '0' && i + 1 < src_.size() &&
        std::string_view("xXoObB").find(src_[i + 1]) != std::string_view::npos) {
      const char p = static_cast<char>(src_[i + 1] | 0x20);
      const int base = p == 'x' ? 16 : p == 'o' ? 8 : 2;
      const auto is_base_digit = [base](char d) {
        if (base == 16) return is_digit(d) || ((d | 0x20) >= 'a' && (d | 0x20) <= 'f');
        return d >= '0' && d < static_cast<char>('0' + base);
      };
      const std::size_t end = digits(i + 2, is_base_digit);
      keep(i + 2, end);
      std::int64_t v = 0;
      auto r = std::from_chars(clean.data(), clean.data() + clean.size(), v, base);
      if (clean.empty() || r.ec != std::errc())
        return error(i, "invalid or too large integer literal");
      emit(TokenKind::kInt, i);
      out_.back().int_value = v;
      return end;
    }
    std::size_t j = digits(i, is_digit);
    keep(i, j);
    bool is_float = false;
    if (!after_dot && j + 1 < src_.size() && src_[j] == '.' && is_digit(src_[j + 1])) {
      const std::size_t f = digits(j + 1, is_digit);
      keep(j, f);
      j = f;
      is_float = true;
    }
    if (!after_dot && j < src_.size() && (src_[j] == 'e' || src_[j] == 'E')) {
      std::size_t e = j + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && is_digit(src_[e])) {
        const std::size_t end = digits(e, is_digit);
        keep(j, end);
        j = end;
        is_float = true;
      }
    }
    if (is_float) {
      emit(TokenKind::kFloat, i);
      out_.back().float_value = std::strtod(clean.c_str(), nullptr);
    } else {
      std::int64_t v = 0;
      auto r = std::from_chars(clean.data(), clean.data() + clean.size(), v);
      if (r.ec != std::errc())
        return error(i, "integer literal is too large (64-bit integers only)");
      emit(TokenKind::kInt, i);
      out_.back().int_value = v;
    }
    return j;
  }

  // A quoted string with Python's unicode-escape rules.
  Result<std::size_t> string_literal(std::size_t start) {
    const char quote = src_[start];
    std::string value;
    std::size_t i = start + 1;
    while (true) {
      if (i >= src_.size()) return error(start, "unterminated string literal");
      const char c = src_[i];
      if (c == quote) break;
      if (c != '\\') {
        value.push_back(c);
        ++i;
        continue;
      }
      if (i + 1 >= src_.size()) return error(start, "unterminated string literal");
      const char e = src_[i + 1];
      i += 2;
      switch (e) {
        case '\n': continue;
        case '\\': value.push_back('\\'); continue;
        case '\'': value.push_back('\''); continue;
        case '"': value.push_back('"'); continue;
        case 'a': value.push_back('\a'); continue;
        case 'b': value.push_back('\b'); continue;
        case 'f': value.push_back('\f'); continue;
        case 'n': value.push_back('\n'); continue;
        case 'r': value.push_back('\r'); continue;
        case 't': value.push_back('\t'); continue;
        case 'v': value.push_back('\v'); continue;
        default: break;
      }
      if (e >= '0' && e <= '7') {
        char32_t cp = static_cast<char32_t>(e - '0');
        for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k, ++i) {
          cp = cp * 8 + static_cast<char32_t>(src_[i] - '0');
        }
        utf8::append(value, cp);
        continue;
      }
      if (e == 'x' || e == 'u' || e == 'U') {
        const std::size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        std::uint32_t cp = 0;
        const char* first = src_.data() + i;
        auto r = std::from_chars(first, first + std::min(n, src_.size() - i), cp, 16);
        if (r.ec != std::errc() || static_cast<std::size_t>(r.ptr - first) != n) {
          return error(i - 2, fmt::format("truncated \\{} escape in string literal", e));
        }
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
          return error(i - 2, "string literal escape is not a valid Unicode scalar value");
        }
        utf8::append(value, cp);
        i += n;
        continue;
      }
      if (e == 'N') return error(i - 2, "\\N{...} escapes are not supported");
      // Python keeps unknown escapes as written; a non-ASCII character after
      // the backslash comes out in its backslashreplace spelling.
      value.push_back('\\');
      if (static_cast<unsigned char>(e) >= 0x80) {
        std::size_t k = i - 1;
        const char32_t cp = utf8::next(src_, k);
        char buf[16];
        std::snprintf(buf, sizeof(buf),
                      cp < 0x100     ? "x%02x"
                      : cp < 0x10000 ? "u%04x"
                                     : "U%08x",
                      static_cast<unsigned>(cp));
        value += buf;
        i = k;
      } else {
        value.push_back(e);
      }
    }
    emit(TokenKind::kString, start, std::move(value));
    return i + 1;
  }

  std::string src_;
  std::vector<std::size_t> line_starts_;
  std::vector<Token> out_;
  bool line_starting_ = false;
  mutable std::size_t cached_line_ = 0;
  mutable std::size_t cached_offset_ = 0;
  mutable std::size_t cached_column_ = 1;
};

}  // namespace

Result<std::vector<Token>> lex_template(std::string_view source) {
  if (auto bad = utf8::find_invalid(source)) {
    return invalid_argument("chat template is not valid UTF-8 (byte offset {})", *bad);
  }
  Lexer lexer(normalize_source(source));
  return lexer.run();
}

}  // namespace cellm::chat
