// The first-hour defaults (unit): engine sizing (app/sizing.h) against its
// rules, the model search path (app/model_path.h) over temporary folders, and
// the model's sampling defaults (app/generation_defaults.h) from
// generation_config.json, the golden fixture folders and GGUF-style keys.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "app/generation_defaults.h"
#include "app/model_path.h"
#include "app/sizing.h"
#include "support/testdata.h"

namespace cellm::app {
namespace {

namespace fs = std::filesystem;

// ----------------------------------------------------------------- sizing

SizingRequest pool_request(std::int64_t context, std::int64_t pool, std::int32_t entries) {
  SizingRequest q;
  q.model_context = context;
  q.pool_cells = pool;
  q.fixed_snapshots = entries;
  q.per_request_snapshots = entries > 0 ? 1 : 0;
  return q;
}

TEST(SizingTest, AmplePoolKeepsTheModelsContextAndTheDefaultSessions) {
  const std::int64_t context = 8192;
  // Room for every request session, its prompt snapshot and 16 cache entries.
  const std::int64_t pool = (2 * kDefaultSessions + 16) * context + 5;
  auto s = size_engine(pool_request(context, pool, 16));
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->context, context);
  EXPECT_EQ(s->sessions, kDefaultSessions);
  EXPECT_EQ(s->snapshot_sessions, 16 + kDefaultSessions);
  EXPECT_EQ(s->total_sessions(), 2 * kDefaultSessions + 16);
  EXPECT_EQ(s->pool_cells, pool);
  EXPECT_EQ(s->context_reason, "the model's");
  EXPECT_EQ(s->sessions_reason, "the default");
}

TEST(SizingTest, SmallerPoolKeepsTheSessionsAndDividesThePool) {
  const std::int64_t context = 32768;
  const std::int64_t pool = 40 * context;  // less than a context for each session and entry
  auto s = size_engine(pool_request(context, pool, 4));
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->sessions, kDefaultSessions);
  // Each request, its prompt snapshot and each cache entry reserve a context.
  EXPECT_EQ(s->context, pool / (2 * kDefaultSessions + 4));
  EXPECT_LE(static_cast<std::int64_t>(s->total_sessions()) * s->context, pool);
  EXPECT_EQ(s->snapshot_sessions, 4 + kDefaultSessions);
  EXPECT_NE(s->context_reason.find("the model's is 32768"), std::string::npos)
      << s->context_reason;
}

TEST(SizingTest, TinyPoolGivesUpSessionsToKeepTheMinimumContext) {
  const std::int64_t context = 32768;
  const std::int64_t pool = 2 * context;  // 1024 tokens for each of the default sessions
  auto s = size_engine(pool_request(context, pool, 0));
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->sessions, pool / kMinPoolContext);  // no cache: no snapshots
  EXPECT_EQ(s->context, kMinPoolContext);
  EXPECT_LE(static_cast<std::int64_t>(s->total_sessions()) * s->context, pool);
  EXPECT_NE(s->sessions_reason.find("as many as fit"), std::string::npos) << s->sessions_reason;
}

TEST(SizingTest, PoolSmallerThanTheMinimumContextKeepsOneSession) {
  auto s = size_engine(pool_request(32768, 1000, 0));
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->sessions, 1);
  EXPECT_EQ(s->context, 1000);
  auto with_cache = size_engine(pool_request(32768, 1000, 2));
  ASSERT_TRUE(with_cache.ok()) << with_cache.status().to_string();
  EXPECT_EQ(with_cache->sessions, 1);
  EXPECT_EQ(with_cache->context, 1000 / 4);  // the request, its snapshot and two entries
}

TEST(SizingTest, GivenSessionsDivideThePoolUpToTheModelsContext) {
  SizingRequest q = pool_request(8192, 100000, 0);
  q.sessions = 50;
  auto s = size_engine(q);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->sessions, 50);
  EXPECT_EQ(s->context, 100000 / 50);
  q.sessions = 2;
  s = size_engine(q);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->context, 8192);  // capped by the model
}

TEST(SizingTest, ContextBeyondTheModelNamesTheFlagAndTheLimit) {
  SizingRequest q = pool_request(8192, 1 << 24, 0);
  q.session_tokens = 9000;
  auto s = size_engine(q);
  ASSERT_FALSE(s.ok());
  const std::string m(s.status().message());
  EXPECT_NE(m.find("--max-session-tokens 9000"), std::string::npos) << m;
  EXPECT_NE(m.find("at most 8192"), std::string::npos) << m;
}

TEST(SizingTest, OverfullPoolSuggestsValuesThatFit) {
  SizingRequest q = pool_request(8192, 10000, 0);
  q.sessions = 8;
  q.session_tokens = 4096;
  auto s = size_engine(q);
  ASSERT_FALSE(s.ok());
  const std::string m(s.status().message());
  EXPECT_NE(m.find("--max-sessions 8"), std::string::npos) << m;
  // 10000 cells over 8 sessions, or 10000 / 4096 sessions.
  EXPECT_NE(m.find("--max-session-tokens " + std::to_string(10000 / 8)), std::string::npos) << m;
  EXPECT_NE(m.find("--max-sessions " + std::to_string(10000 / 4096)), std::string::npos) << m;
  // The suggestions really fit.
  q.session_tokens = 10000 / 8;
  EXPECT_TRUE(size_engine(q).ok());
  q.session_tokens = 4096;
  q.sessions = 10000 / 4096;
  EXPECT_TRUE(size_engine(q).ok());
}

TEST(SizingTest, ChosenCpuPoolHoldsEverySessionAndIsWiderThanTheStep) {
  SizingRequest q;
  q.model_context = 8192;
  q.sessions = 4;
  q.session_tokens = 300;  // 1200 cells: narrower than a 2048-token step
  q.max_step = 2048;
  q.cell_bytes = 1000;
  q.memory_budget_bytes = 1ull << 40;
  auto s = size_engine(q);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->context, 300);
  EXPECT_GE(s->pool_cells, static_cast<std::int64_t>(q.max_step));
  EXPECT_GE(s->pool_cells, static_cast<std::int64_t>(s->total_sessions()) * s->context);
}

TEST(SizingTest, CpuBudgetBoundsTheRequestSessionsOnly) {
  SizingRequest q;
  q.model_context = 32768;
  q.cell_bytes = 36864;
  q.fixed_snapshots = 16;
  q.per_request_snapshots = 1;
  q.max_step = 2048;
  // Memory for 20 full contexts: 20 sessions; snapshots come on top.
  q.memory_budget_bytes = 20ull * 32768 * 36864 + 100;
  auto s = size_engine(q);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->context, 32768);
  EXPECT_EQ(s->sessions, 20);
  EXPECT_EQ(s->snapshot_sessions, 16 + 20);
  EXPECT_EQ(s->pool_cells, static_cast<std::int64_t>(s->total_sessions()) * 32768);
  const std::string line = sizing_summary(*s, q.cell_bytes);
  EXPECT_NE(line.find("context 32768 (the model's)"), std::string::npos) << line;
  EXPECT_NE(line.find("20 sessions"), std::string::npos) << line;
}

// ------------------------------------------------------------ model path

class ModelPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    root_ = fs::temp_directory_path() / ("cellm_model_path_" + std::to_string(rd()));
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  fs::path touch(const fs::path& p) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << "x";
    return p;
  }

  fs::path root_;
};

TEST_F(ModelPathTest, DataFolderFollowsXdgThenHome) {
  EXPECT_EQ(data_models_folder("/x/data", "/home/u"), fs::path("/x/data/cellm/models"));
  EXPECT_EQ(data_models_folder(nullptr, "/home/u"),
            fs::path("/home/u/.local/share/cellm/models"));
  // A relative XDG_DATA_HOME is invalid (XDG spec) and ignored.
  EXPECT_EQ(data_models_folder("rel", "/home/u"), fs::path("/home/u/.local/share/cellm/models"));
  EXPECT_FALSE(data_models_folder(nullptr, nullptr).has_value());
}

TEST_F(ModelPathTest, CheckoutIsFoundAboveTheExecutable) {
  touch(root_ / "repo" / "scripts" / "fetch-model");
  const fs::path exe = touch(root_ / "repo" / "build" / "x" / "bin" / "cellm");
  EXPECT_EQ(checkout_models_folder(exe), root_ / "repo" / "models");
  EXPECT_FALSE(checkout_models_folder(touch(root_ / "elsewhere" / "cellm")).has_value());
}

TEST_F(ModelPathTest, NamesAreLookedUpInOrder) {
  ModelSearch s;
  s.data_models = root_ / "data";
  s.checkout_models = root_ / "checkout";
  const std::string smol = *known_model_file("smollm2");
  const fs::path in_checkout = touch(root_ / "checkout" / smol);
  auto r = resolve_model("", s);  // no argument, no CELLM_MODEL: smollm2
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, in_checkout);
  const fs::path in_data = touch(root_ / "data" / smol);
  r = resolve_model("smollm2", s);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, in_data);  // the data folder comes first
  // A file name is looked up too.
  const fs::path other = touch(root_ / "checkout" / "other.gguf");
  r = resolve_model("other.gguf", s);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, other);
}

TEST_F(ModelPathTest, ArgumentThenEnvironment) {
  ModelSearch s;
  s.data_models = root_ / "data";
  const fs::path gemma = touch(root_ / "data" / *known_model_file("gemma3"));
  const fs::path explicit_path = touch(root_ / "mine.gguf");
  s.cellm_model = "gemma3";
  auto r = resolve_model("", s);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, gemma);
  r = resolve_model(explicit_path.string(), s);  // the argument wins over CELLM_MODEL
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, explicit_path);
  s.cellm_model = explicit_path.string();  // CELLM_MODEL may be a path
  r = resolve_model("", s);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, explicit_path);
}

TEST_F(ModelPathTest, MissListsEveryPlaceAndHowToFetch) {
  ModelSearch s;
  s.data_models = root_ / "data";
  s.checkout_models = root_ / "checkout";
  auto r = resolve_model("gemma3", s);
  ASSERT_FALSE(r.ok());
  const std::string m(r.status().message());
  const std::string file = *known_model_file("gemma3");
  EXPECT_NE(m.find((root_ / "data" / file).string()), std::string::npos) << m;
  EXPECT_NE(m.find((root_ / "checkout" / file).string()), std::string::npos) << m;
  EXPECT_LT(m.find((root_ / "data").string()), m.find((root_ / "checkout").string())) << m;
  EXPECT_NE(m.find("scripts/fetch-model gemma3"), std::string::npos) << m;
  s.cellm_model = "nothing-here";
  r = resolve_model("", s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("$CELLM_MODEL"), std::string::npos);
  // A path with folders is not looked up in the search folders.
  r = resolve_model("some/dir/x.gguf", s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(std::string(r.status().message()).find((root_ / "data").string()), std::string::npos);
}

// ------------------------------------------------- generation defaults

TEST(GenerationDefaultsTest, SamplingConfigIsReadWhenDoSample) {
  auto d = parse_generation_config(
      nlohmann::json{{"do_sample", true}, {"top_k", 64}, {"top_p", 0.95},
                     {"repetition_penalty", 1.1}},
      "cfg");
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_FLOAT_EQ(d->temperature.value_or(-1), 1.0f);  // transformers' default
  EXPECT_FLOAT_EQ(d->top_p.value_or(-1), 0.95f);
  EXPECT_EQ(d->top_k.value_or(-1), 64);
  EXPECT_FLOAT_EQ(d->repetition_penalty.value_or(-1), 1.1f);
  EXPECT_EQ(d->source, "cfg");

  SamplingParams p;  // built-in values: greedy
  SamplingGiven given;
  given.top_k = true;
  p.top_k = 5;
  apply_sampling_defaults(*d, given, p);
  EXPECT_FLOAT_EQ(p.temperature, 1.0f);
  EXPECT_FLOAT_EQ(p.top_p, 0.95f);
  EXPECT_EQ(p.top_k, 5);  // given by the caller: kept
}

TEST(GenerationDefaultsTest, WithoutDoSampleTheModelDecodesGreedily) {
  auto d = parse_generation_config(nlohmann::json{{"temperature", 0.7}}, "cfg");
  ASSERT_TRUE(d.ok());
  EXPECT_FLOAT_EQ(d->temperature.value_or(-1), 0.0f);
  d = parse_generation_config(nlohmann::json{{"bos_token_id", 1}}, "cfg");
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->any());
}

TEST(GenerationDefaultsTest, BadValuesNameTheKey) {
  auto d = parse_generation_config(nlohmann::json{{"do_sample", true}, {"top_p", 1.5}}, "cfg");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(std::string(d.status().message()).find("top_p"), std::string::npos);
  d = parse_generation_config(nlohmann::json{{"do_sample", true}, {"temperature", "hot"}}, "cfg");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(std::string(d.status().message()).find("temperature"), std::string::npos);
}

TEST(GenerationDefaultsTest, HuggingFaceFolders) {
  std::random_device rd;
  const fs::path dir = fs::temp_directory_path() / ("cellm_gencfg_" + std::to_string(rd()));
  fs::create_directories(dir);
  std::ofstream(dir / "generation_config.json")
      << R"({"do_sample": true, "temperature": 0.6, "top_p": 0.9})";
  model::LoadedModel m;
  m.path = dir;
  auto d = load_generation_defaults(m);
  fs::remove_all(dir);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_FLOAT_EQ(d->temperature.value_or(-1), 0.6f);
  EXPECT_FLOAT_EQ(d->top_p.value_or(-1), 0.9f);
  EXPECT_FALSE(d->top_k.has_value());

  // The golden fixtures ship a generation_config.json without sampling keys.
  const fs::path fixture = cellm::testing::testdata_dir() / "hf_models" / "llama";
  ASSERT_TRUE(fs::exists(fixture / "generation_config.json")) << fixture;
  m.path = fixture;
  d = load_generation_defaults(m);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_FALSE(d->any());
  EXPECT_EQ(describe_sampling_defaults(*d), "none");
}

// A GGUF v3 file with no tensors and the given float32 / int32 metadata.
void write_gguf(const fs::path& path, const std::vector<std::pair<std::string, float>>& floats,
                const std::vector<std::pair<std::string, std::int32_t>>& ints) {
  std::ofstream out(path, std::ios::binary);
  auto u32 = [&](std::uint32_t v) { out.write(reinterpret_cast<const char*>(&v), 4); };
  auto u64 = [&](std::uint64_t v) { out.write(reinterpret_cast<const char*>(&v), 8); };
  auto str = [&](const std::string& s) {
    u64(s.size());
    out.write(s.data(), static_cast<std::streamsize>(s.size()));
  };
  out.write("GGUF", 4);
  u32(3);
  u64(0);  // tensors
  u64(floats.size() + ints.size());
  for (const auto& [key, v] : floats) {
    str(key);
    u32(6);  // FLOAT32
    out.write(reinterpret_cast<const char*>(&v), 4);
  }
  for (const auto& [key, v] : ints) {
    str(key);
    u32(5);  // INT32
    out.write(reinterpret_cast<const char*>(&v), 4);
  }
}

TEST(GenerationDefaultsTest, GgufSamplingKeys) {
  std::random_device rd;
  const fs::path file =
      fs::temp_directory_path() / ("cellm_sampling_" + std::to_string(rd()) + ".gguf");
  write_gguf(file,
             {{"general.sampling.temp", 0.6f},
              {"general.sampling.top_p", 0.9f},
              {"general.sampling.penalty_repeat", 1.05f}},
             {{"general.sampling.top_k", 20}});
  auto gguf = format::GgufFile::open(file);
  ASSERT_TRUE(gguf.ok()) << gguf.status().to_string();
  auto d = gguf_sampling_defaults(*gguf);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_FLOAT_EQ(d->temperature.value_or(-1), 0.6f);
  EXPECT_FLOAT_EQ(d->top_p.value_or(-1), 0.9f);
  EXPECT_EQ(d->top_k.value_or(-1), 20);
  EXPECT_FLOAT_EQ(d->repetition_penalty.value_or(-1), 1.05f);

  write_gguf(file, {{"general.sampling.top_p", 2.0f}}, {});
  gguf = format::GgufFile::open(file);
  ASSERT_TRUE(gguf.ok()) << gguf.status().to_string();
  d = gguf_sampling_defaults(*gguf);
  fs::remove(file);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(std::string(d.status().message()).find("general.sampling.top_p"), std::string::npos);
}

}  // namespace
}  // namespace cellm::app
