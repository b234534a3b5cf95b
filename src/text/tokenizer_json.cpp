// Loading a Tokenizer from Hugging Face tokenizer.json (optionally gzipped)
// and tokenizer_config.json.
#include <fstream>
#include <iterator>
#include <zlib.h>

#include <nlohmann/json.hpp>

#include "text/tokenizer.h"
#include "text/tokenizer_state.h"

namespace cellm::text {
namespace {

using nlohmann::json;

Result<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open tokenizer file {}", path.string());
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (data.size() < 2 || static_cast<unsigned char>(data[0]) != 0x1f ||
      static_cast<unsigned char>(data[1]) != 0x8b) {
    return data;
  }
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) return internal_error("zlib inflateInit2 failed");
  zs.next_in = reinterpret_cast<Bytef*>(data.data());
  zs.avail_in = static_cast<uInt>(data.size());
  std::string out;
  char buf[1 << 16];
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof(buf);
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&zs);
      return data_loss("{} is not valid gzip (zlib error {} after {} bytes of output)",
                       path.string(), rc, out.size());
    }
    out.append(buf, sizeof(buf) - zs.avail_out);
    if (rc == Z_OK && zs.avail_in == 0 && zs.avail_out != 0) {
      inflateEnd(&zs);
      return data_loss("{} is truncated gzip ({} bytes decompressed)", path.string(), out.size());
    }
  }
  inflateEnd(&zs);
  return out;
}

// Field accessors that turn a wrong or missing field into a Status naming it.
Result<const json*> field(const json& j, const char* key, std::string_view where) {
  if (!j.is_object()) return invalid_argument("tokenizer.json: {} is not an object", where);
  auto it = j.find(key);
  if (it == j.end() || it->is_null())
    return invalid_argument("tokenizer.json: {}.{} is missing", where, key);
  return &*it;
}

Result<std::string> string_field(const json& j, const char* key, std::string_view where) {
  CELLM_ASSIGN_OR_RETURN(const json* v, field(j, key, where));
  if (!v->is_string()) return invalid_argument("tokenizer.json: {}.{} is not a string", where, key);
  return v->get<std::string>();
}

// Calls visit(item, where.key[i]) for every item of the list j[key], stopping
// at the first error.
template <typename Visit>
Status for_each_item(const json& j, const char* key, const std::string& where, Visit visit) {
  CELLM_ASSIGN_OR_RETURN(const json* list, field(j, key, where));
  if (!list->is_array()) {
    return invalid_argument("tokenizer.json: {}.{} is not a list", where, key);
  }
  for (std::size_t i = 0; i < list->size(); ++i) {
    CELLM_RETURN_IF_ERROR(visit((*list)[i], where + "." + key + "[" + std::to_string(i) + "]"));
  }
  return Status::ok();
}

bool bool_or(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

int int_or(const json& j, const char* key, int fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int>() : fallback;
}

std::string type_of(const json& j) {
  auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A {"String": s} or {"Regex": r} pattern.
Status parse_pattern(const json& j, std::string_view where, std::string* literal,
                     std::optional<Regex>* regex) {
  CELLM_ASSIGN_OR_RETURN(const json* p, field(j, "pattern", where));
  if (p->is_object() && p->contains("String") && (*p)["String"].is_string()) {
    *literal = (*p)["String"].get<std::string>();
    return Status::ok();
  }
  if (p->is_object() && p->contains("Regex") && (*p)["Regex"].is_string()) {
    CELLM_ASSIGN_OR_RETURN(Regex r, Regex::create((*p)["Regex"].get<std::string>()));
    *regex = std::move(r);
    return Status::ok();
  }
  return invalid_argument(
      "tokenizer.json: {}.pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}", where);
}

Result<std::unique_ptr<Normalizer>> parse_normalizer(const json& j, const std::string& where) {
  const std::string type = type_of(j);
  if (type == "NFC") return make_nfc_normalizer();
  if (type == "Replace") {
    std::string literal;
    std::optional<Regex> regex;
    CELLM_RETURN_IF_ERROR(parse_pattern(j, where, &literal, &regex));
    CELLM_ASSIGN_OR_RETURN(std::string content, string_field(j, "content", where));
    return make_replace_normalizer(std::move(literal), std::move(regex), std::move(content));
  }
  if (type == "Prepend") {
    CELLM_ASSIGN_OR_RETURN(std::string prepend, string_field(j, "prepend", where));
    return make_prepend_normalizer(std::move(prepend));
  }
  if (type == "Strip") {
    return make_strip_normalizer(bool_or(j, "strip_left", true), bool_or(j, "strip_right", true));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> steps;
    CELLM_RETURN_IF_ERROR(for_each_item(
        j, "normalizers", where, [&](const json& item, const std::string& item_where) -> Status {
          CELLM_ASSIGN_OR_RETURN(auto step, parse_normalizer(item, item_where));
          steps.push_back(std::move(step));
          return Status::ok();
        }));
    return make_sequence_normalizer(std::move(steps));
  }
  return not_supported(
      "tokenizer.json: {} has type '{}', which cellm does not implement (supported: NFC, "
      "Replace, Prepend, Strip, Sequence)",
      where, type);
}

Result<PrependScheme> parse_prepend_scheme(const json& j, std::string_view where) {
  auto it = j.find("prepend_scheme");
  if (it == j.end() || !it->is_string()) {
    return bool_or(j, "add_prefix_space", true) ? PrependScheme::kAlways : PrependScheme::kNever;
  }
  const std::string s = it->get<std::string>();
  if (s == "always") return PrependScheme::kAlways;
  if (s == "first") return PrependScheme::kFirst;
  if (s == "never") return PrependScheme::kNever;
  return invalid_argument("tokenizer.json: {}.prepend_scheme '{}' is not always/first/never", where,
                          s);
}

Result<std::unique_ptr<PreTokenizer>> parse_pre_tokenizer(const json& j, const std::string& where) {
  const std::string type = type_of(j);
  if (type == "Split") {
    std::string literal;
    std::optional<Regex> regex;
    CELLM_RETURN_IF_ERROR(parse_pattern(j, where, &literal, &regex));
    CELLM_ASSIGN_OR_RETURN(std::string b, string_field(j, "behavior", where));
    SplitBehavior behavior;
    if (b == "Removed")
      behavior = SplitBehavior::kRemoved;
    else if (b == "Isolated")
      behavior = SplitBehavior::kIsolated;
    else if (b == "MergedWithPrevious")
      behavior = SplitBehavior::kMergedWithPrevious;
    else if (b == "MergedWithNext")
      behavior = SplitBehavior::kMergedWithNext;
    else if (b == "Contiguous")
      behavior = SplitBehavior::kContiguous;
    else
      return invalid_argument("tokenizer.json: {}.behavior '{}' is unknown", where, b);
    return make_split_pre_tokenizer(std::move(literal), std::move(regex), behavior,
                                    bool_or(j, "invert", false));
  }
  if (type == "ByteLevel") {
    return make_byte_level_pre_tokenizer(bool_or(j, "add_prefix_space", true),
                                         bool_or(j, "use_regex", true));
  }
  if (type == "Metaspace") {
    CELLM_ASSIGN_OR_RETURN(std::string replacement, string_field(j, "replacement", where));
    CELLM_ASSIGN_OR_RETURN(PrependScheme scheme, parse_prepend_scheme(j, where));
    return make_metaspace_pre_tokenizer(std::move(replacement), scheme, bool_or(j, "split", true));
  }
  if (type == "Whitespace") return make_whitespace_pre_tokenizer();
  if (type == "WhitespaceSplit") return make_whitespace_split_pre_tokenizer();
  if (type == "Digits") return make_digits_pre_tokenizer(bool_or(j, "individual_digits", false));
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    CELLM_RETURN_IF_ERROR(for_each_item(
        j, "pretokenizers", where, [&](const json& item, const std::string& item_where) -> Status {
          CELLM_ASSIGN_OR_RETURN(auto step, parse_pre_tokenizer(item, item_where));
          steps.push_back(std::move(step));
          return Status::ok();
        }));
    return make_sequence_pre_tokenizer(std::move(steps));
  }
  return not_supported(
      "tokenizer.json: {} has type '{}', which cellm does not implement (supported: Split, "
      "ByteLevel, Metaspace, Whitespace, WhitespaceSplit, Digits, Sequence)",
      where, type);
}

Status parse_decoder(const json& j, const std::string& where, std::vector<DecoderStep>& steps) {
  const std::string type = type_of(j);
  if (type == "ByteLevel") {
    steps.push_back({DecoderKind::kByteLevel});
  } else if (type == "ByteFallback") {
    steps.push_back({DecoderKind::kByteFallback});
  } else if (type == "Fuse") {
    steps.push_back({DecoderKind::kFuse});
  } else if (type == "Strip") {
    CELLM_ASSIGN_OR_RETURN(std::string content, string_field(j, "content", where));
    DecoderStep s{DecoderKind::kStrip, content};
    s.start = int_or(j, "start", 0);
    s.stop = int_or(j, "stop", 0);
    steps.push_back(std::move(s));
  } else if (type == "Replace") {
    std::string literal;
    std::optional<Regex> regex;
    CELLM_RETURN_IF_ERROR(parse_pattern(j, where, &literal, &regex));
    if (regex)
      return not_supported("tokenizer.json: {} is a Replace decoder with a regex pattern", where);
    CELLM_ASSIGN_OR_RETURN(std::string content, string_field(j, "content", where));
    steps.push_back({DecoderKind::kReplace, literal, content});
  } else if (type == "Metaspace") {
    CELLM_ASSIGN_OR_RETURN(std::string replacement, string_field(j, "replacement", where));
    CELLM_ASSIGN_OR_RETURN(PrependScheme scheme, parse_prepend_scheme(j, where));
    DecoderStep s{DecoderKind::kMetaspace, replacement};
    s.prepend = scheme != PrependScheme::kNever;
    steps.push_back(std::move(s));
  } else if (type == "Sequence") {
    CELLM_RETURN_IF_ERROR(
        for_each_item(j, "decoders", where, [&](const json& item, const std::string& item_where) {
          return parse_decoder(item, item_where, steps);
        }));
  } else {
    return not_supported(
        "tokenizer.json: {} has type '{}', which cellm does not implement (supported: "
        "ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace, Sequence)",
        where, type);
  }
  return Status::ok();
}

Result<std::int32_t> id_from_pair(const json& j, const char* key, std::string_view where) {
  CELLM_ASSIGN_OR_RETURN(const json* v, field(j, key, where));
  if (!v->is_array() || v->size() != 2 || !(*v)[1].is_number_integer()) {
    return invalid_argument("tokenizer.json: {}.{} must be [token, id]", where, key);
  }
  return (*v)[1].get<std::int32_t>();
}

Status parse_post_processor(const json& j, const std::string& where, TokenizerState& st) {
  const std::string type = type_of(j);
  if (type == "ByteLevel") return Status::ok();  // only trims offsets
  if (type == "TemplateProcessing") {
    CELLM_ASSIGN_OR_RETURN(const json* single, field(j, "single", where));
    CELLM_ASSIGN_OR_RETURN(const json* specials, field(j, "special_tokens", where));
    if (!single->is_array())
      return invalid_argument("tokenizer.json: {}.single is not a list", where);
    bool seen_sequence = false;
    for (const json& item : *single) {
      if (item.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      if (!item.contains("SpecialToken") || !item["SpecialToken"].contains("id") ||
          !item["SpecialToken"]["id"].is_string()) {
        return invalid_argument(
            "tokenizer.json: {}.single has an item that is neither Sequence nor SpecialToken",
            where);
      }
      const std::string name = item["SpecialToken"]["id"].get<std::string>();
      auto it = specials->find(name);
      if (it == specials->end() || !it->contains("ids") || !(*it)["ids"].is_array()) {
        return invalid_argument("tokenizer.json: {}.special_tokens lacks '{}' or its ids", where,
                                name);
      }
      for (const json& id : (*it)["ids"]) {
        if (!id.is_number_integer())
          return invalid_argument("tokenizer.json: {}.special_tokens['{}'].ids holds a non-integer",
                                  where, name);
        (seen_sequence ? st.suffix : st.prefix).push_back(id.get<std::int32_t>());
      }
    }
    return Status::ok();
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    CELLM_ASSIGN_OR_RETURN(std::int32_t cls, id_from_pair(j, "cls", where));
    CELLM_ASSIGN_OR_RETURN(std::int32_t sep, id_from_pair(j, "sep", where));
    st.prefix.push_back(cls);
    st.suffix.push_back(sep);
    return Status::ok();
  }
  if (type == "Sequence") {
    return for_each_item(j, "processors", where,
                         [&](const json& item, const std::string& item_where) {
                           return parse_post_processor(item, item_where, st);
                         });
  }
  return not_supported(
      "tokenizer.json: {} has type '{}', which cellm does not implement (supported: "
      "TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, Sequence)",
      where, type);
}

Result<std::unique_ptr<BpeModel>> parse_model(const json& m) {
  const std::string type = type_of(m);
  if (!type.empty() && type != "BPE") {
    return not_supported("tokenizer.json: model.type '{}' is not supported (cellm implements BPE)",
                         type);
  }
  CELLM_ASSIGN_OR_RETURN(const json* vocab, field(m, "vocab", "model"));
  CELLM_ASSIGN_OR_RETURN(const json* merges, field(m, "merges", "model"));
  if (!vocab->is_object()) return invalid_argument("tokenizer.json: model.vocab is not an object");
  if (!merges->is_array()) return invalid_argument("tokenizer.json: model.merges is not a list");
  std::vector<std::string> tokens;
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<std::int64_t>() < 0 ||
        it.value().get<std::int64_t>() > (1 << 26)) {
      return invalid_argument("tokenizer.json: model.vocab['{}'] is not a valid id", it.key());
    }
    const auto id = it.value().get<std::size_t>();
    if (id >= tokens.size()) tokens.resize(id + 1);
    tokens[id] = it.key();
  }
  std::vector<std::pair<std::string, std::string>> pairs;
  pairs.reserve(merges->size());
  for (std::size_t i = 0; i < merges->size(); ++i) {
    const json& mj = (*merges)[i];
    if (mj.is_string()) {
      const std::string& s = mj.get_ref<const std::string&>();
      const std::size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        return invalid_argument("tokenizer.json: model.merges[{}] '{}' is not two tokens", i, s);
      }
      pairs.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (mj.is_array() && mj.size() == 2 && mj[0].is_string() && mj[1].is_string()) {
      pairs.emplace_back(mj[0].get<std::string>(), mj[1].get<std::string>());
    } else {
      return invalid_argument("tokenizer.json: model.merges[{}] is neither \"a b\" nor [a, b]", i);
    }
  }
  BpeOptions options;
  if (m.contains("unk_token") && m["unk_token"].is_string())
    options.unk_token = m["unk_token"].get<std::string>();
  options.fuse_unk = bool_or(m, "fuse_unk", false);
  options.byte_fallback = bool_or(m, "byte_fallback", false);
  options.ignore_merges = bool_or(m, "ignore_merges", false);
  if (m.contains("continuing_subword_prefix") && m["continuing_subword_prefix"].is_string()) {
    options.continuing_subword_prefix = m["continuing_subword_prefix"].get<std::string>();
  }
  if (m.contains("end_of_word_suffix") && m["end_of_word_suffix"].is_string()) {
    options.end_of_word_suffix = m["end_of_word_suffix"].get<std::string>();
  }
  if (m.contains("dropout") && m["dropout"].is_number() && m["dropout"].get<double>() > 0) {
    return not_supported("tokenizer.json: model.dropout is set; BPE dropout is for training only");
  }
  return BpeModel::from_merges(std::move(tokens), pairs, std::move(options));
}

Result<std::vector<AddedToken>> parse_added_tokens(const json& root) {
  std::vector<AddedToken> out;
  auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return out;
  if (!it->is_array()) return invalid_argument("tokenizer.json: added_tokens is not a list");
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& a = (*it)[i];
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    AddedToken t;
    CELLM_ASSIGN_OR_RETURN(const json* id, field(a, "id", where));
    if (!id->is_number_integer())
      return invalid_argument("tokenizer.json: {}.id is not an integer", where);
    t.id = id->get<std::int32_t>();
    CELLM_ASSIGN_OR_RETURN(t.content, string_field(a, "content", where));
    t.special = bool_or(a, "special", false);
    t.lstrip = bool_or(a, "lstrip", false);
    t.rstrip = bool_or(a, "rstrip", false);
    t.normalized = bool_or(a, "normalized", !t.special);
    t.single_word = bool_or(a, "single_word", false);
    out.push_back(std::move(t));
  }
  return out;
}

std::optional<std::string> config_token(const json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return std::nullopt;
}

// The regex of a "Split(regex, Isolated) then ByteLevel" pre-tokenizer (or
// of a lone regex ByteLevel), for the encode fast path; nullopt otherwise.
Result<std::optional<Regex>> byte_level_split_of(const json& pre) {
  auto plain_byte_level = [](const json& j, bool use_regex) {
    return type_of(j) == "ByteLevel" && !bool_or(j, "add_prefix_space", true) &&
           bool_or(j, "use_regex", true) == use_regex;
  };
  if (plain_byte_level(pre, true)) {
    CELLM_ASSIGN_OR_RETURN(Regex r, Regex::create(kGpt2Pattern));
    return std::optional<Regex>(std::move(r));
  }
  if (type_of(pre) != "Sequence" || !pre.contains("pretokenizers") ||
      !pre["pretokenizers"].is_array() || pre["pretokenizers"].size() != 2) {
    return std::optional<Regex>();
  }
  const json& split = pre["pretokenizers"][0];
  if (type_of(split) != "Split" || !plain_byte_level(pre["pretokenizers"][1], false) ||
      bool_or(split, "invert", false) || !split.contains("behavior") ||
      split["behavior"] != "Isolated" || !split.contains("pattern") ||
      !split["pattern"].is_object() || !split["pattern"].contains("Regex") ||
      !split["pattern"]["Regex"].is_string()) {
    return std::optional<Regex>();
  }
  CELLM_ASSIGN_OR_RETURN(Regex r, Regex::create(split["pattern"]["Regex"].get<std::string>()));
  return std::optional<Regex>(std::move(r));
}

// Builds the tokenizer; `config` (tokenizer_config.json) may name bos/eos.
Result<Tokenizer> load(std::string_view text, const json* config) {
  json root = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return invalid_argument("tokenizer.json is not valid JSON");
  if (!root.is_object()) return invalid_argument("tokenizer.json: the top level is not an object");
  auto st = std::make_unique<TokenizerState>();
  CELLM_ASSIGN_OR_RETURN(const json* model, field(root, "model", "(root)"));
  CELLM_ASSIGN_OR_RETURN(st->model, parse_model(*model));
  if (root.contains("normalizer") && !root["normalizer"].is_null()) {
    CELLM_ASSIGN_OR_RETURN(st->normalizer, parse_normalizer(root["normalizer"], "normalizer"));
  }
  if (root.contains("pre_tokenizer") && !root["pre_tokenizer"].is_null()) {
    CELLM_ASSIGN_OR_RETURN(st->pre_tokenizer,
                           parse_pre_tokenizer(root["pre_tokenizer"], "pre_tokenizer"));
    CELLM_ASSIGN_OR_RETURN(st->byte_level_split, byte_level_split_of(root["pre_tokenizer"]));
  }
  if (root.contains("post_processor") && !root["post_processor"].is_null()) {
    CELLM_RETURN_IF_ERROR(parse_post_processor(root["post_processor"], "post_processor", *st));
  }
  std::vector<DecoderStep> steps;
  if (root.contains("decoder") && !root["decoder"].is_null()) {
    CELLM_RETURN_IF_ERROR(parse_decoder(root["decoder"], "decoder", steps));
  }
  const bool no_decoder = steps.empty();
  st->decoder = DecoderChain(std::move(steps), no_decoder);
  CELLM_ASSIGN_OR_RETURN(st->added, parse_added_tokens(root));
  if (!st->prefix.empty()) st->bos = st->prefix.front();
  if (config != nullptr) {
    auto resolve = [&](const char* key) -> std::optional<std::int32_t> {
      auto name = config_token(*config, key);
      if (!name) return std::nullopt;
      for (const AddedToken& t : st->added) {
        if (t.content == *name) return t.id;
      }
      return st->model->token_to_id(*name);
    };
    if (config->contains("bos_token")) st->bos = resolve("bos_token");
    st->eos = resolve("eos_token");
  }
  return make_tokenizer(std::move(st));
}

}  // namespace

Result<Tokenizer> Tokenizer::from_json(std::string_view text) {
  return load(text, nullptr);
}

Result<Tokenizer> Tokenizer::from_file(const std::filesystem::path& path) {
  CELLM_ASSIGN_OR_RETURN(std::string data, read_file(path));
  auto tok = load(data, nullptr);
  if (!tok.ok()) return tok.status().with_context(path.string());
  return tok;
}

Result<Tokenizer> Tokenizer::from_dir(const std::filesystem::path& dir) {
  std::filesystem::path file = dir / "tokenizer.json";
  if (!std::filesystem::exists(file)) file = dir / "tokenizer.json.gz";
  if (!std::filesystem::exists(file)) {
    return not_found("{} has neither tokenizer.json nor tokenizer.json.gz", dir.string());
  }
  CELLM_ASSIGN_OR_RETURN(std::string data, read_file(file));
  json config;
  const std::filesystem::path config_path = dir / "tokenizer_config.json";
  const bool has_config = std::filesystem::exists(config_path);
  if (has_config) {
    CELLM_ASSIGN_OR_RETURN(std::string config_text, read_file(config_path));
    config = json::parse(config_text, nullptr, false);
    if (config.is_discarded() || !config.is_object()) {
      return invalid_argument("{} is not a JSON object", config_path.string());
    }
  }
  auto tok = load(data, has_config ? &config : nullptr);
  if (!tok.ok()) return tok.status().with_context(file.string());
  return tok;
}

}  // namespace cellm::text
