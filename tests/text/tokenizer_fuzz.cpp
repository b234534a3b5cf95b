// Fuzz target for the text library. The first input byte picks the mode:
//   0: the rest is a tokenizer.json; if it loads, encode/decode a probe text;
//   1: the rest is text for a small byte-level tokenizer (encode, decode,
//      stream the ids through the detokenizer and a stop matcher);
//   2: the same with a small SentencePiece-style (byte fallback) tokenizer;
//   3: the rest is read as little-endian int32 ids to decode and stream.
// Invariants checked: ids are in range, decode/stream output is valid UTF-8
// and streaming equals decode.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/utf8.h"
#include "text/detokenizer.h"
#include "core/stop_matcher.h"
#include "text/tokenizer.h"

namespace {

using cellm::text::Tokenizer;

constexpr const char* kByteLevelJson = R"({
  "added_tokens": [{"id": 300, "content": "<|end|>", "special": true},
                   {"id": 301, "content": "<x>", "special": false, "lstrip": true, "rstrip": true},
                   {"id": 302, "content": "ab", "single_word": true, "normalized": true}],
  "normalizer": {"type": "NFC"},
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "(?i:'s|'t)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
       "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
  "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|end|>"}}, {"Sequence": {"id": "A"}}],
                     "special_tokens": {"<|end|>": {"ids": [300]}}},
  "decoder": {"type": "ByteLevel"},
  "model": {"type": "BPE", "vocab": VOCAB, "merges": [["t", "h"], ["th", "e"], ["Ġ", "the"]]}})";

constexpr const char* kSentencePieceJson = R"({
  "added_tokens": [{"id": 0, "content": "<unk>", "special": true}, {"id": 1, "content": "<s>", "special": true}],
  "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                 {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
  "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false},
  "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}],
                     "special_tokens": {"<s>": {"ids": [1]}}},
  "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
              {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
  "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": true, "fuse_unk": true,
            "vocab": VOCAB, "merges": [["▁", "t"], ["h", "e"], ["▁t", "he"]]}})";

std::string json_escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

Tokenizer build(bool byte_level) {
  std::string vocab = "{";
  int id = 0;
  auto add = [&](const std::string& t) {
    if (id > 0) vocab += ",";
    vocab += '"';
    vocab += json_escape(t);
    vocab += "\": ";
    vocab += std::to_string(id++);
  };
  std::string json;
  if (byte_level) {
    // The 256 byte-level characters come first, then the merged pieces.
    for (int b = 0; b < 256; ++b) {
      const bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      static int extra = 0;
      if (b == 0) extra = 0;
      add(cellm::utf8::encode(printable ? static_cast<char32_t>(b)
                                        : static_cast<char32_t>(256 + extra++)));
    }
    for (const char* t : {"th", "the", "\xC4\xA0the"}) add(t);
    json = kByteLevelJson;
  } else {
    for (const char* t :
         {"<unk>", "<s>", "\xE2\x96\x81", "t", "h", "e", "\xE2\x96\x81t", "he", "\xE2\x96\x81the"})
      add(t);
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      add(name);
    }
    json = kSentencePieceJson;
  }
  vocab += "}";
  json.replace(json.find("VOCAB"), 5, vocab);
  auto tok = Tokenizer::from_json(json);
  if (!tok.ok()) {
    std::fprintf(stderr, "fuzz tokenizer does not load: %s\n", tok.status().to_string().c_str());
    std::abort();
  }
  return std::move(tok).value();
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
    std::abort();
  }
}

void exercise_ids(const Tokenizer& tok, const std::vector<std::int32_t>& ids) {
  for (bool skip : {false, true}) {
    const std::string text = tok.decode(ids, skip);
    check(cellm::utf8::is_valid(text), "decode is valid UTF-8");
    cellm::text::StreamingDetokenizer detok(tok, skip);
    auto stop = cellm::StopMatcher::create({"the", "\xE2\x96\x81\xE2\x96\x81"});
    check(stop.ok(), "stop matcher builds");
    std::string streamed, shown;
    bool stopped = false;
    for (auto id : ids) {
      const std::string piece = detok.push(id);
      check(cellm::utf8::is_valid(piece), "streamed piece is valid UTF-8");
      streamed += piece;
      if (!stopped) {
        auto out = stop->push(piece);
        shown += out.text;
        stopped = out.stopped;
      }
    }
    const std::string tail = detok.finish();
    streamed += tail;
    if (!stopped) {
      shown += stop->push(tail).text;  // before finish(): + does not order its operands
      shown += stop->finish();
    }
    check(streamed == text, "streaming equals decode");
    check(text.compare(0, shown.size(), shown) == 0, "stop matcher output is a prefix of the text");
  }
}

void exercise_text(const Tokenizer& tok, std::string_view text) {
  for (bool special : {false, true}) {
    const auto ids = tok.encode(text, special);
    for (auto id : ids) check(id >= 0 && id < tok.vocab_size(), "id in range");
    exercise_ids(tok, ids);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  static const Tokenizer byte_level = build(true);
  static const Tokenizer sentence_piece = build(false);
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0: {
      auto tok = Tokenizer::from_json(rest);
      if (tok.ok()) exercise_text(*tok, "Hello w\xC3\xB6rld <s> the \xF0\x9F\x98\x80 12345");
      break;
    }
    case 1: exercise_text(byte_level, rest); break;
    case 2: exercise_text(sentence_piece, rest); break;
    case 3: {
      std::vector<std::int32_t> ids(rest.size() / 4);
      if (!ids.empty()) std::memcpy(ids.data(), rest.data(), ids.size() * 4);
      for (auto& id : ids)
        id = static_cast<std::int32_t>(static_cast<std::uint32_t>(id) % 600u) - 20;
      exercise_ids(byte_level, ids);
      exercise_ids(sentence_piece, ids);
      break;
    }
  }
  return 0;
}
