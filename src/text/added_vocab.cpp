#include "text/added_vocab.h"

#include <algorithm>

#include "core/utf8.h"
#include "text/normalizer.h"

namespace cellm::text {
namespace {

// Approximates Rust regex's Unicode \w for the single_word rule: letters,
// digits, underscore, and any non-space character outside ASCII.
bool is_word_char(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') ||
           cp == '_';
  }
  return !is_unicode_space(cp);
}

char32_t last_char(std::string_view s) {
  std::size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  char32_t cp = 0;
  return utf8::decode(s, i, &cp) ? cp : 0;
}

char32_t first_char(std::string_view s) {
  char32_t cp = 0;
  return utf8::decode(s, 0, &cp) ? cp : 0;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  nodes_.emplace_back();
  for (std::size_t t = 0; t < tokens_.size(); ++t) {
    const std::string& c = tokens_[t].content;
    if (c.empty()) continue;
    first_byte_[static_cast<unsigned char>(c[0])] = true;
    std::int32_t node = 0;
    for (char ch : c) {
      const auto b = static_cast<unsigned char>(ch);
      std::int32_t next = child(node, b);
      if (next < 0) {
        next = static_cast<std::int32_t>(nodes_.size());
        auto& kids = nodes_[static_cast<std::size_t>(node)].children;
        kids.insert(std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, std::int32_t{-1})),
                    {b, next});
        nodes_.emplace_back();
      }
      node = next;
    }
    // The first token listed with a given content keeps it.
    if (nodes_[static_cast<std::size_t>(node)].token < 0) {
      nodes_[static_cast<std::size_t>(node)].token = static_cast<std::int32_t>(t);
    }
  }
}

std::int32_t AddedTokenMatcher::child(std::int32_t node, unsigned char b) const {
  const auto& kids = nodes_[static_cast<std::size_t>(node)].children;
  auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, std::int32_t{-1}));
  return it != kids.end() && it->first == b ? it->second : -1;
}

std::int32_t AddedTokenMatcher::longest_at(std::string_view s, std::size_t i,
                                           std::size_t* len) const {
  std::int32_t best = -1;
  std::int32_t node = 0;
  for (std::size_t j = i; j < s.size(); ++j) {
    node = child(node, static_cast<unsigned char>(s[j]));
    if (node < 0) break;
    const std::int32_t t = nodes_[static_cast<std::size_t>(node)].token;
    if (t >= 0) {
      best = t;
      *len = j + 1 - i;
    }
  }
  return best;
}

void AddedTokenMatcher::split(std::string_view s, std::vector<Segment>& out) const {
  std::size_t done = 0;  // everything before `done` is already in `out`
  std::size_t i = 0;
  while (i < s.size()) {
    if (!first_byte_[static_cast<unsigned char>(s[i])]) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    const std::int32_t t = longest_at(s, i, &len);
    if (t < 0) {
      ++i;
      continue;
    }
    const AddedToken& tok = tokens_[static_cast<std::size_t>(t)];
    std::size_t begin = i, end = i + len;
    if (tok.single_word) {
      const bool left_ok = begin == 0 || !is_word_char(last_char(s.substr(0, begin)));
      const bool right_ok = end == s.size() || !is_word_char(first_char(s.substr(end)));
      if (!left_ok || !right_ok) {
        i = end;  // the match is consumed without splitting, as HF's iterator does
        continue;
      }
    }
    if (tok.lstrip) {
      while (begin > done) {
        std::size_t k = begin - 1;
        while (k > done && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
        char32_t cp;
        if (utf8::decode(s, k, &cp) == 0 || !is_unicode_space(cp)) break;
        begin = k;
      }
    }
    if (tok.rstrip) {
      while (end < s.size()) {
        char32_t cp;
        const std::size_t n = utf8::decode(s, end, &cp);
        if (n == 0 || !is_unicode_space(cp)) break;
        end += n;
      }
    }
    if (begin > done) out.push_back(Segment{done, begin, -1});
    out.push_back(Segment{begin, end, tok.id});
    done = end;
    i = end;
  }
  if (done < s.size()) out.push_back(Segment{done, s.size(), -1});
}

}  // namespace cellm::text
