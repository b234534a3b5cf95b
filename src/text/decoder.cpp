#include "text/decoder.h"

#include "core/utf8.h"
#include "text/normalizer.h"
#include "text/pre_tokenizer.h"

namespace cellm::text {
namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// Each token's characters mapped back to bytes; a token with a character
// outside the table keeps its raw bytes (HF does the same).
std::string byte_level_decode(const std::vector<std::string>& tokens) {
  std::string out;
  std::string bytes;
  for (const std::string& t : tokens) {
    bytes.clear();
    bool ok = true;
    for (std::size_t i = 0; i < t.size() && ok;) {
      char32_t cp;
      const std::size_t n = utf8::decode(t, i, &cp);
      const int b = n == 0 ? -1 : byte_level_byte(cp);
      if (b < 0) {
        ok = false;
      } else {
        bytes.push_back(static_cast<char>(b));
        i += n;
      }
    }
    out += ok ? bytes : t;
  }
  return out;
}

void byte_fallback(std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  std::string run;
  std::size_t run_tokens = 0;
  auto flush = [&] {
    if (run_tokens == 0) return;
    if (utf8::is_valid(run)) {
      out.push_back(run);
    } else {
      out.insert(out.end(), run_tokens, utf8::encode(utf8::kReplacementChar));
    }
    run.clear();
    run_tokens = 0;
  };
  for (std::string& t : tokens) {
    const int b = parse_byte_token(t);
    if (b >= 0) {
      run.push_back(static_cast<char>(b));
      ++run_tokens;
    } else {
      flush();
      out.push_back(std::move(t));
    }
  }
  flush();
  tokens = std::move(out);
}

void strip(std::string& t, const std::string& ch, int start, int stop) {
  if (ch.empty()) return;
  std::size_t begin = 0, end = t.size();
  for (int i = 0; i < start && t.compare(begin, ch.size(), ch) == 0 && begin + ch.size() <= end;
       ++i) {
    begin += ch.size();
  }
  for (int i = 0;
       i < stop && end >= begin + ch.size() && t.compare(end - ch.size(), ch.size(), ch) == 0;
       ++i) {
    end -= ch.size();
  }
  t = t.substr(begin, end - begin);
}

}  // namespace

int parse_byte_token(const std::string& token) {
  if (token.size() != 6 || token[0] != '<' || token[1] != '0' || token[2] != 'x' ||
      token[5] != '>') {
    return -1;
  }
  const int hi = hex_digit(token[3]), lo = hex_digit(token[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

std::string DecoderChain::decode(std::vector<std::string> tokens, bool at_start) const {
  // After a step that joins everything, token 0 is the running text, so
  // start-of-text rules only hold when at_start.
  bool joined = false;
  for (const DecoderStep& step : steps_) {
    switch (step.kind) {
      case DecoderKind::kByteLevel:
        tokens = {byte_level_decode(tokens)};
        joined = true;
        break;
      case DecoderKind::kByteFallback: byte_fallback(tokens); break;
      case DecoderKind::kFuse: {
        std::string all;
        for (const auto& t : tokens) all += t;
        tokens = {std::move(all)};
        joined = true;
        break;
      }
      case DecoderKind::kStrip:
        for (std::size_t i = 0; i < tokens.size(); ++i) {
          const bool skip_start = joined && i == 0 && !at_start;
          strip(tokens[i], step.pattern, skip_start ? 0 : step.start, step.stop);
        }
        break;
      case DecoderKind::kReplace:
        for (auto& t : tokens) t = replace_all(t, step.pattern, step.content);
        break;
      case DecoderKind::kMetaspace:
        // HF drops every replacement character of the first token (not just
        // a leading one) unless the prepend scheme is "never".
        for (std::size_t i = 0; i < tokens.size(); ++i) {
          const bool first = i == 0 && at_start && step.prepend;
          tokens[i] = replace_all(tokens[i], step.pattern, first ? "" : " ");
        }
        break;
    }
  }
  std::string out;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (join_with_space_ && steps_.empty() && (i > 0 || !at_start)) out.push_back(' ');
    out += tokens[i];
  }
  return out;
}

bool DecoderChain::continues(const std::string& last_token) const {
  for (const DecoderStep& step : steps_) {
    if (step.kind == DecoderKind::kByteFallback) return parse_byte_token(last_token) >= 0;
  }
  return false;
}

}  // namespace cellm::text
