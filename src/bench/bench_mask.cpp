#include "bench/bench_mask.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "app/model_text.h"
#include "cellm/decode_first_scheduler.h"
#include "cellm/executor.h"
#include "cellm/runner.h"
#include "core/env.h"
#include "format/gguf.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/token_grammar.h"
#include "grammar/vocab_from_tokenizer.h"
#include "text/tokenizer.h"

namespace cellm::bench {
namespace {

using grammar::Matcher;
using grammar::TokenGrammar;
using grammar::TokenVocabulary;
using ojson = nlohmann::ordered_json;

double thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

struct Schema {
  std::string name;
  std::shared_ptr<const grammar::Grammar> grammar;
  std::string text;       // the example, as the model would write it
  double compile_us = 0;  // compile_json_schema, wall clock
};

Result<std::vector<Schema>> load_schemas(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return invalid_argument(
        "--schemas: {} is not a folder (run from the repository root or "
        "pass --schemas DIR)",
        dir.string());
  }
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) return invalid_argument("--schemas: no *.json file in {}", dir.string());
  std::vector<Schema> out;
  for (const auto& f : files) {
    std::ifstream in(f);
    ojson doc = ojson::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object() || !doc.contains("schema") || !doc.contains("example")) {
      return invalid_argument("{}: expected a JSON object with \"schema\" and \"example\"",
                              f.string());
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto g = doc["schema"].is_null() ? grammar::compile_json_object()
                                     : grammar::compile_json_schema(doc["schema"]);
    const double compile_us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (!g.ok()) return g.status().with_context(f.string());
    Schema s{f.stem().string(), *g, doc["example"].dump(), compile_us};
    if (!Matcher::matches(s.grammar, s.text)) {
      return invalid_argument("{}: the example does not match its schema", f.string());
    }
    out.push_back(std::move(s));
  }
  return out;
}

struct Vocab {
  std::shared_ptr<const text::Tokenizer> tokenizer;
  std::shared_ptr<const TokenVocabulary> vocab;
  std::optional<Token> eos;
};

Result<Vocab> load_vocab(const std::string& model) {
  auto gguf = format::GgufFile::open(model);
  if (!gguf.ok()) {
    return gguf.status().with_context(fmt::format(
        "--model {} (a GGUF file with a tokenizer; fetch the models with scripts/setup)", model));
  }
  CELLM_ASSIGN_OR_RETURN(auto gv, app::gguf_vocab(*gguf));
  CELLM_ASSIGN_OR_RETURN(auto tok, text::Tokenizer::from_gguf_vocab(gv));
  Vocab v;
  v.tokenizer = std::make_shared<const text::Tokenizer>(std::move(tok));
  v.vocab = grammar::vocabulary_from_tokenizer(*v.tokenizer, v.tokenizer->vocab_size());
  if (auto e = v.tokenizer->eos_id()) v.eos = static_cast<Token>(*e);
  return v;
}

// The example as tokens the grammar accepts in order: the tokenizer's own
// ids where the grammar takes them, else the allowed token that covers the
// longest prefix of the rest (a tokenizer may glue a leading space, say).
std::vector<Token> script(const Schema& s, const Vocab& v) {
  const std::vector<std::int32_t> ids = v.tokenizer->encode(s.text, /*add_special=*/false);
  std::vector<Token> out;
  Matcher m(s.grammar);
  std::size_t at = 0;  // bytes of the text consumed
  std::size_t next = 0;
  while (at < s.text.size()) {
    if (next < ids.size()) {
      const std::string& b = v.vocab->bytes(static_cast<Token>(ids[next]));
      if (!b.empty() && s.text.compare(at, b.size(), b) == 0 && m.advance(b)) {
        out.push_back(static_cast<Token>(ids[next++]));
        at += b.size();
        continue;
      }
    }
    next = ids.size();  // off the tokenizer's path: longest allowed prefix from here
    std::optional<Token> best;
    std::size_t best_len = 0;
    for (std::int64_t t = 0; t < v.vocab->size(); ++t) {
      const std::string& b = v.vocab->bytes(static_cast<Token>(t));
      if (b.size() > best_len && s.text.compare(at, b.size(), b) == 0) {
        Matcher probe = m;
        if (probe.advance(b)) {
          best = static_cast<Token>(t);
          best_len = b.size();
        }
      }
    }
    if (!best) break;
    m.advance(v.vocab->bytes(*best));
    out.push_back(*best);
    at += best_len;
  }
  return out;
}

struct TokenCosts {
  std::vector<double> walk_us, fast_us, served_us, create_us, compile_us;
  std::uint64_t hits = 0, misses = 0, fast_mismatches = 0;
  std::size_t tokens = 0;
};

TokenCosts per_token(const std::vector<Schema>& schemas, const Vocab& v,
                     const std::vector<std::vector<Token>>& scripts) {
  TokenCosts c;
  std::vector<std::uint32_t> words(v.vocab->mask_words()), fast(v.vocab->mask_words());
  for (std::size_t i = 0; i < schemas.size(); ++i) {
    // A fresh grammar: its cache starts cold, as for a schema seen the first time.
    const auto c0 = std::chrono::steady_clock::now();
    auto tg = TokenGrammar::create(schemas[i].grammar, v.vocab);
    c.create_us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - c0).count());
    c.compile_us.push_back(schemas[i].compile_us);
    Matcher m(schemas[i].grammar);
    for (Token t : scripts[i]) {
      double t0 = thread_cpu_us();
      tg->compute_mask(m, words);
      c.walk_us.push_back(thread_cpu_us() - t0);
      t0 = thread_cpu_us();
      tg->walk_mask(m, fast);
      c.fast_us.push_back(thread_cpu_us() - t0);
      c.fast_mismatches += fast != words ? 1 : 0;
      t0 = thread_cpu_us();
      tg->fill_mask(m, words);
      c.served_us.push_back(thread_cpu_us() - t0);
      // The walk put nothing in the cache: fill_mask's first visit is a miss.
      m.advance(v.vocab->bytes(t));
    }
    const auto st = tg->cache_stats();
    c.hits += st.hits;
    c.misses += st.misses;
    c.tokens += scripts[i].size();
  }
  return c;
}

// A forward that sleeps (the device's time, which the masks' settling
// overlaps), and a sampler that draws the session's scripted token when the
// mask allows it (else the lowest allowed).
class SleepExecutor final : public Executor {
 public:
  SleepExecutor(double forward_ms, std::vector<std::vector<Token>> scripts)
      : forward_(std::chrono::duration<double, std::milli>(forward_ms)),
        scripts_(std::move(scripts)) {}
  std::optional<SessionId> open_session() override {
    std::lock_guard lock(mu_);
    const SessionId sid = next_sid_++;
    cursor_[sid] = 0;
    script_of_[sid] = static_cast<std::size_t>(sid - 1) % scripts_.size();
    return sid;
  }
  void close_session(SessionId session) override {
    std::lock_guard lock(mu_);
    cursor_.erase(session);
    policy_.erase(session);
  }
  void set_sampling(SessionId session, const SamplingParams& params,
                    std::optional<std::uint64_t>) override {
    std::lock_guard lock(mu_);
    policy_[session] = params;
  }
  bool execute(const BatchInput& batch, BatchOutput& out) override {
    // As on the GPU: the forward runs from here while the host settles the
    // step's masks (the CUDA executor reads them after enqueueing it).
    const auto forward_done = std::chrono::steady_clock::now() + forward_;
    std::lock_guard lock(mu_);
    for (const Input& in : batch.inputs) {
      const auto p = policy_.find(in.sid);
      if (in.produce_output && p != policy_.end() && p->second.masks_tokens()) {
        p->second.token_mask->settle();
      }
    }
    std::this_thread::sleep_until(forward_done);
    out.outputs.assign(batch.inputs.size(), std::nullopt);
    for (std::size_t i = 0; i < batch.inputs.size(); ++i) {
      const Input& in = batch.inputs[i];
      if (!in.produce_output) continue;
      const std::vector<Token>& s = scripts_[script_of_[in.sid]];
      std::size_t& k = cursor_[in.sid];
      Token t = k < s.size() ? s[k] : 0;
      const auto p = policy_.find(in.sid);
      if (p != policy_.end() && p->second.masks_tokens()) {
        const TokenMask& m = *p->second.token_mask;
        m.settle();
        if (!m.allows(t)) {
          for (std::size_t w = 0; w < m.words.size(); ++w) {
            if (m.words[w] != 0) {
              t = static_cast<Token>(w * 32 + static_cast<std::size_t>(__builtin_ctz(m.words[w])));
              break;
            }
          }
        }
      }
      ++k;
      Output o;
      o.sid = in.sid;
      o.tokens = {t};
      out.outputs[i] = std::move(o);
    }
    return true;
  }

 private:
  std::chrono::duration<double, std::milli> forward_;
  std::vector<std::vector<Token>> scripts_;
  std::mutex mu_;
  SessionId next_sid_ = 1;
  std::map<SessionId, std::size_t> cursor_, script_of_;
  std::map<SessionId, SamplingParams> policy_;
};

struct ServedRun {
  std::string mode;
  std::int64_t steps = 0;
  double ms_per_step = 0;
  std::int64_t tokens = 0;
  std::int64_t failed = 0;
};

ServedRun served(const MaskBenchOptions& o, const std::vector<Schema>& schemas, const Vocab& v,
                 const std::vector<std::vector<Token>>& scripts, bool constrained) {
  SleepExecutor exec(o.forward_ms, scripts);
  const auto n = static_cast<std::size_t>(o.sessions);
  Runner runner(exec, DecodeFirstScheduler::create(n + 64, n, 32), RunnerOptions{});
  std::vector<Session> sessions;
  for (std::size_t i = 0; i < n; ++i) sessions.push_back(*runner.open_session_async().get());
  std::vector<GenerationHandle> handles;
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t si = i % schemas.size();
    GenConfig c;
    c.max_new_tokens = static_cast<std::int64_t>(scripts[si].size()) + 1;
    if (v.eos) c.stop_tokens = {*v.eos};
    // A fresh grammar per request: a cold mask cache, the worst case (the
    // server shares one grammar, and its cache, among requests of a schema).
    if (constrained)
      c.constraint = TokenGrammar::create(schemas[si].grammar, v.vocab);
    else
      c.max_new_tokens = static_cast<std::int64_t>(scripts[si].size());
    handles.push_back(sessions[i].generate_async(std::vector<Token>{1, 2, 3, 4}, std::move(c),
                                                 [](const GenerationUpdate&) {}));
  }
  ServedRun r;
  for (auto& h : handles) {
    h.wait();
    r.failed += h.finish_reason() == FinishReason::kFailed ? 1 : 0;
    r.tokens += h.metrics().n_generated_tokens;
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  sessions.clear();
  runner.shutdown();
  r.mode = constrained ? "constrained" : "unconstrained";
  r.steps = runner.metrics().steps;
  r.ms_per_step = r.steps > 0 ? ms / static_cast<double>(r.steps) : 0;
  return r;
}

}  // namespace

Status run_mask_bench(const MaskBenchOptions& o, std::FILE* out) {
  CELLM_ASSIGN_OR_RETURN(std::vector<Schema> schemas, load_schemas(o.schemas));
  if (o.sessions < 0) return invalid_argument("--sessions must be >= 0, got {}", o.sessions);
  if (!(o.forward_ms >= 0)) return invalid_argument("--forward-ms must be >= 0");
  std::ofstream json;
  if (!o.json_path.empty()) {
    json.open(o.json_path, std::ios::app);
    if (!json) return invalid_argument("--json: cannot append to {}", o.json_path);
  }
  const std::string commit = env_string("CELLM_COMMIT").value_or("unknown");
  const auto emit = [&](nlohmann::json j) {
    j["machine"] = o.machine;
    j["commit"] = commit;
    if (json) json << j.dump() << "\n" << std::flush;
  };
  for (const std::string& model : o.models) {
    CELLM_ASSIGN_OR_RETURN(Vocab v, load_vocab(model));
    std::vector<std::vector<Token>> scripts;
    for (const Schema& s : schemas) scripts.push_back(script(s, v));
    const TokenCosts c = per_token(schemas, v, scripts);
    // Again with fresh grammars: their mask caches start cold, but the
    // vocabulary's region tables (grammar/region_table.h) were built by the
    // first pass, as in a server that has seen these schema shapes before.
    const TokenCosts warm = per_token(schemas, v, scripts);
    const std::string name = std::filesystem::path(model).filename().string();
    std::fprintf(out,
                 "%s: vocab %lld, %zu schemas, %zu tokens\n"
                 "  trie walk (plain):  p50 %.1f us  p99 %.1f us  mean %.1f us\n"
                 "  fast walk (miss):   p50 %.1f us  p99 %.1f us  mean %.1f us  (%llu masks "
                 "differ from the plain walk)\n"
                 "  fast walk, tables built: p50 %.1f us  p99 %.1f us  mean %.1f us\n"
                 "  compile + create:   max %.1f + %.1f us, mean %.1f + %.1f us\n"
                 "  served (cached):    p50 %.1f us  p99 %.1f us  mean %.1f us  hit rate %.0f%%\n",
                 name.c_str(), static_cast<long long>(v.vocab->size()), schemas.size(), c.tokens,
                 quantile(c.walk_us, 0.5), quantile(c.walk_us, 0.99), mean(c.walk_us),
                 quantile(c.fast_us, 0.5), quantile(c.fast_us, 0.99), mean(c.fast_us),
                 static_cast<unsigned long long>(c.fast_mismatches), quantile(warm.fast_us, 0.5),
                 quantile(warm.fast_us, 0.99), mean(warm.fast_us), quantile(c.compile_us, 1.0),
                 quantile(c.create_us, 1.0), mean(c.compile_us), mean(c.create_us),
                 quantile(c.served_us, 0.5), quantile(c.served_us, 0.99), mean(c.served_us),
                 100.0 * static_cast<double>(c.hits) / static_cast<double>(c.hits + c.misses));
    emit({{"bench", "mask"},
          {"kind", "per_token"},
          {"model", name},
          {"vocab", v.vocab->size()},
          {"schemas", schemas.size()},
          {"tokens", c.tokens},
          {"walk_p50_us", quantile(c.walk_us, 0.5)},
          {"walk_p99_us", quantile(c.walk_us, 0.99)},
          {"walk_mean_us", mean(c.walk_us)},
          {"fast_p50_us", quantile(c.fast_us, 0.5)},
          {"fast_p99_us", quantile(c.fast_us, 0.99)},
          {"fast_mean_us", mean(c.fast_us)},
          {"fast_mismatches", c.fast_mismatches + warm.fast_mismatches},
          {"fast_warm_p50_us", quantile(warm.fast_us, 0.5)},
          {"fast_warm_p99_us", quantile(warm.fast_us, 0.99)},
          {"fast_warm_mean_us", mean(warm.fast_us)},
          {"compile_max_us", quantile(c.compile_us, 1.0)},
          {"compile_mean_us", mean(c.compile_us)},
          {"create_max_us", quantile(c.create_us, 1.0)},
          {"create_mean_us", mean(c.create_us)},
          {"served_p50_us", quantile(c.served_us, 0.5)},
          {"served_p99_us", quantile(c.served_us, 0.99)},
          {"served_mean_us", mean(c.served_us)},
          {"cache_hits", c.hits},
          {"cache_misses", c.misses}});
    if (o.sessions == 0) continue;
    std::vector<ServedRun> runs;
    runs.push_back(served(o, schemas, v, scripts, false));
    runs.push_back(served(o, schemas, v, scripts, true));
    const double base = runs[0].ms_per_step;
    std::fprintf(out, "  served steps, %d sessions, forward %.1f ms (fake executor):\n", o.sessions,
                 o.forward_ms);
    for (const ServedRun& r : runs) {
      std::fprintf(out,
                   "    %-13s %lld steps, %.2f ms/step (%.0f%% of unconstrained "
                   "throughput), %lld tokens, %lld failed\n",
                   r.mode.c_str(), static_cast<long long>(r.steps), r.ms_per_step,
                   100.0 * base / r.ms_per_step, static_cast<long long>(r.tokens),
                   static_cast<long long>(r.failed));
      emit({{"bench", "mask"},
            {"kind", "served_steps"},
            {"model", name},
            {"vocab", v.vocab->size()},
            {"sessions", o.sessions},
            {"forward_ms", o.forward_ms},
            {"mode", r.mode},
            {"steps", r.steps},
            {"ms_per_step", r.ms_per_step},
            {"relative_throughput", base / r.ms_per_step},
            {"tokens", r.tokens},
            {"failed", r.failed}});
    }
  }
  return Status::ok();
}

}  // namespace cellm::bench
