// FP8 checkpoints: every fixture written as FP8 in each layout
// (fp8_checkpoint.h) loads with each dequantized weight bit-equal to the value the tests' own
// encoder stood for times its scale, the stored codes and scales reachable
// through Weights::fp8; and the load-time refusals: F8_E5M2, a missing or
// misshapen scale, FP8 without a quantization_config, a scale without an FP8
// weight, an FP8 weight of an ignored module.
#include <cstring>
#include <filesystem>

#include <gtest/gtest.h>

#include "format/test_writers.h"
#include "model/fp8_checkpoint.h"
#include "model/loader.h"
#include "support/testdata.h"

namespace cellm::model {
namespace {

namespace fs = std::filesystem;
using cellm::testing::Fp8Layout;
using nlohmann::json;

fs::path fixture(const std::string& name) {
  return cellm::testing::testdata_dir() / "hf_models" / name;
}

fs::path temp_dir(const std::string& tag) {
  return fs::path(::testing::TempDir()) / ("cellm_fp8_" + tag);
}

// Every fixture in every layout: the loaded weights are the writer's values.
struct LoadCase {
  std::string fixture;
  Fp8Layout layout;
  std::int64_t block_rows = 128, block_cols = 128;
};
std::string case_name(const ::testing::TestParamInfo<LoadCase>& info) {
  const LoadCase& c = info.param;
  return c.block_rows == 128 ? fmt::format("{}_{}", c.fixture, fp8_layout_name(c.layout))
                             : fmt::format("{}_{}_{}x{}", c.fixture, fp8_layout_name(c.layout),
                                           c.block_rows, c.block_cols);
}

void PrintTo(const LoadCase& c, std::ostream* os) {
  *os << c.fixture << " " << fp8_layout_name(c.layout) << " " << c.block_rows << "x"
      << c.block_cols;
}

class Fp8Load : public ::testing::TestWithParam<LoadCase> {};

// The host memory holding stored weight `name` in `w` (phi3's fused rows are
// views of one buffer starting at q_proj / gate_proj).
const void* weight_data(const Weights& w, const std::string& name) {
  const auto at = [&](std::string_view suffix) { return name.ends_with(suffix); };
  if (name == "lm_head.weight") return w.lm_head.data();
  const auto p = name.find("layers.");
  const int layer = std::stoi(name.substr(p + 7));
  const LayerWeights& l = w.layers[static_cast<std::size_t>(layer)];
  if (at("q_proj.weight") || at("qkv_proj.weight")) return l.q_proj.data();
  if (at("k_proj.weight")) return l.k_proj.data();
  if (at("v_proj.weight")) return l.v_proj.data();
  if (at("o_proj.weight")) return l.o_proj.data();
  if (at("gate_proj.weight") || at("gate_up_proj.weight")) return l.gate_proj.data();
  if (at("up_proj.weight")) return l.up_proj.data();
  if (at("down_proj.weight")) return l.down_proj.data();
  return nullptr;
}

TEST_P(Fp8Load, DequantizedWeightsEqualTheIndependentDequantization) {
  const LoadCase& c = GetParam();
  const fs::path out = temp_dir(case_name({c, 0}));
  cellm::testing::Fp8WriteOptions o;
  o.layout = c.layout;
  o.block_rows = c.block_rows;
  o.block_cols = c.block_cols;
  const auto written = cellm::testing::write_fp8_checkpoint(fixture(c.fixture), out, o);
  ASSERT_FALSE(written.expected.empty());

  auto m = load_model(out);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  LoadOptions bf16;
  bf16.dequant_dtype = DType::kBF16;
  auto mb = load_model(out, bf16);
  ASSERT_TRUE(mb.ok()) << mb.status().to_string();
  EXPECT_TRUE(m->spec.quant.quantized());
  EXPECT_EQ(m->weights.fp8.size(), written.expected.size());

  for (const auto& [name, want] : written.expected) {
    SCOPED_TRACE(name);
    const auto* got = static_cast<const float*>(weight_data(m->weights, name));
    ASSERT_NE(got, nullptr);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && ++wrong <= 3) {
        ADD_FAILURE() << "element " << i << ": loaded " << got[i] << ", expected " << want[i];
      }
    }
    EXPECT_EQ(wrong, 0u);
    const auto* got16 = static_cast<const std::uint16_t*>(weight_data(mb->weights, name));
    for (std::size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got16[i], f32_to_bf16(want[i])) << "bf16 element " << i;
    }
    // The stored form stays reachable: the codes written, with their scales.
    const auto fp8 = m->weights.fp8.find(name);
    ASSERT_NE(fp8, m->weights.fp8.end());
    const auto& codes = written.codes.at(name);
    ASSERT_EQ(fp8->second.codes.nbytes(), codes.size());
    EXPECT_EQ(std::memcmp(fp8->second.codes.data(), codes.data(), codes.size()), 0);
    const std::int64_t rows = fp8->second.codes.dim(0), cols = fp8->second.codes.dim(1);
    EXPECT_EQ(fp8->second.scales.numel(),
              ((rows + fp8->second.block_rows - 1) / fp8->second.block_rows) *
                  ((cols + fp8->second.block_cols - 1) / fp8->second.block_cols));
  }
  // Weights left unquantized are the stored floats, untouched.
  auto orig = load_model(fixture(c.fixture));
  ASSERT_TRUE(orig.ok());
  for (const auto& name : written.left_unquantized) {
    SCOPED_TRACE(name);
    const void* a = weight_data(m->weights, name);
    const void* b = weight_data(orig->weights, name);
    ASSERT_NE(a, nullptr);
    const Tensor& ref =
        name == "lm_head.weight" ? orig->weights.lm_head : orig->weights.layers[0].down_proj;
    EXPECT_EQ(std::memcmp(a, b, ref.nbytes()), 0);
  }
  EXPECT_EQ(m->weights.embed_tokens.dtype(), orig->weights.embed_tokens.dtype());
  fs::remove_all(out);
}

std::vector<LoadCase> load_cases() {
  std::vector<LoadCase> cases;
  for (const char* f : {"llama", "qwen2", "phi3", "gemma3"}) {
    for (Fp8Layout l : {Fp8Layout::kFp8Tensor, Fp8Layout::kFp8Block, Fp8Layout::kFbgemmChannel,
                        Fp8Layout::kCtTensor, Fp8Layout::kCtChannel, Fp8Layout::kCtBlock}) {
      cases.push_back({f, l});
    }
  }
  // Small blocks: many tiles per tensor, partial at the edges (160 = 4×32 + 32; 64 = 2×24 + 16).
  cases.push_back({"llama", Fp8Layout::kFp8Block, 32, 24});
  cases.push_back({"phi3", Fp8Layout::kCtBlock, 48, 24});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Fp8Load, ::testing::ValuesIn(load_cases()), case_name);

// A tiny llama folder with FP8 linear weights, broken one way at a time.
class Fp8Broken : public ::testing::Test {
 protected:
  fs::path dir;
  void SetUp() override {
    dir = temp_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
    set_quant({{"quant_method", "fbgemm_fp8"}});
  }
  void TearDown() override { fs::remove_all(dir); }
  void set_quant(const json& quant) {
    cellm::testing::write_text(dir / "config.json", cellm::testing::fp8_config_with(quant));
  }
  static std::vector<float> ones(std::int64_t n) {
    return std::vector<float>(static_cast<std::size_t>(n), 1.0f);
  }
  // Linear weights as E4M3 1.0 (0x38) with per-row f32 scales of 0.5,
  // except `skip` (written by the test itself).
  cellm::testing::SafetensorsBuilder valid(const std::string& skip = "") {
    cellm::testing::SafetensorsBuilder b;
    b.add_f32("model.embed_tokens.weight", {6, 4}, ones(24));
    b.add_f32("model.norm.weight", {4}, ones(4));
    b.add_f32("model.layers.0.input_layernorm.weight", {4}, ones(4));
    b.add_f32("model.layers.0.post_attention_layernorm.weight", {4}, ones(4));
    const std::pair<const char*, std::vector<std::int64_t>> linear[] = {
        {"self_attn.q_proj", {4, 4}}, {"self_attn.k_proj", {2, 4}}, {"self_attn.v_proj", {2, 4}},
        {"self_attn.o_proj", {4, 4}}, {"mlp.gate_proj", {8, 4}},    {"mlp.up_proj", {8, 4}},
        {"mlp.down_proj", {4, 8}}};
    for (const auto& [module, shape] : linear) {
      const std::string m = std::string("model.layers.0.") + module;
      if (m == skip) continue;
      b.add(m + ".weight", "F8_E4M3", shape,
            cellm::testing::Bytes(static_cast<std::size_t>(shape[0] * shape[1]), 0x38));
      b.add_f32(m + ".weight_scale", {shape[0], 1},
                std::vector<float>(static_cast<std::size_t>(shape[0]), 0.5f));
    }
    return b;
  }
  Status load(const cellm::testing::SafetensorsBuilder& b) {
    cellm::testing::write_file(dir / "model.safetensors", b.build());
    auto r = load_model(dir);
    return r.ok() ? Status::ok() : r.status();
  }
  void expect_refused(const cellm::testing::SafetensorsBuilder& b,
                      std::initializer_list<std::string_view> needles) {
    const Status s = load(b);
    ASSERT_FALSE(s.is_ok()) << "loaded a broken folder";
    for (auto n : needles) {
      EXPECT_NE(s.message().find(n), std::string::npos)
          << "'" << n << "' not in: " << s.to_string();
    }
  }
};

TEST_F(Fp8Broken, ValidFolderLoadsAsCodeTimesScale) {
  cellm::testing::write_file(dir / "model.safetensors", valid().build());
  auto m = load_model(dir);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  for (float v : m->weights.layers[0].down_proj.span<float>()) EXPECT_EQ(v, 0.5f);
  EXPECT_EQ(m->weights.fp8.size(), 7u);
}

TEST_F(Fp8Broken, E5M2WeightsAreRefusedByName) {
  auto b = valid("model.layers.0.mlp.down_proj");
  b.add("model.layers.0.mlp.down_proj.weight", "F8_E5M2", {4, 8}, cellm::testing::Bytes(32, 0x3C));
  b.add_f32("model.layers.0.mlp.down_proj.weight_scale", {4, 1}, ones(4));
  expect_refused(b, {"'model.layers.0.mlp.down_proj.weight'", "F8_E5M2", "F8_E4M3 only"});
}

TEST_F(Fp8Broken, MissingScaleIsNamed) {
  auto b = valid("model.layers.0.mlp.down_proj");
  b.add("model.layers.0.mlp.down_proj.weight", "F8_E4M3", {4, 8}, cellm::testing::Bytes(32, 0x38));
  expect_refused(b, {"'model.layers.0.mlp.down_proj.weight'",
                     "'model.layers.0.mlp.down_proj.weight_scale'", "fbgemm_fp8", "per-channel"});
}

TEST_F(Fp8Broken, ScaleOfTheWrongShapeIsNamedWithBothShapes) {
  auto b = valid("model.layers.0.mlp.down_proj");
  b.add("model.layers.0.mlp.down_proj.weight", "F8_E4M3", {4, 8}, cellm::testing::Bytes(32, 0x38));
  b.add_f32("model.layers.0.mlp.down_proj.weight_scale", {8, 1}, ones(8));
  expect_refused(
      b, {"'model.layers.0.mlp.down_proj.weight_scale'", "[8, 1]", "[4, 1]", "per-channel"});
  // Per tensor: [] and [1] only.
  set_quant({{"quant_method", "fp8"}});
  auto t = valid("model.layers.0.mlp.down_proj");
  t.add("model.layers.0.mlp.down_proj.weight", "F8_E4M3", {4, 8}, cellm::testing::Bytes(32, 0x38));
  t.add_f32("model.layers.0.mlp.down_proj.weight_scale", {4, 1}, ones(4));
  expect_refused(t, {"'model.layers.0.mlp.down_proj.weight_scale'", "[4, 1]", "per-tensor"});
  // Blocks: [ceil(4/2), ceil(8/3)] = [2, 3].
  set_quant({{"quant_method", "fp8"}, {"weight_block_size", {2, 3}}});
  auto k = valid("model.layers.0.mlp.down_proj");
  k.add("model.layers.0.mlp.down_proj.weight", "F8_E4M3", {4, 8}, cellm::testing::Bytes(32, 0x38));
  k.add_f32("model.layers.0.mlp.down_proj.weight_scale_inv", {2, 2}, ones(4));
  expect_refused(
      k, {"'model.layers.0.mlp.down_proj.weight_scale_inv'", "[2, 2]", "[2, 3]", "[2, 3] blocks"});
}

TEST_F(Fp8Broken, IntegerScaleIsRefused) {
  auto b = valid("model.layers.0.mlp.down_proj");
  b.add("model.layers.0.mlp.down_proj.weight", "F8_E4M3", {4, 8}, cellm::testing::Bytes(32, 0x38));
  b.add("model.layers.0.mlp.down_proj.weight_scale", "I32", {4, 1}, cellm::testing::Bytes(16, 0));
  expect_refused(b, {"'model.layers.0.mlp.down_proj.weight_scale'", "i32"});
}

TEST_F(Fp8Broken, Fp8WithoutQuantizationConfigIsRefused) {
  set_quant(json());
  expect_refused(valid(), {"F8_E4M3", "quantization_config", ".weight'"});
}

TEST_F(Fp8Broken, ScaleWithoutAnFp8WeightIsRefused) {
  auto b = valid("model.layers.0.mlp.down_proj");
  b.add_f32("model.layers.0.mlp.down_proj.weight", {4, 8}, ones(32));
  b.add_f32("model.layers.0.mlp.down_proj.weight_scale", {4, 1}, ones(4));
  expect_refused(b, {"'model.layers.0.mlp.down_proj.weight_scale'",
                     "'model.layers.0.mlp.down_proj.weight'", "f32"});
}

TEST_F(Fp8Broken, Fp8WeightOfAnIgnoredModuleIsRefused) {
  set_quant({{"quant_method", "fbgemm_fp8"},
             {"modules_to_not_convert", {"model.layers.0.mlp.down_proj"}}});
  expect_refused(valid(), {"'model.layers.0.mlp.down_proj.weight'", "unquantized"});
}

TEST_F(Fp8Broken, ActivationScalesAreReadPast) {
  auto b = valid();
  b.add_f32("model.layers.0.mlp.down_proj.input_scale", {}, {0.1f});
  b.add_f32("model.layers.0.self_attn.k_scale", {}, {0.1f});
  b.add_f32("model.layers.0.self_attn.v_scale", {}, {0.1f});
  EXPECT_TRUE(load(b).is_ok());
}

TEST_F(Fp8Broken, UnknownQuantMethodIsRefusedAtLoad) {
  set_quant({{"quant_method", "gptq"}, {"bits", 4}});
  expect_refused(valid(), {"config.json", "'quantization_config.quant_method'", "'gptq'"});
}

}  // namespace
}  // namespace cellm::model
