// Loading Hugging Face folders into Weights: every fixture from both config
// layouts, shapes and values against the raw safetensors, tied heads, phi3's
// split views, and the errors for missing, misshapen and extra tensors.
#include <cstring>
#include <filesystem>

#include <gtest/gtest.h>

#include "format/safetensors.h"
#include "format/test_writers.h"
#include "model/loader.h"
#include "support/testdata.h"

namespace cellm::model {
namespace {

namespace fs = std::filesystem;
using testing::SafetensorsBuilder;

fs::path fixture(const std::string& name) {
  return testing::testdata_dir() / "hf_models" / name;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

class EveryFixtureWeights : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryFixtureWeights, LoadsFromBothConfigsWithCheckedShapes) {
  const fs::path dir = fixture(GetParam());
  auto v5 = load_model(dir);
  ASSERT_TRUE(v5.ok()) << v5.status().to_string();
  LoadOptions legacy;
  legacy.config_path = dir / "config_legacy.json";
  auto v4 = load_model(dir, legacy);
  ASSERT_TRUE(v4.ok()) << v4.status().to_string();
  EXPECT_EQ(v5->spec, v4->spec);
  EXPECT_EQ(v5->format, ModelFormat::kHuggingFace);
  EXPECT_EQ(v5->gguf, nullptr);

  const ModelSpec& s = v5->spec;
  const Weights& w = v5->weights;
  ASSERT_EQ(static_cast<std::int32_t>(w.layers.size()), s.num_layers);
  const std::int64_t q = s.num_heads * s.head_dim;
  const std::int64_t kv = s.num_kv_heads * s.head_dim;
  EXPECT_EQ(w.embed_tokens.shape(), (Shape{s.vocab_size, s.hidden_size}));
  EXPECT_EQ(w.lm_head.shape(), (Shape{s.vocab_size, s.hidden_size}));
  EXPECT_EQ(w.final_norm.shape(), (Shape{s.hidden_size}));
  for (const auto& l : w.layers) {
    EXPECT_EQ(l.q_proj.shape(), (Shape{q, s.hidden_size}));
    EXPECT_EQ(l.k_proj.shape(), (Shape{kv, s.hidden_size}));
    EXPECT_EQ(l.v_proj.shape(), (Shape{kv, s.hidden_size}));
    EXPECT_EQ(l.o_proj.shape(), (Shape{s.hidden_size, q}));
    EXPECT_EQ(l.gate_proj.shape(), (Shape{s.intermediate_size, s.hidden_size}));
    EXPECT_EQ(l.up_proj.shape(), (Shape{s.intermediate_size, s.hidden_size}));
    EXPECT_EQ(l.down_proj.shape(), (Shape{s.hidden_size, s.intermediate_size}));
    EXPECT_EQ(l.attn_norm.shape(), (Shape{s.hidden_size}));
    EXPECT_EQ(l.mlp_norm.shape(), (Shape{s.hidden_size}));
    EXPECT_EQ(l.q_bias.defined(), s.attention_bias);
    EXPECT_EQ(l.q_norm.defined(), s.qk_norm);
    EXPECT_EQ(l.post_attn_norm.defined(), s.sandwich_norms);
    EXPECT_EQ(l.post_mlp_norm.defined(), s.sandwich_norms);
  }
  EXPECT_EQ(w.lm_head.data() == w.embed_tokens.data(), s.tie_word_embeddings);
}

INSTANTIATE_TEST_SUITE_P(HfFixtures, EveryFixtureWeights,
                         ::testing::Values("llama", "llama_long", "qwen2", "qwen3", "mistral",
                                           "gemma3", "phi3"));

TEST(HfWeights, TensorsAreTheStoredBytesInTheStoredDtype) {
  auto m = load_model(fixture("qwen2"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto st = format::SafetensorsFile::open(fixture("qwen2") / "model.safetensors");
  ASSERT_TRUE(st.ok());
  const auto& l1 = m->weights.layers[1];
  EXPECT_EQ(l1.q_proj.dtype(), DType::kBF16);
  EXPECT_TRUE(same_bytes(l1.q_proj, *st->tensor("model.layers.1.self_attn.q_proj.weight")));
  EXPECT_TRUE(same_bytes(l1.k_bias, *st->tensor("model.layers.1.self_attn.k_proj.bias")));
  EXPECT_TRUE(
      same_bytes(l1.mlp_norm, *st->tensor("model.layers.1.post_attention_layernorm.weight")));
  EXPECT_TRUE(same_bytes(m->weights.final_norm, *st->tensor("model.norm.weight")));
}

TEST(HfWeights, GemmaNormsGoToTheirSlots) {
  auto m = load_model(fixture("gemma3"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto st = format::SafetensorsFile::open(fixture("gemma3") / "model.safetensors");
  ASSERT_TRUE(st.ok());
  const auto& l = m->weights.layers[2];
  EXPECT_TRUE(
      same_bytes(l.post_attn_norm, *st->tensor("model.layers.2.post_attention_layernorm.weight")));
  EXPECT_TRUE(
      same_bytes(l.mlp_norm, *st->tensor("model.layers.2.pre_feedforward_layernorm.weight")));
  EXPECT_TRUE(
      same_bytes(l.post_mlp_norm, *st->tensor("model.layers.2.post_feedforward_layernorm.weight")));
  EXPECT_TRUE(same_bytes(l.q_norm, *st->tensor("model.layers.2.self_attn.q_norm.weight")));
}

TEST(HfWeights, Phi3FusedProjectionsAreRowViewsWithoutCopies) {
  auto m = load_model(fixture("phi3"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto st = format::SafetensorsFile::open(fixture("phi3") / "model.safetensors");
  ASSERT_TRUE(st.ok());
  const Tensor qkv = *st->tensor("model.layers.0.self_attn.qkv_proj.weight");
  const Tensor gate_up = *st->tensor("model.layers.0.mlp.gate_up_proj.weight");
  const auto& l = m->weights.layers[0];
  // Views into one buffer: fixed row offsets from q_proj / gate_proj, no copies.
  const std::size_t row = 64 * sizeof(float);
  const auto* q0 = static_cast<const char*>(l.q_proj.data());
  const auto* g0 = static_cast<const char*>(l.gate_proj.data());
  EXPECT_EQ(static_cast<const char*>(l.k_proj.data()), q0 + 64 * row);
  EXPECT_EQ(static_cast<const char*>(l.v_proj.data()), q0 + 96 * row);
  EXPECT_EQ(static_cast<const char*>(l.up_proj.data()), g0 + 160 * row);
  EXPECT_EQ(std::memcmp(q0, qkv.data(), qkv.nbytes()), 0);
  EXPECT_EQ(std::memcmp(g0, gate_up.data(), gate_up.nbytes()), 0);
  EXPECT_EQ(l.v_proj.shape(), (Shape{32, 64}));
  EXPECT_EQ(l.up_proj.shape(), (Shape{160, 64}));
  EXPECT_EQ(element_as_f32(l.v_proj, 5), element_as_f32(qkv, 96 * 64 + 5));
}

TEST(HfWeights, WeightsOutliveTheLoaderThroughTheirMapping) {
  Tensor kept;
  {
    auto m = load_model(fixture("llama"));
    ASSERT_TRUE(m.ok());
    kept = m->weights.layers[0].q_proj;
  }
  auto st = format::SafetensorsFile::open(fixture("llama") / "model.safetensors");
  EXPECT_TRUE(same_bytes(kept, *st->tensor("model.layers.0.self_attn.q_proj.weight")));
}

// A tiny llama folder written by the test, then broken one way at a time.
class BrokenFolder : public ::testing::Test {
 protected:
  fs::path dir;
  void SetUp() override {
    dir = fs::path(::testing::TempDir()) /
          ("cellm_hf_" +
           std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    testing::write_text(dir / "config.json", R"({"model_type":"llama","vocab_size":6,
      "hidden_size":4,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2,
      "num_key_value_heads":1,"max_position_embeddings":32,"tie_word_embeddings":true})");
  }
  void TearDown() override { fs::remove_all(dir); }
  static std::vector<float> ones(std::int64_t n) {
    return std::vector<float>(static_cast<std::size_t>(n), 1.0f);
  }
  SafetensorsBuilder valid() {
    SafetensorsBuilder b;
    b.add_f32("model.embed_tokens.weight", {6, 4}, ones(24));
    b.add_f32("model.norm.weight", {4}, ones(4));
    b.add_f32("model.layers.0.input_layernorm.weight", {4}, ones(4));
    b.add_f32("model.layers.0.post_attention_layernorm.weight", {4}, ones(4));
    b.add_f32("model.layers.0.self_attn.q_proj.weight", {4, 4}, ones(16));
    b.add_f32("model.layers.0.self_attn.k_proj.weight", {2, 4}, ones(8));
    b.add_f32("model.layers.0.self_attn.v_proj.weight", {2, 4}, ones(8));
    b.add_f32("model.layers.0.self_attn.o_proj.weight", {4, 4}, ones(16));
    b.add_f32("model.layers.0.mlp.gate_proj.weight", {8, 4}, ones(32));
    b.add_f32("model.layers.0.mlp.up_proj.weight", {8, 4}, ones(32));
    return b;
  }
  Status load(SafetensorsBuilder b) {
    testing::write_file(dir / "model.safetensors", b.build());
    auto r = load_model(dir);
    return r.ok() ? Status::ok() : r.status();
  }
};

TEST_F(BrokenFolder, MissingTensorIsNamed) {
  const Status s = load(valid());  // no down_proj
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("missing 'model.layers.0.mlp.down_proj.weight'"), std::string::npos)
      << s.to_string();
}

TEST_F(BrokenFolder, ValidFolderLoadsAndAliasesTheHead) {
  auto b = valid();
  b.add_f32("model.layers.0.mlp.down_proj.weight", {4, 8}, ones(32));
  testing::write_file(dir / "model.safetensors", b.build());
  auto m = load_model(dir);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->weights.lm_head.data(), m->weights.embed_tokens.data());
  EXPECT_EQ(m->spec.parameter_count(), 6 * 4 + 4 + (4 * 4 + 2 * 2 * 4 + 4 * 4 + 3 * 8 * 4 + 2 * 4));
}

TEST_F(BrokenFolder, WrongShapeNamesTensorAndBothShapes) {
  auto b = valid();
  b.add_f32("model.layers.0.mlp.down_proj.weight", {8, 4}, ones(32));
  const Status s = load(b);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("model.layers.0.mlp.down_proj.weight"), std::string::npos);
  EXPECT_NE(s.message().find("[8, 4]"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("[4, 8]"), std::string::npos) << s.to_string();
}

TEST_F(BrokenFolder, ExtraTensorsAreReportedUnlessAllowed) {
  auto b = valid();
  b.add_f32("model.layers.0.mlp.down_proj.weight", {4, 8}, ones(32));
  b.add_f32("model.layers.0.self_attn.mystery.weight", {2}, ones(2));
  const Status s = load(b);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("mystery"), std::string::npos) << s.to_string();
  LoadOptions lenient;
  lenient.allow_extra_tensors = true;
  EXPECT_TRUE(load_model(dir, lenient).ok());
}

TEST_F(BrokenFolder, UntiedHeadMustBePresent) {
  testing::write_text(dir / "config.json", R"({"model_type":"llama","vocab_size":6,
      "hidden_size":4,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2,
      "num_key_value_heads":1,"max_position_embeddings":32,"tie_word_embeddings":false})");
  auto b = valid();
  b.add_f32("model.layers.0.mlp.down_proj.weight", {4, 8}, ones(32));
  const Status s = load(b);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("lm_head.weight"), std::string::npos) << s.to_string();
}

TEST_F(BrokenFolder, ShardedCheckpointViaIndex) {
  SafetensorsBuilder a, b;
  a.add_f32("model.embed_tokens.weight", {6, 4}, ones(24));
  a.add_f32("model.norm.weight", {4}, ones(4));
  a.add_f32("model.layers.0.input_layernorm.weight", {4}, ones(4));
  a.add_f32("model.layers.0.post_attention_layernorm.weight", {4}, ones(4));
  b.add_f32("model.layers.0.self_attn.q_proj.weight", {4, 4}, ones(16));
  b.add_f32("model.layers.0.self_attn.k_proj.weight", {2, 4}, ones(8));
  b.add_f32("model.layers.0.self_attn.v_proj.weight", {2, 4}, ones(8));
  b.add_f32("model.layers.0.self_attn.o_proj.weight", {4, 4}, ones(16));
  b.add_f32("model.layers.0.mlp.gate_proj.weight", {8, 4}, ones(32));
  b.add_f32("model.layers.0.mlp.up_proj.weight", {8, 4}, ones(32));
  b.add_f32("model.layers.0.mlp.down_proj.weight", {4, 8}, ones(32));
  testing::write_file(dir / "a.safetensors", a.build());
  testing::write_file(dir / "b.safetensors", b.build());
  std::string map;
  for (const char* n :
       {"model.embed_tokens.weight", "model.norm.weight", "model.layers.0.input_layernorm.weight",
        "model.layers.0.post_attention_layernorm.weight"}) {
    map += fmt::format("\"{}\":\"a.safetensors\",", n);
  }
  for (const char* n : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
    map += fmt::format("\"model.layers.0.self_attn.{}.weight\":\"b.safetensors\",", n);
  }
  for (const char* n : {"gate_proj", "up_proj", "down_proj"}) {
    map += fmt::format("\"model.layers.0.mlp.{}.weight\":\"b.safetensors\",", n);
  }
  map.pop_back();
  testing::write_text(dir / "model.safetensors.index.json",
                      "{\"metadata\":{},\"weight_map\":{" + map + "}}");
  auto m = load_model(dir);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_NE(m->source.find("2 shard"), std::string::npos) << m->source;

  // A map entry pointing at the wrong shard is refused with both names.
  testing::write_text(dir / "model.safetensors.index.json",
                      "{\"weight_map\":{\"model.norm.weight\":\"b.safetensors\"}}");
  auto bad = load_model(dir);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("model.norm.weight"), std::string::npos);
  // A shard name that climbs out of the folder is refused.
  testing::write_text(dir / "model.safetensors.index.json",
                      "{\"weight_map\":{\"model.norm.weight\":\"../a.safetensors\"}}");
  EXPECT_FALSE(load_model(dir).ok());
}

TEST(HfWeights, MissingPathIsNotFound) {
  auto r = load_model("/nonexistent/cellm/model");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace cellm::model
