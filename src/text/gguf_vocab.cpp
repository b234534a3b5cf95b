// Tokenizer::from_gguf_vocab: assembles the same pipeline parts tokenizer.json
// would describe for the GGUF `gpt2` and `llama` tokenizer models.
#include "text/gguf_vocab.h"

#include "text/tokenizer.h"
#include "text/tokenizer_state.h"

namespace cellm::text {
namespace {

constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kSpace = "\xE2\x96\x81";  // ▁

GgufTokenType type_of(const GgufVocab& v, std::size_t id) {
  return v.token_types.empty() ? GgufTokenType::kNormal
                               : static_cast<GgufTokenType>(v.token_types[id]);
}

// Control and unknown tokens are special added tokens, user-defined ones plain
// added tokens: both are matched in the input text before the model runs.
std::vector<AddedToken> added_tokens(const GgufVocab& v) {
  std::vector<AddedToken> out;
  for (std::size_t id = 0; id < v.tokens.size(); ++id) {
    const GgufTokenType t = type_of(v, id);
    const bool special = t == GgufTokenType::kControl || t == GgufTokenType::kUnknown;
    if (!special && t != GgufTokenType::kUserDefined) continue;
    if (v.tokens[id].empty()) continue;
    AddedToken a;
    a.id = static_cast<std::int32_t>(id);
    a.content = v.tokens[id];
    a.special = special;
    out.push_back(std::move(a));
  }
  return out;
}

Status check_id(const std::optional<std::int32_t>& id, const char* what, std::size_t n) {
  if (id && (*id < 0 || static_cast<std::size_t>(*id) >= n)) {
    return invalid_argument("GGUF vocabulary: {} id {} is outside the {} tokens", what, *id, n);
  }
  return Status::ok();
}

Status build_gpt2(const GgufVocab& v, TokenizerState& st) {
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(v.merges.size());
  for (std::size_t i = 0; i < v.merges.size(); ++i) {
    const std::string& m = v.merges[i];
    const std::size_t sp = m.find(' ', 1);  // a merge may start with a literal space piece
    if (sp == std::string::npos) {
      return invalid_argument(
          "GGUF vocabulary: merges[{}] '{}' is not two tokens separated by a space", i, m);
    }
    merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
  }
  BpeOptions options;
  CELLM_ASSIGN_OR_RETURN(st.model, BpeModel::from_merges(v.tokens, merges, options));

  const std::string& pre = v.pre;
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  if (pre == "llama-bpe" || pre == "llama3" || pre == "smaug-bpe" || pre == "dbrx") {
    CELLM_ASSIGN_OR_RETURN(Regex r, Regex::create(kLlama3Pattern));
    st.byte_level_split = r;
    steps.push_back(make_split_pre_tokenizer("", std::move(r), SplitBehavior::kIsolated, false));
    CELLM_ASSIGN_OR_RETURN(auto bl, make_byte_level_pre_tokenizer(false, false));
    steps.push_back(std::move(bl));
  } else if (pre == "qwen2" || pre == "deepseek-r1-qwen") {
    st.normalizer = make_nfc_normalizer();
    CELLM_ASSIGN_OR_RETURN(Regex r, Regex::create(kQwen2Pattern));
    st.byte_level_split = r;
    steps.push_back(make_split_pre_tokenizer("", std::move(r), SplitBehavior::kIsolated, false));
    CELLM_ASSIGN_OR_RETURN(auto bl, make_byte_level_pre_tokenizer(false, false));
    steps.push_back(std::move(bl));
  } else if (pre == "smollm") {
    steps.push_back(make_digits_pre_tokenizer(true));
    CELLM_ASSIGN_OR_RETURN(auto bl, make_byte_level_pre_tokenizer(false, true));
    steps.push_back(std::move(bl));
  } else if (pre.empty() || pre == "default" || pre == "gpt2" || pre == "gpt-2") {
    CELLM_ASSIGN_OR_RETURN(Regex r, Regex::create(kGpt2Pattern));
    st.byte_level_split = std::move(r);
    CELLM_ASSIGN_OR_RETURN(auto bl, make_byte_level_pre_tokenizer(false, true));
    steps.push_back(std::move(bl));
  } else {
    return not_supported(
        "GGUF vocabulary: pre-tokenizer '{}' is not known (supported: llama-bpe, llama3, "
        "smaug-bpe, dbrx, qwen2, deepseek-r1-qwen, smollm, gpt2, default)",
        pre);
  }
  st.pre_tokenizer = make_sequence_pre_tokenizer(std::move(steps));
  st.decoder = DecoderChain({DecoderStep{DecoderKind::kByteLevel}}, false);
  if (v.add_bos.value_or(false) && v.bos) st.prefix.push_back(*v.bos);
  return Status::ok();
}

Status build_llama(const GgufVocab& v, TokenizerState& st) {
  if (v.scores.size() != v.tokens.size()) {
    return invalid_argument("GGUF vocabulary: {} tokens but {} scores (tokenizer.ggml.scores)",
                            v.tokens.size(), v.scores.size());
  }
  std::vector<bool> mergeable(v.tokens.size());
  BpeOptions options;
  options.byte_fallback = true;
  for (std::size_t id = 0; id < v.tokens.size(); ++id) {
    const GgufTokenType t = type_of(v, id);
    mergeable[id] = t == GgufTokenType::kNormal || t == GgufTokenType::kUserDefined ||
                    t == GgufTokenType::kUndefined;
    if (t == GgufTokenType::kUnknown && !options.unk_token) options.unk_token = v.tokens[id];
  }
  if (v.unk) options.unk_token = v.tokens[static_cast<std::size_t>(*v.unk)];
  options.fuse_unk = true;
  CELLM_ASSIGN_OR_RETURN(st.model, BpeModel::from_scores(v.tokens, v.scores, mergeable, options));

  const bool prefix = v.add_space_prefix.value_or(true);
  std::vector<std::unique_ptr<Normalizer>> norm;
  if (prefix) norm.push_back(make_prepend_normalizer(kSpace));
  norm.push_back(make_replace_normalizer(" ", std::nullopt, kSpace));
  st.normalizer = make_sequence_normalizer(std::move(norm));
  std::vector<DecoderStep> steps = {
      {DecoderKind::kReplace, kSpace, " "}, {DecoderKind::kByteFallback}, {DecoderKind::kFuse}};
  if (prefix) {
    DecoderStep strip{DecoderKind::kStrip, " "};
    strip.start = 1;
    steps.push_back(strip);
  }
  st.decoder = DecoderChain(std::move(steps), false);
  if (v.add_bos.value_or(true) && v.bos) st.prefix.push_back(*v.bos);
  return Status::ok();
}

}  // namespace

Result<Tokenizer> Tokenizer::from_gguf_vocab(const GgufVocab& v) {
  if (v.tokens.empty())
    return invalid_argument("GGUF vocabulary has no tokens (tokenizer.ggml.tokens)");
  if (!v.token_types.empty() && v.token_types.size() != v.tokens.size()) {
    return invalid_argument("GGUF vocabulary: {} tokens but {} token types", v.tokens.size(),
                            v.token_types.size());
  }
  for (std::size_t i = 0; i < v.token_types.size(); ++i) {
    if (v.token_types[i] < 0 || v.token_types[i] > 6) {
      return invalid_argument("GGUF vocabulary: token {} has unknown type {}", i, v.token_types[i]);
    }
  }
  CELLM_RETURN_IF_ERROR(check_id(v.bos, "bos", v.tokens.size()));
  CELLM_RETURN_IF_ERROR(check_id(v.eos, "eos", v.tokens.size()));
  CELLM_RETURN_IF_ERROR(check_id(v.unk, "unknown", v.tokens.size()));
  auto st = std::make_unique<TokenizerState>();
  if (v.model == "gpt2") {
    CELLM_RETURN_IF_ERROR(build_gpt2(v, *st));
  } else if (v.model == "llama") {
    CELLM_RETURN_IF_ERROR(build_llama(v, *st));
  } else {
    return not_supported("GGUF tokenizer model '{}' is not supported (cellm reads gpt2 and llama)",
                         v.model);
  }
  if (v.add_eos.value_or(false) && v.eos) st->suffix.push_back(*v.eos);
  st->added = added_tokens(v);
  st->bos = v.bos;
  st->eos = v.eos;
  return make_tokenizer(std::move(st));
}

}  // namespace cellm::text
