#include "text/normalizer.h"

#include <utility>

#include "core/utf8.h"
#include "text/unicode_nfc.h"

namespace cellm::text {
namespace {

class NfcNormalizer final : public Normalizer {
 public:
  void normalize(std::string& s) const override { s = nfc_normalize(s); }
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(std::string literal, std::optional<Regex> regex, std::string content)
      : literal_(std::move(literal)), regex_(std::move(regex)), content_(std::move(content)) {}
  void normalize(std::string& s) const override {
    if (!regex_) {
      if (s.find(literal_) != std::string::npos) s = replace_all(s, literal_, content_);
      return;
    }
    std::vector<std::pair<std::size_t, std::size_t>> matches;
    regex_->find_all(s, matches);
    if (matches.empty()) return;
    std::string out;
    std::size_t prev = 0;
    for (auto [b, e] : matches) {
      out.append(s, prev, b - prev);
      out += content_;
      prev = e;
    }
    out.append(s, prev, std::string::npos);
    s = std::move(out);
  }

 private:
  std::string literal_;
  std::optional<Regex> regex_;
  std::string content_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& s) const override {
    if (!s.empty()) s.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& s) const override {
    std::size_t begin = 0, end = s.size();
    if (left_) {
      while (begin < end) {
        char32_t cp;
        const std::size_t n = utf8::decode(s, begin, &cp);
        if (n == 0 || !is_unicode_space(cp)) break;
        begin += n;
      }
    }
    if (right_) {
      while (end > begin) {
        std::size_t i = end - 1;
        while (i > begin && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
        char32_t cp;
        const std::size_t n = utf8::decode(s, i, &cp);
        if (n == 0 || i + n != end || !is_unicode_space(cp)) break;
        end = i;
      }
    }
    s = s.substr(begin, end - begin);
  }

 private:
  bool left_;
  bool right_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  void normalize(std::string& s) const override {
    for (const auto& step : steps_) step->normalize(s);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

std::unique_ptr<Normalizer> make_nfc_normalizer() {
  return std::make_unique<NfcNormalizer>();
}
std::unique_ptr<Normalizer> make_replace_normalizer(std::string literal, std::optional<Regex> regex,
                                                    std::string content) {
  return std::make_unique<ReplaceNormalizer>(std::move(literal), std::move(regex),
                                             std::move(content));
}
std::unique_ptr<Normalizer> make_prepend_normalizer(std::string prefix) {
  return std::make_unique<PrependNormalizer>(std::move(prefix));
}
std::unique_ptr<Normalizer> make_strip_normalizer(bool left, bool right) {
  return std::make_unique<StripNormalizer>(left, right);
}
std::unique_ptr<Normalizer> make_sequence_normalizer(
    std::vector<std::unique_ptr<Normalizer>> steps) {
  return std::make_unique<SequenceNormalizer>(std::move(steps));
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(s);
  std::string out;
  out.reserve(s.size());
  std::size_t prev = 0;
  for (std::size_t at = s.find(from); at != std::string_view::npos; at = s.find(from, prev)) {
    out.append(s.substr(prev, at - prev));
    out.append(to);
    prev = at + from.size();
  }
  out.append(s.substr(prev));
  return out;
}

bool is_unicode_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

}  // namespace cellm::text
