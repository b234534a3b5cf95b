// The CELLM_* knob table and the start-up check (core/env.h): an unknown
// CELLM_* name and a malformed or out-of-range value are errors that name the
// variable, the value and what is accepted; good values parse; the test and
// script variables of the allow-list pass; other variables are not ours.
#include "core/env.h"

#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace cellm {
namespace {

// A lookup over `values`, and the names it holds (as the environment lists them).
struct FakeEnv {
  std::map<std::string, std::string> values;
  EnvLookup lookup() const {
    return [this](const char* name) -> std::optional<std::string> {
      auto it = values.find(name);
      if (it == values.end() || it->second.empty()) return std::nullopt;
      return it->second;
    };
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [name, value] : values) out.push_back(name);
    return out;
  }
  Status check() const { return check_environment(names(), lookup()); }
};

bool contains(const Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

TEST(EnvKnobsTest, TheTableIsSmallAndDocumented) {
  std::set<std::string> names;
  for (const KnobInfo& k : known_knobs()) {
    const std::string name = k.name;
    EXPECT_EQ(name.rfind("CELLM_", 0), 0u) << name;
    EXPECT_TRUE(names.insert(name).second) << name << " twice";
    EXPECT_NE(std::string(k.accepted), "") << name;
    EXPECT_NE(std::string(k.default_value), "") << name;
    EXPECT_NE(std::string(k.doc), "") << name;
  }
  // Issue 35: at most six knobs, each a real setting or a live experiment.
  EXPECT_LE(names.size(), 6u);
  EXPECT_TRUE(names.contains("CELLM_MODEL"));
}

TEST(EnvKnobsTest, UnsetMeansTheDefaults) {
  const FakeEnv env;
  auto k = parse_knobs(env.lookup());
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  EXPECT_FALSE(k->model.has_value());
  EXPECT_FALSE(k->commit.has_value());
  EXPECT_EQ(k->kernels, KernelKnobs{});
  EXPECT_EQ(k->kernels.gemv_max_rows, 1);
  EXPECT_EQ(k->kernels.gemv_mma, kGemvMmaDefault);
  EXPECT_TRUE(env.check().is_ok());
}

TEST(EnvKnobsTest, GoodValuesParse) {
  FakeEnv env;
  env.values = {{"CELLM_MODEL", "models/x.gguf"},
                {"CELLM_COMMIT", "abc123+dirty"},
                {"CELLM_GEMV_MAX_ROWS", "8"},
                {"CELLM_GEMV_MMA", "down,lm_head"}};
  ASSERT_TRUE(env.check().is_ok()) << env.check().to_string();
  auto k = parse_knobs(env.lookup());
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  EXPECT_EQ(k->model, "models/x.gguf");
  EXPECT_EQ(k->commit, "abc123+dirty");
  EXPECT_EQ(k->kernels.gemv_max_rows, 8);
  EXPECT_EQ(k->kernels.gemv_mma, (1u << 3) | (1u << 4));  // kGemvMmaProjections order

  for (const auto& [value, bits] : std::map<std::string, std::uint32_t>{
           {"0", 0u}, {"1", kGemvMmaAll}, {"qkv", 1u}, {"o,qkv", 3u}, {"gate_up", 4u}, {"quant,qkv", 33u}}) {
    env.values = {{"CELLM_GEMV_MMA", value}};
    auto mma = parse_knobs(env.lookup());
    ASSERT_TRUE(mma.ok()) << value << ": " << mma.status().to_string();
    EXPECT_EQ(mma->kernels.gemv_mma, bits) << value;
  }
  env.values = {{"CELLM_GEMV_MAX_ROWS", "1"}};
  auto low = parse_knobs(env.lookup());
  ASSERT_TRUE(low.ok());
  EXPECT_EQ(low->kernels.gemv_max_rows, 1);
}

TEST(EnvKnobsTest, AnEmptyValueIsUnset) {
  FakeEnv env;
  env.values = {{"CELLM_GEMV_MAX_ROWS", ""}};
  ASSERT_TRUE(env.check().is_ok()) << env.check().to_string();
  EXPECT_EQ(parse_knobs(env.lookup())->kernels.gemv_max_rows, 1);
}

TEST(EnvKnobsTest, BadValuesNameTheVariableTheValueAndWhatIsAccepted) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"CELLM_GEMV_MAX_ROWS", "0"},  {"CELLM_GEMV_MAX_ROWS", "9"},  {"CELLM_GEMV_MAX_ROWS", "2x"},
      {"CELLM_GEMV_MAX_ROWS", "-1"}, {"CELLM_GEMV_MMA", "qkv,mlp"}, {"CELLM_GEMV_MMA", "qkv,"},
      {"CELLM_GEMV_MMA", "2"},
  };
  for (const auto& [name, value] : bad) {
    FakeEnv env;
    env.values = {{name, value}};
    const Status parsed = parse_knobs(env.lookup()).status();
    ASSERT_FALSE(parsed.is_ok()) << name << "=" << value;
    EXPECT_EQ(parsed.code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(contains(parsed, name)) << parsed.to_string();
    EXPECT_TRUE(contains(parsed, "'" + value + "'")) << parsed.to_string();
    const Status checked = env.check();
    ASSERT_FALSE(checked.is_ok()) << name << "=" << value;
    EXPECT_EQ(checked.to_string(), parsed.to_string());
  }
  // The accepted values, as the table lists them.
  FakeEnv env;
  env.values = {{"CELLM_GEMV_MAX_ROWS", "9"}};
  EXPECT_TRUE(contains(env.check(), "from 1 to 8")) << env.check().to_string();
  env.values = {{"CELLM_GEMV_MMA", "mlp"}};
  EXPECT_TRUE(contains(env.check(), "qkv, o, gate_up, down, lm_head, quant")) << env.check().to_string();
}

TEST(EnvKnobsTest, AnUnknownCellmNameIsAnError) {
  // Removed knobs, and a misspelt live one.
  for (const char* name :
       {"CELLM_DECODE_STREAM", "CELLM_GEMV_MAX_ROW", "CELLM_PDL", "CELLM_HEAD_ARGMAX"}) {
    FakeEnv env;
    env.values = {{name, "1"}};
    const Status s = env.check();
    ASSERT_FALSE(s.is_ok()) << name;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(contains(s, std::string(name) + "='1'")) << s.to_string();
    // It lists what cellm does read.
    EXPECT_TRUE(contains(s, "CELLM_GEMV_MAX_ROWS")) << s.to_string();
    EXPECT_TRUE(contains(s, "CELLM_MODEL")) << s.to_string();
  }
}

TEST(EnvKnobsTest, TestAndScriptVariablesAndOtherNamesPass) {
  FakeEnv env;
  env.values = {{"CELLM_TESTDATA", "/tmp/x"},
                {"CELLMDEV_E2E_MODEL", "m"},
                {"CELLMDEV_BENCH_MODELS", "a b"},
                {"CELLMDEV_GPU_TARGETS", "t"},
                {"CELLMDEV_NCU_KERNEL", "gemv"},
                {"CELLMDEV_MEMCHECK", "1"},
                {"HOME", "/root"},
                {"XCELLM_FOO", "1"},
                {"CELLM_GEMV_MMA", "1"}};
  EXPECT_TRUE(env.check().is_ok()) << env.check().to_string();
  // The old names of the tools' variables are now unknown knobs: a script
  // that still sets one stops `cellm` instead of being silently ignored.
  env.values = {{"CELLM_E2E_MODEL", "m"}};
  EXPECT_FALSE(env.check().is_ok());
  env.values = {{"CELLM_TESTDATA_DIR", "/tmp/x"}};
  EXPECT_FALSE(env.check().is_ok()) << "only the shared fixtures' exact name passes";
}

TEST(EnvKnobsTest, TheProcessEnvironmentIsChecked) {
  // Through the real environment: what `cellm` runs first.
  ASSERT_EQ(::setenv("CELLM_NO_SUCH_KNOB", "7", 1), 0);
  const Status unknown = check_process_environment();
  ::unsetenv("CELLM_NO_SUCH_KNOB");
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_TRUE(contains(unknown, "CELLM_NO_SUCH_KNOB='7'")) << unknown.to_string();

  ASSERT_EQ(::setenv("CELLM_GEMV_MAX_ROWS", "twelve", 1), 0);
  const Status bad = check_process_environment();
  ::unsetenv("CELLM_GEMV_MAX_ROWS");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_TRUE(contains(bad, "CELLM_GEMV_MAX_ROWS='twelve'")) << bad.to_string();

  ASSERT_EQ(::setenv("CELLM_GEMV_MAX_ROWS", "2", 1), 0);
  const Status good = check_process_environment();
  ::unsetenv("CELLM_GEMV_MAX_ROWS");
  EXPECT_TRUE(good.is_ok()) << good.to_string();
}

}  // namespace
}  // namespace cellm
