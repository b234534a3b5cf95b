#include "text/pre_tokenizer.h"

#include <algorithm>
#include <array>
#include <utility>

#include "core/utf8.h"
#include "text/normalizer.h"

namespace cellm::text {
namespace {

using Span = std::pair<std::size_t, std::size_t>;

// Applies HF's delimiter behaviour to `matches` (sorted, non-overlapping) in
// `s` and appends the resulting non-empty pieces to `out`.
void split_by_matches(const std::string& s, const std::vector<Span>& matches,
                      SplitBehavior behavior, bool invert, std::vector<std::string>& out) {
  // Every byte of s belongs to one entry, flagged as delimiter or not.
  std::vector<std::pair<Span, bool>> parts;
  std::size_t prev = 0;
  for (auto [b, e] : matches) {
    if (b > prev) parts.push_back({{prev, b}, invert});
    parts.push_back({{b, e}, !invert});
    prev = e;
  }
  if (prev < s.size()) parts.push_back({{prev, s.size()}, invert});

  std::vector<Span> pieces;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (auto& [span, delim] : parts) {
        if (!delim) pieces.push_back(span);
      }
      break;
    case SplitBehavior::kIsolated:
      for (auto& [span, delim] : parts) pieces.push_back(span);
      break;
    case SplitBehavior::kContiguous: {
      bool previous = false;
      for (auto& [span, delim] : parts) {
        if (delim == previous && !pieces.empty()) {
          pieces.back().second = span.second;
        } else {
          pieces.push_back(span);
        }
        previous = delim;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous = false;
      for (auto& [span, delim] : parts) {
        if (delim && !previous && !pieces.empty()) {
          pieces.back().second = span.second;
        } else {
          pieces.push_back(span);
        }
        previous = delim;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous = false;
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->second && !previous && !pieces.empty()) {
          pieces.back().first = it->first.first;
        } else {
          pieces.push_back(it->first);
        }
        previous = it->second;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    }
  }
  for (auto [b, e] : pieces) {
    if (e > b) out.emplace_back(s, b, e - b);
  }
}

void find_literal(std::string_view s, std::string_view literal, std::vector<Span>& out) {
  if (literal.empty()) return;
  for (std::size_t at = s.find(literal); at != std::string_view::npos;
       at = s.find(literal, at + literal.size())) {
    out.emplace_back(at, at + literal.size());
  }
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(std::string literal, std::optional<Regex> regex, SplitBehavior behavior,
                    bool invert)
      : literal_(std::move(literal)),
        regex_(std::move(regex)),
        behavior_(behavior),
        invert_(invert) {}
  void split(std::vector<std::string>& words, bool) const override {
    std::vector<std::string> out;
    out.reserve(words.size() * 4);
    std::vector<Span> matches;
    for (const std::string& w : words) {
      matches.clear();
      if (regex_) {
        regex_->find_all(w, matches);
      } else {
        find_literal(w, literal_, matches);
      }
      split_by_matches(w, matches, behavior_, invert_, out);
    }
    words = std::move(out);
  }

 private:
  std::string literal_;
  std::optional<Regex> regex_;
  SplitBehavior behavior_;
  bool invert_;
};

const std::array<std::string, 256>& byte_table() {
  static const auto* table = [] {
    auto* t = new std::array<std::string, 256>();
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      (*t)[static_cast<std::size_t>(b)] =
          utf8::encode(printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++));
    }
    return t;
  }();
  return *table;
}

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::optional<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}
  void split(std::vector<std::string>& words, bool) const override {
    if (add_prefix_space_) {
      for (std::string& w : words) {
        if (w.empty() || w[0] != ' ') w.insert(0, 1, ' ');
      }
    }
    if (regex_) {
      std::vector<std::string> out;
      std::vector<Span> matches;
      for (const std::string& w : words) {
        matches.clear();
        regex_->find_all(w, matches);
        split_by_matches(w, matches, SplitBehavior::kIsolated, false, out);
      }
      words = std::move(out);
    }
    const auto& table = byte_table();
    std::string mapped;
    for (std::string& w : words) {
      mapped.clear();
      for (char c : w) mapped += table[static_cast<unsigned char>(c)];
      w.swap(mapped);
    }
  }

 private:
  bool add_prefix_space_;
  std::optional<Regex> regex_;
};

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void split(std::vector<std::string>& words, bool first_segment) const override {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < words.size(); ++i) {
      std::string w = replace_all(words[i], " ", replacement_);
      bool prepend = false;
      switch (scheme_) {
        case PrependScheme::kAlways: prepend = true; break;
        case PrependScheme::kFirst: prepend = first_segment && i == 0; break;
        case PrependScheme::kNever: prepend = false; break;
      }
      if (prepend && w.compare(0, replacement_.size(), replacement_) != 0)
        w.insert(0, replacement_);
      if (!split_) {
        out.push_back(std::move(w));
        continue;
      }
      std::vector<Span> matches;
      find_literal(w, replacement_, matches);
      split_by_matches(w, matches, SplitBehavior::kMergedWithNext, false, out);
    }
    words = std::move(out);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class RegexPreTokenizer final : public PreTokenizer {
 public:
  RegexPreTokenizer(Regex regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  void split(std::vector<std::string>& words, bool) const override {
    std::vector<std::string> out;
    std::vector<Span> matches;
    for (const std::string& w : words) {
      matches.clear();
      regex_.find_all(w, matches);
      split_by_matches(w, matches, behavior_, invert_, out);
    }
    words = std::move(out);
  }

 private:
  Regex regex_;
  SplitBehavior behavior_;
  bool invert_;
};

class WhitespaceSplitPreTokenizer final : public PreTokenizer {
 public:
  void split(std::vector<std::string>& words, bool) const override {
    std::vector<std::string> out;
    for (const std::string& w : words) {
      std::size_t i = 0, start = 0;
      bool in_word = false;
      while (i < w.size()) {
        char32_t cp;
        std::size_t n = utf8::decode(w, i, &cp);
        if (n == 0) n = 1, cp = 0;
        const bool space = is_unicode_space(cp);
        if (space && in_word) out.emplace_back(w, start, i - start);
        if (!space && !in_word) start = i;
        in_word = !space;
        i += n;
      }
      if (in_word) out.emplace_back(w, start, w.size() - start);
    }
    words = std::move(out);
  }
};

class DigitsPreTokenizer final : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  void split(std::vector<std::string>& words, bool) const override {
    std::vector<std::string> out;
    std::vector<Span> matches;
    for (const std::string& w : words) {
      matches.clear();
      for (std::size_t i = 0; i < w.size(); ++i) {
        if (w[i] < '0' || w[i] > '9') continue;
        if (!individual_ && !matches.empty() && matches.back().second == i) {
          matches.back().second = i + 1;
        } else {
          matches.emplace_back(i, i + 1);
        }
      }
      split_by_matches(w, matches,
                       individual_ ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, false,
                       out);
    }
    words = std::move(out);
  }

 private:
  bool individual_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void split(std::vector<std::string>& words, bool first_segment) const override {
    for (const auto& step : steps_) step->split(words, first_segment);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_split_pre_tokenizer(std::string literal,
                                                       std::optional<Regex> regex,
                                                       SplitBehavior behavior, bool invert) {
  return std::make_unique<SplitPreTokenizer>(std::move(literal), std::move(regex), behavior,
                                             invert);
}

Result<std::unique_ptr<PreTokenizer>> make_byte_level_pre_tokenizer(bool add_prefix_space,
                                                                    bool use_regex) {
  std::optional<Regex> regex;
  if (use_regex) {
    CELLM_ASSIGN_OR_RETURN(Regex r, Regex::create(kGpt2Pattern));
    regex = std::move(r);
  }
  return std::unique_ptr<PreTokenizer>(
      new ByteLevelPreTokenizer(add_prefix_space, std::move(regex)));
}

std::unique_ptr<PreTokenizer> make_metaspace_pre_tokenizer(std::string replacement,
                                                           PrependScheme scheme, bool split) {
  return std::make_unique<MetaspacePreTokenizer>(std::move(replacement), scheme, split);
}

Result<std::unique_ptr<PreTokenizer>> make_whitespace_pre_tokenizer() {
  CELLM_ASSIGN_OR_RETURN(Regex r, Regex::create(R"(\w+|[^\w\s]+)"));
  return std::unique_ptr<PreTokenizer>(
      new RegexPreTokenizer(std::move(r), SplitBehavior::kRemoved, true));
}

std::unique_ptr<PreTokenizer> make_whitespace_split_pre_tokenizer() {
  return std::make_unique<WhitespaceSplitPreTokenizer>();
}

std::unique_ptr<PreTokenizer> make_digits_pre_tokenizer(bool individual) {
  return std::make_unique<DigitsPreTokenizer>(individual);
}

std::unique_ptr<PreTokenizer> make_sequence_pre_tokenizer(
    std::vector<std::unique_ptr<PreTokenizer>> steps) {
  return std::make_unique<SequencePreTokenizer>(std::move(steps));
}

const std::string& byte_level_char(unsigned char b) {
  return byte_table()[b];
}

int byte_level_byte(char32_t cp) {
  static const auto* inverse = [] {
    auto* inv = new std::array<int, 512>();
    inv->fill(-1);
    for (int b = 0; b < 256; ++b) {
      char32_t cp2;
      utf8::decode(byte_table()[static_cast<std::size_t>(b)], 0, &cp2);
      (*inv)[cp2] = b;
    }
    return inv;
  }();
  return cp < 512 ? (*inverse)[cp] : -1;
}

}  // namespace cellm::text
