// Constrained decoding's host cost: the token mask of a grammar state over a
// real vocabulary. The default vocabulary is SmolLM2's (49,152 ids, from
// models/SmolLM2-135M-Instruct.Q4_1.gguf, or $CELLMDEV_BENCH_GGUF); the Llama 3
// (128k) and Qwen3 (151k) tokenizers of the test fixtures give the larger
// cases. For each schema a JSON text is walked byte by byte and the mask is
// computed at every state it passes (a superset of the states a generation
// meets at token boundaries):
//   BM_MaskWalk     the trie walk itself (a cache miss); counters p50_us and
//                   p99_us over the states in thread CPU time (robust on a
//                   shared machine), mean from the benchmark
//   BM_MaskCached   the same states through the per-grammar mask cache once
//                   warm (what repeated states of a generation cost)
//   BM_Compile      schema -> grammar -> TokenGrammar
#include <algorithm>
#include <ctime>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "app/model_text.h"
#include "core/env.h"
#include "format/gguf.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/token_grammar.h"
#include "grammar/vocab_from_tokenizer.h"
#include "text/tokenizer.h"

namespace {

using cellm::grammar::Matcher;
using cellm::grammar::TokenGrammar;
using cellm::grammar::TokenVocabulary;
using json = nlohmann::ordered_json;

std::filesystem::path find_up(const std::filesystem::path& rel) {
  for (auto dir = std::filesystem::current_path();; dir = dir.parent_path()) {
    if (std::filesystem::exists(dir / rel)) return dir / rel;
    if (dir == dir.parent_path()) break;
  }
  return {};
}

std::shared_ptr<const TokenVocabulary> vocabulary(const std::string& name) {
  static std::map<std::string, std::shared_ptr<const TokenVocabulary>> cache;
  if (auto it = cache.find(name); it != cache.end()) return it->second;
  std::shared_ptr<const TokenVocabulary> v;
  if (name == "smollm2") {
    std::filesystem::path path = cellm::env_string("CELLMDEV_BENCH_GGUF").value_or("");
    if (path.empty()) path = find_up("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    auto gguf = cellm::format::GgufFile::open(path);
    if (gguf.ok()) {
      auto vocab = cellm::app::gguf_vocab(*gguf);
      if (vocab.ok()) {
        auto tok = cellm::text::Tokenizer::from_gguf_vocab(*vocab);
        if (tok.ok()) v = cellm::grammar::vocabulary_from_tokenizer(*tok, tok->vocab_size());
      }
    }
  } else {
    std::filesystem::path dir = cellm::env_string("CELLM_TESTDATA").value_or("");
    if (dir.empty()) dir = find_up("shared/testdata");
    auto tok = cellm::text::Tokenizer::from_dir(dir / "tokenizers" / name);
    if (tok.ok()) v = cellm::grammar::vocabulary_from_tokenizer(*tok, tok->vocab_size());
  }
  cache[name] = v;
  return v;
}

double thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

struct Case {
  const char* name;
  const char* schema;  // null: json_object
  const char* text;
};

const Case kCases[] = {
    {"json_object", nullptr,
     R"({"city": "Paris", "population": 2148000, "tags": ["capital", "france"], "ok": true})"},
    {"person",
     R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
        "color":{"enum":["red","green","blue"]}},"required":["name","age","color"],
        "additionalProperties":false})",
     R"({"name": "Ada Lovelace wrote the first program", "age": 36, "color": "green"})"},
    {"nested",
     R"({"type":"object","properties":{"user":{"type":"object","properties":{
        "first":{"type":"string"},"last":{"type":"string"},"email":{"type":"string",
        "format":"email"}},"required":["first","last","email"]},"tags":{"type":"array",
        "items":{"enum":["a","b","c"]},"maxItems":4},"when":{"type":"string",
        "format":"date-time"}},"required":["user","tags","when"],"additionalProperties":false})",
     R"({"user": {"first": "Grace", "last": "Hopper", "email": "grace@navy.example.mil"},
        "tags": ["a", "c"], "when": "1952-05-01T09:30:00Z"})"},
};

struct Prepared {
  std::shared_ptr<const TokenGrammar> grammar;
  std::vector<Matcher> states;  // one per byte position of the text
};

Prepared prepare(const Case& c, const std::shared_ptr<const TokenVocabulary>& vocab) {
  auto g = c.schema ? cellm::grammar::compile_json_schema(json::parse(c.schema))
                    : cellm::grammar::compile_json_object();
  Prepared p;
  if (!g.ok()) return p;
  p.grammar = TokenGrammar::create(*g, vocab);
  Matcher m(*g);
  for (char ch : std::string(c.text)) {
    p.states.push_back(m);
    if (!m.advance(static_cast<std::uint8_t>(ch))) return {};
  }
  return p;
}

void BM_MaskWalk(benchmark::State& state, const char* vocab_name, const Case* c) {
  auto vocab = vocabulary(vocab_name);
  if (!vocab) return state.SkipWithError("vocabulary not found (see the file comment)");
  Prepared p = prepare(*c, vocab);
  if (p.states.empty()) return state.SkipWithError("the case text does not match its schema");
  std::vector<std::uint32_t> words(vocab->mask_words());
  std::vector<double> us;
  std::size_t i = 0;
  for (auto _ : state) {
    Matcher& m = p.states[i++ % p.states.size()];
    const double t0 = thread_cpu_us();
    p.grammar->compute_mask(m, words);
    us.push_back(thread_cpu_us() - t0);
    benchmark::DoNotOptimize(words.data());
  }
  std::sort(us.begin(), us.end());
  state.counters["p50_us"] = us[us.size() / 2];
  state.counters["p99_us"] = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  state.counters["vocab"] = static_cast<double>(vocab->size());
  state.counters["states"] = static_cast<double>(p.states.size());
}

void BM_MaskCached(benchmark::State& state, const char* vocab_name, const Case* c) {
  auto vocab = vocabulary(vocab_name);
  if (!vocab) return state.SkipWithError("vocabulary not found (see the file comment)");
  Prepared p = prepare(*c, vocab);
  if (p.states.empty()) return state.SkipWithError("the case text does not match its schema");
  std::vector<std::uint32_t> words(vocab->mask_words());
  for (Matcher& m : p.states) p.grammar->fill_mask(m, words);  // warm
  std::size_t i = 0;
  for (auto _ : state) {
    p.grammar->fill_mask(p.states[i++ % p.states.size()], words);
    benchmark::DoNotOptimize(words.data());
  }
}

void BM_Compile(benchmark::State& state, const char* vocab_name, const Case* c) {
  auto vocab = vocabulary(vocab_name);
  if (!vocab) return state.SkipWithError("vocabulary not found (see the file comment)");
  for (auto _ : state) {
    auto g = c->schema ? cellm::grammar::compile_json_schema(json::parse(c->schema))
                       : cellm::grammar::compile_json_object();
    benchmark::DoNotOptimize(TokenGrammar::create(*g, vocab));
  }
}

int register_all() {
  for (const char* vocab : {"smollm2", "llama3"}) {
    for (const Case& c : kCases) {
      const std::string suffix = std::string(vocab) + "/" + c.name;
      benchmark::RegisterBenchmark(("BM_MaskWalk/" + suffix).c_str(), BM_MaskWalk, vocab, &c)
          ->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark(("BM_MaskCached/" + suffix).c_str(), BM_MaskCached, vocab, &c)
          ->Unit(benchmark::kMicrosecond);
    }
    benchmark::RegisterBenchmark(("BM_Compile/" + std::string(vocab) + "/nested").c_str(),
                                 BM_Compile, vocab, &kCases[2])
        ->Unit(benchmark::kMicrosecond);
  }
  return 0;
}
const int registered = register_all();

}  // namespace
