// Tokenizer throughput: encoding ~1 MB of generated English prose on one core
// (target for llama3: >= 20 MB/s), plus decode and streaming detokenization.
// Fixtures are found through $CELLM_TESTDATA or a shared/testdata (or
// .testdata) folder above the working directory.
#include <filesystem>
#include <map>
#include <random>
#include <string>

#include <benchmark/benchmark.h>

#include "core/env.h"
#include "text/detokenizer.h"
#include "text/tokenizer.h"

namespace {

std::filesystem::path testdata_dir() {
  if (auto env = cellm::env_string("CELLM_TESTDATA")) return *env;
  for (auto dir = std::filesystem::current_path();; dir = dir.parent_path()) {
    for (const char* rel : {"shared/testdata", "../shared/testdata", ".testdata"}) {
      if (std::filesystem::exists(dir / rel / "tokenizers")) return dir / rel;
    }
    if (dir == dir.parent_path()) break;
  }
  return "/work/shared/testdata";
}

const cellm::text::Tokenizer* tokenizer(const std::string& name) {
  static std::map<std::string, cellm::text::Tokenizer> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    auto tok = cellm::text::Tokenizer::from_dir(testdata_dir() / "tokenizers" / name);
    if (!tok.ok()) return nullptr;
    it = cache.emplace(name, std::move(tok).value()).first;
  }
  return &it->second;
}

// About 1 MB of English-like prose: Zipf-distributed common words, one word
// in ten invented from syllables (so the word cache also sees misses),
// capitalised sentences, commas, numbers, quotes and paragraphs.
const std::string& prose() {
  static const std::string text = [] {
    static const char* kWords[] = {
        "the",
        "of",
        "and",
        "to",
        "a",
        "in",
        "that",
        "it",
        "was",
        "he",
        "for",
        "on",
        "is",
        "with",
        "as",
        "his",
        "be",
        "at",
        "by",
        "had",
        "not",
        "but",
        "from",
        "this",
        "have",
        "which",
        "or",
        "she",
        "they",
        "were",
        "her",
        "an",
        "one",
        "all",
        "would",
        "there",
        "their",
        "we",
        "him",
        "been",
        "has",
        "when",
        "who",
        "will",
        "more",
        "no",
        "if",
        "out",
        "so",
        "said",
        "what",
        "up",
        "its",
        "about",
        "into",
        "than",
        "them",
        "can",
        "only",
        "other",
        "new",
        "some",
        "could",
        "time",
        "these",
        "two",
        "may",
        "then",
        "do",
        "first",
        "any",
        "my",
        "now",
        "such",
        "like",
        "our",
        "over",
        "man",
        "me",
        "even",
        "most",
        "made",
        "after",
        "also",
        "did",
        "many",
        "before",
        "must",
        "through",
        "back",
        "years",
        "where",
        "much",
        "your",
        "way",
        "well",
        "down",
        "should",
        "because",
        "each",
        "just",
        "those",
        "people",
        "how",
        "too",
        "little",
        "state",
        "good",
        "very",
        "make",
        "world",
        "still",
        "own",
        "see",
        "men",
        "work",
        "long",
        "get",
        "here",
        "between",
        "both",
        "life",
        "being",
        "under",
        "never",
        "day",
        "same",
        "another",
        "know",
        "while",
        "last",
        "might",
        "us",
        "great",
        "old",
        "year",
        "off",
        "come",
        "since",
        "against",
        "go",
        "came",
        "right",
        "used",
        "take",
        "three",
        "morning",
        "river",
        "garden",
        "window",
        "letter",
        "mountain",
        "silence",
        "journey",
        "harbour",
        "lantern",
        "whispered",
        "remembered",
        "extraordinary",
        "nevertheless",
        "circumstances",
        "understanding",
        "particularly",
        "conversation",
        "immediately",
        "neighbourhood",
    };
    constexpr std::size_t kCount = sizeof(kWords) / sizeof(kWords[0]);
    static const char* kSyllables[] = {"ka",   "lor", "men",  "di",  "ther", "os",
                                       "ving", "bra", "quel", "sto", "ne",   "phi",
                                       "rum",  "ta",  "ist",  "cor", "ald",  "une"};
    std::mt19937 rng(42);
    std::vector<double> weights(kCount);
    for (std::size_t i = 0; i < kCount; ++i) weights[i] = 1.0 / static_cast<double>(i + 1);
    std::discrete_distribution<std::size_t> pick(weights.begin(), weights.end());
    std::string out;
    bool sentence_start = true;
    int in_sentence = 0;
    while (out.size() < (1u << 20)) {
      std::string word;
      if (rng() % 10 == 0) {
        for (int s = 0, n = 2 + static_cast<int>(rng() % 3); s < n; ++s)
          word += kSyllables[rng() % 18];
      } else {
        word = kWords[pick(rng)];
      }
      if (rng() % 60 == 0) word = std::to_string(rng() % 2000);
      if (sentence_start)
        word[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(word[0])));
      if (rng() % 80 == 0) word = "\"" + word + "\"";
      out += word;
      sentence_start = false;
      ++in_sentence;
      if (in_sentence > 6 && rng() % 9 == 0) {
        out += (rng() % 7 == 0) ? "?" : ".";
        sentence_start = true;
        in_sentence = 0;
        out += (rng() % 8 == 0) ? "\n\n" : " ";
      } else {
        out += (rng() % 12 == 0) ? ", " : " ";
      }
    }
    return out;
  }();
  return text;
}

void encode_prose(benchmark::State& state, const std::string& name) {
  const auto* tok = tokenizer(name);
  if (tok == nullptr) {
    state.SkipWithError("tokenizer fixture not found; set CELLM_TESTDATA");
    return;
  }
  const std::string& text = prose();
  std::size_t tokens = 0;
  for (auto _ : state) {
    auto ids = tok->encode(text, false);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(tokens);
}

void BM_EncodeProseLlama3(benchmark::State& state) {
  encode_prose(state, "llama3");
}
void BM_EncodeProseQwen3(benchmark::State& state) {
  encode_prose(state, "qwen3");
}
void BM_EncodeProseLlama2(benchmark::State& state) {
  encode_prose(state, "llama2");
}
void BM_EncodeProseGemma3(benchmark::State& state) {
  encode_prose(state, "gemma3");
}
BENCHMARK(BM_EncodeProseLlama3)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_EncodeProseQwen3)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EncodeProseLlama2)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EncodeProseGemma3)->Unit(benchmark::kMillisecond);

void BM_DecodeProseLlama3(benchmark::State& state) {
  const auto* tok = tokenizer("llama3");
  if (tok == nullptr) return state.SkipWithError("tokenizer fixture not found");
  const auto ids = tok->encode(prose(), false);
  for (auto _ : state) benchmark::DoNotOptimize(tok->decode(ids, true));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * prose().size()));
}
BENCHMARK(BM_DecodeProseLlama3)->Unit(benchmark::kMillisecond);

void BM_StreamProseLlama3(benchmark::State& state) {
  const auto* tok = tokenizer("llama3");
  if (tok == nullptr) return state.SkipWithError("tokenizer fixture not found");
  const auto ids = tok->encode(prose(), false);
  for (auto _ : state) {
    cellm::text::StreamingDetokenizer detok(*tok);
    std::size_t n = 0;
    for (auto id : ids) n += detok.push(id).size();
    benchmark::DoNotOptimize(n);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * ids.size()));
}
BENCHMARK(BM_StreamProseLlama3)->Unit(benchmark::kMillisecond);

}  // namespace
