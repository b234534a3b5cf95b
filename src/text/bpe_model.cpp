#include "text/bpe_model.h"

#include <algorithm>
#include <queue>

#include <fmt/format.h>

#include "core/utf8.h"

namespace cellm::text {
namespace {

std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) |
         static_cast<std::uint32_t>(b);
}

// Bytes of the code point at s[i], or of the invalid run lossy decoding
// would replace there.
std::size_t utf8_char_len(std::string_view s, std::size_t i) {
  std::size_t end = i;
  utf8::next(s, end);
  return end - i;
}

}  // namespace

BpeModel::BpeModel(std::vector<std::string> tokens, BpeOptions options)
    : tokens_(std::move(tokens)), options_(std::move(options)) {
  vocab_.reserve(tokens_.size());
  for (std::size_t id = 0; id < tokens_.size(); ++id) {
    if (!tokens_[id].empty()) vocab_.emplace(tokens_[id], static_cast<std::int32_t>(id));
  }
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(fmt::format("<0x{:02X}>", b));
    byte_tokens_[b] = it == vocab_.end() ? -1 : it->second;
  }
  if (options_.unk_token) {
    auto it = vocab_.find(*options_.unk_token);
    if (it != vocab_.end()) unk_id_ = it->second;
  }
  find_spanning_tokens();
}

void BpeModel::find_spanning_tokens() {
  static constexpr std::string_view kBar = "\xE2\x96\x81";
  std::size_t with_bar = 0;
  std::vector<std::pair<std::string, std::size_t>> spanning;
  for (const std::string& t : tokens_) {
    if (t.compare(0, kBar.size(), kBar) == 0) ++with_bar;
    for (std::size_t p = t.find(kBar, 1); p != std::string::npos; p = t.find(kBar, p + 1)) {
      if (p >= kBar.size() && t.compare(p - kBar.size(), kBar.size(), kBar) == 0) continue;
      spanning.emplace_back(t, p);
    }
  }
  // Only worth it (and only checked) for ▁-based vocabularies with few
  // tokens that cross a word start.
  if (with_bar * 20 < tokens_.size() || spanning.size() > 256 ||
      !options_.continuing_subword_prefix.empty() || !options_.end_of_word_suffix.empty()) {
    return;
  }
  spanning_ = std::move(spanning);
  cut_at_bar_ = true;
}

Result<std::unique_ptr<BpeModel>> BpeModel::from_merges(
    std::vector<std::string> tokens, const std::vector<std::pair<std::string, std::string>>& merges,
    BpeOptions options) {
  std::unique_ptr<BpeModel> model(new BpeModel(std::move(tokens), std::move(options)));
  if (model->options_.unk_token && model->unk_id_ < 0) {
    return invalid_argument("BPE unk_token '{}' is not in the vocabulary",
                            *model->options_.unk_token);
  }
  const std::size_t prefix_len = model->options_.continuing_subword_prefix.size();
  model->merges_.reserve(merges.size());
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    auto ia = model->vocab_.find(a);
    auto ib = model->vocab_.find(b);
    if (ia == model->vocab_.end() || ib == model->vocab_.end()) {
      return invalid_argument("model.merges[{}] ('{}' '{}') uses a token missing from model.vocab",
                              rank, a, b);
    }
    std::string merged = a + b.substr(std::min(prefix_len, b.size()));
    auto im = model->vocab_.find(merged);
    if (im == model->vocab_.end()) {
      return invalid_argument(
          "model.merges[{}] ('{}' '{}') makes '{}', which is not in model.vocab", rank, a, b,
          merged);
    }
    // The first (lowest-rank) occurrence of a pair wins, as in HF.
    model->merges_.emplace(pair_key(ia->second, ib->second),
                           Merge{static_cast<std::uint32_t>(rank), im->second});
  }
  return model;
}

Result<std::unique_ptr<BpeModel>> BpeModel::from_scores(std::vector<std::string> tokens,
                                                        const std::vector<float>& scores,
                                                        const std::vector<bool>& mergeable,
                                                        BpeOptions options) {
  if (scores.size() != tokens.size() || (!mergeable.empty() && mergeable.size() != tokens.size())) {
    return invalid_argument("SentencePiece vocabulary has {} tokens but {} scores", tokens.size(),
                            scores.size());
  }
  std::unique_ptr<BpeModel> model(new BpeModel(std::move(tokens), std::move(options)));
  // Rank every token by descending score (ties by id); every split of a token
  // into two vocabulary pieces at a character boundary becomes a merge with
  // that token's rank, which is what SentencePiece's greedy loop computes.
  const std::size_t n = model->tokens_.size();
  std::vector<std::int32_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = static_cast<std::int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    return scores[static_cast<std::size_t>(a)] > scores[static_cast<std::size_t>(b)];
  });
  for (std::size_t rank = 0; rank < n; ++rank) {
    const std::int32_t id = order[rank];
    if (!mergeable.empty() && !mergeable[static_cast<std::size_t>(id)]) continue;
    const std::string& t = model->tokens_[static_cast<std::size_t>(id)];
    for (std::size_t cut = utf8_char_len(t, 0); cut < t.size(); cut += utf8_char_len(t, cut)) {
      auto ia = model->vocab_.find(std::string_view(t).substr(0, cut));
      auto ib = model->vocab_.find(std::string_view(t).substr(cut));
      if (ia == model->vocab_.end() || ib == model->vocab_.end()) continue;
      model->merges_.emplace(pair_key(ia->second, ib->second),
                             Merge{static_cast<std::uint32_t>(rank), id});
    }
  }
  return model;
}

std::optional<std::int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::encode_word(std::string_view word, std::vector<std::int32_t>& out) const {
  if (word.empty()) return;
  if (word.size() > kCacheMaxWord) {
    encode_uncached(word, out);
    return;
  }
  // The cache sits in front of everything, including the whole-word vocabulary
  // check, because its table is far smaller and hotter than the vocabulary's.
  if (cache_.lookup(word, out)) return;
  const std::size_t start = out.size();
  encode_uncached(word, out);
  cache_.insert(word, out.data() + start, out.size() - start);
}

void BpeModel::encode_uncached(std::string_view word, std::vector<std::int32_t>& out) const {
  if (options_.ignore_merges) {
    auto it = vocab_.find(word);
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (!cut_at_bar_ || word.size() <= kCacheMaxWord) {
    merge_word(word, out);
    return;
  }
  // SentencePiece-style vocabularies: no merge can cross a ▁ that follows
  // another character unless some token spells that crossing, so long words
  // are cut there and each part goes through the cache.
  static constexpr std::string_view kBar = "\xE2\x96\x81";
  std::size_t begin = 0;
  for (std::size_t p = word.find(kBar, 1); p != std::string_view::npos;
       p = word.find(kBar, p + 1)) {
    if (p >= kBar.size() && word.compare(p - kBar.size(), kBar.size(), kBar) == 0)
      continue;  // inside a ▁ run
    if (!can_cut_before(word, p)) continue;
    encode_part(word.substr(begin, p - begin), out);
    begin = p;
  }
  encode_part(word.substr(begin), out);
}

void BpeModel::encode_part(std::string_view part, std::vector<std::int32_t>& out) const {
  // Short parts go through the cache; long ones straight to merging (never
  // back into cutting, which would not terminate).
  if (part.size() <= kCacheMaxWord) {
    encode_word(part, out);
  } else {
    merge_word(part, out);
  }
}

bool BpeModel::can_cut_before(std::string_view word, std::size_t p) const {
  for (const auto& [token, offset] : spanning_) {
    if (offset > p || p - offset + token.size() > word.size()) continue;
    if (word.compare(p - offset, token.size(), token) == 0) return false;
  }
  return true;
}

void BpeModel::merge_word(std::string_view word, std::vector<std::int32_t>& out) const {
  struct Symbol {
    std::int32_t id;
    std::int32_t prev;
    std::int32_t next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](std::int32_t id) {
    const auto idx = static_cast<std::int32_t>(symbols.size());
    symbols.push_back(Symbol{id, idx - 1, -1, true});
    if (idx > 0) symbols[static_cast<std::size_t>(idx - 1)].next = idx;
  };

  // Split into characters; characters outside the vocabulary become byte
  // tokens (byte fallback) or the unknown token (fused when asked).
  bool pending_unk = false;
  std::string piece;
  for (std::size_t i = 0; i < word.size();) {
    const std::size_t len = utf8_char_len(word, i);
    const bool first = i == 0, last = i + len >= word.size();
    std::string_view ch = word.substr(i, len);
    std::optional<std::int32_t> id;
    if (options_.continuing_subword_prefix.empty() && options_.end_of_word_suffix.empty()) {
      auto it = vocab_.find(ch);
      if (it != vocab_.end()) id = it->second;
    } else {
      piece.clear();
      if (!first) piece += options_.continuing_subword_prefix;
      piece += ch;
      if (last) piece += options_.end_of_word_suffix;
      auto it = vocab_.find(piece);
      if (it != vocab_.end()) id = it->second;
    }
    i += len;
    if (id) {
      if (pending_unk) add(unk_id_);
      pending_unk = false;
      add(*id);
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (char c : ch) all = all && byte_token(static_cast<unsigned char>(c)) >= 0;
      if (all) {
        for (char c : ch) add(byte_token(static_cast<unsigned char>(c)));
        continue;
      }
    }
    if (unk_id_ >= 0) {
      if (pending_unk && !options_.fuse_unk) add(unk_id_);
      pending_unk = true;
    }
  }
  if (pending_unk) add(unk_id_);

  struct Candidate {
    std::uint32_t rank;
    std::int32_t pos;
    std::int32_t new_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](std::int32_t left) {
    if (left < 0) return;
    const Symbol& l = symbols[static_cast<std::size_t>(left)];
    if (l.next < 0) return;
    auto it = merges_.find(pair_key(l.id, symbols[static_cast<std::size_t>(l.next)].id));
    if (it != merges_.end()) queue.push(Candidate{it->second.rank, left, it->second.new_id});
  };
  for (std::size_t i = 0; i + 1 < symbols.size(); ++i) consider(static_cast<std::int32_t>(i));
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = symbols[static_cast<std::size_t>(c.pos)];
    if (!l.alive || l.next < 0) continue;
    Symbol& r = symbols[static_cast<std::size_t>(l.next)];
    auto it = merges_.find(pair_key(l.id, r.id));
    if (it == merges_.end() || it->second.new_id != c.new_id) continue;  // stale
    l.id = c.new_id;
    r.alive = false;
    l.next = r.next;
    if (r.next >= 0) symbols[static_cast<std::size_t>(r.next)].prev = c.pos;
    consider(l.prev);
    consider(c.pos);
  }
  for (const Symbol& s : symbols) {
    if (s.alive) out.push_back(s.id);
  }
}

}  // namespace cellm::text
