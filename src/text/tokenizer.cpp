#include "text/tokenizer.h"

#include <algorithm>

#include "core/utf8.h"
#include "text/tokenizer_state.h"

namespace cellm::text {

Result<Tokenizer> make_tokenizer(std::unique_ptr<TokenizerState> state) {
  if (!state->model) return invalid_argument("tokenizer has no model");
  std::size_t size = state->model->tokens().size();
  for (const AddedToken& t : state->added) {
    if (t.id < 0) return invalid_argument("added token '{}' has a negative id {}", t.content, t.id);
    if (t.content.empty()) return invalid_argument("added token {} has empty content", t.id);
    size = std::max(size, static_cast<std::size_t>(t.id) + 1);
  }
  state->id_text = state->model->tokens();
  state->id_text.resize(size);
  state->id_flags.assign(size, 0);
  std::vector<AddedToken> raw, normalized;
  for (const AddedToken& t : state->added) {
    const auto id = static_cast<std::size_t>(t.id);
    state->id_text[id] = t.content;
    state->added_ids.emplace(t.content, t.id);
    state->id_flags[id] = static_cast<std::uint8_t>(kFlagAdded | (t.special ? kFlagSpecial : 0));
    (t.normalized && state->normalizer ? normalized : raw).push_back(t);
  }
  if (state->normalizer) {
    // Normalized added tokens match the normalized text, so normalize them too.
    for (AddedToken& t : normalized) state->normalizer->normalize(t.content);
  }
  state->raw_matcher = AddedTokenMatcher(std::move(raw));
  state->normalized_matcher = AddedTokenMatcher(std::move(normalized));
  for (auto id : state->prefix) {
    if (id < 0 || static_cast<std::size_t>(id) >= size)
      return invalid_argument("post-processor id {} is outside the vocabulary", id);
  }
  for (auto id : state->suffix) {
    if (id < 0 || static_cast<std::size_t>(id) >= size)
      return invalid_argument("post-processor id {} is outside the vocabulary", id);
  }
  return Tokenizer(std::shared_ptr<const TokenizerState>(std::move(state)));
}

namespace {

void encode_plain(const TokenizerState& st, std::string_view text, bool first_segment,
                  std::vector<std::int32_t>& out) {
  if (st.byte_level_split) {
    // Fast path: words are cut by the regex and looked up by their raw bytes;
    // only a miss pays for the byte-level mapping and the merges.
    thread_local std::vector<std::pair<std::size_t, std::size_t>> spans;
    thread_local std::string mapped;
    spans.clear();
    st.byte_level_split->find_all(text, spans);
    auto word = [&](std::size_t b, std::size_t e) {
      const std::string_view raw = text.substr(b, e - b);
      if (st.raw_word_cache->lookup(raw, out)) return;
      mapped.clear();
      for (char c : raw) mapped += byte_level_char(static_cast<unsigned char>(c));
      const std::size_t start = out.size();
      st.model->encode_word(mapped, out);
      st.raw_word_cache->insert(raw, out.data() + start, out.size() - start);
    };
    std::size_t prev = 0;
    for (auto [b, e] : spans) {
      if (b > prev) word(prev, b);
      word(b, e);
      prev = e;
    }
    if (prev < text.size()) word(prev, text.size());
    return;
  }
  std::vector<std::string> words;
  words.emplace_back(text);
  if (st.pre_tokenizer) st.pre_tokenizer->split(words, first_segment);
  for (const std::string& w : words) st.model->encode_word(w, out);
}

}  // namespace

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
  const TokenizerState& st = *state_;
  std::string repaired;
  if (!utf8::is_valid(text)) {
    repaired = utf8::repair(text);
    text = repaired;
  }
  std::vector<std::int32_t> ids;
  if (add_special) ids.insert(ids.end(), st.prefix.begin(), st.prefix.end());
  std::vector<Segment> segments;
  st.raw_matcher.split(text, segments);
  std::vector<Segment> inner;
  std::string normalized;
  for (const Segment& seg : segments) {
    if (seg.token_id >= 0) {
      ids.push_back(seg.token_id);
      continue;
    }
    std::string_view piece = text.substr(seg.begin, seg.end - seg.begin);
    const bool first = seg.begin == 0;
    if (!st.normalizer) {
      encode_plain(st, piece, first, ids);
      continue;
    }
    normalized.assign(piece);
    st.normalizer->normalize(normalized);
    inner.clear();
    st.normalized_matcher.split(normalized, inner);
    for (const Segment& s : inner) {
      if (s.token_id >= 0) {
        ids.push_back(s.token_id);
      } else {
        encode_plain(st, std::string_view(normalized).substr(s.begin, s.end - s.begin),
                     first && s.begin == 0, ids);
      }
    }
  }
  if (add_special) ids.insert(ids.end(), st.suffix.begin(), st.suffix.end());
  return ids;
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids, bool skip_special) const {
  const TokenizerState& st = *state_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (std::int32_t id : ids) {
    const std::string* t = token_text(id);
    if (t == nullptr) continue;
    if (skip_special && (st.id_flags[static_cast<std::size_t>(id)] & kFlagSpecial)) continue;
    tokens.push_back(*t);
  }
  return utf8::repair(st.decoder.decode(std::move(tokens), /*at_start=*/true));
}

std::optional<std::int32_t> Tokenizer::token_to_id(std::string_view token) const {
  const TokenizerState& st = *state_;
  auto it = st.added_ids.find(std::string(token));
  if (it != st.added_ids.end()) return it->second;
  return st.model->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(std::int32_t id) const {
  const std::string* t = token_text(id);
  if (t == nullptr) return std::nullopt;
  return *t;
}

const std::string* Tokenizer::token_text(std::int32_t id) const {
  const TokenizerState& st = *state_;
  if (id < 0 || static_cast<std::size_t>(id) >= st.id_text.size() ||
      st.id_text[static_cast<std::size_t>(id)].empty()) {
    return nullptr;
  }
  return &st.id_text[static_cast<std::size_t>(id)];
}

std::int32_t Tokenizer::vocab_size() const {
  return static_cast<std::int32_t>(state_->id_text.size());
}
std::optional<std::int32_t> Tokenizer::bos_id() const {
  return state_->bos;
}
std::optional<std::int32_t> Tokenizer::eos_id() const {
  return state_->eos;
}
std::span<const std::int32_t> Tokenizer::special_prefix() const {
  return state_->prefix;
}
std::span<const std::int32_t> Tokenizer::special_suffix() const {
  return state_->suffix;
}

bool Tokenizer::is_special(std::int32_t id) const {
  return id >= 0 && static_cast<std::size_t>(id) < state_->id_flags.size() &&
         (state_->id_flags[static_cast<std::size_t>(id)] & kFlagSpecial) != 0;
}

bool Tokenizer::is_added(std::int32_t id) const {
  return id >= 0 && static_cast<std::size_t>(id) < state_->id_flags.size() &&
         (state_->id_flags[static_cast<std::size_t>(id)] & kFlagAdded) != 0;
}

const DecoderChain& Tokenizer::decoder() const {
  return state_->decoder;
}

}  // namespace cellm::text
