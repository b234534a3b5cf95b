// ModelSpec from Hugging Face config.json: both config layouts of every
// fixture agree, the architecture facts listed in the fixtures' README come
// out right, and bad configs give errors naming the file and field.
#include "model/hf_config.h"

#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>

#include "support/testdata.h"

namespace cellm::model {
namespace {

namespace fs = std::filesystem;

fs::path fixture(const std::string& name) {
  return testing::testdata_dir() / "hf_models" / name;
}

ModelSpec read(const fs::path& p) {
  auto r = read_hf_spec(p);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : ModelSpec{};
}

class EveryFixtureConfig : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryFixtureConfig, BothConfigLayoutsGiveTheSameSpec) {
  const fs::path dir = fixture(GetParam());
  ASSERT_TRUE(fs::exists(dir / "config.json")) << dir;
  ASSERT_TRUE(fs::exists(dir / "config_legacy.json")) << dir;
  const ModelSpec v5 = read(dir / "config.json");
  const ModelSpec v4 = read(dir / "config_legacy.json");
  EXPECT_EQ(v5, v4);
  EXPECT_TRUE(v5.validate().is_ok()) << v5.validate().to_string();
  EXPECT_EQ(v5.vocab_size, 384);
  EXPECT_EQ(v5.hidden_size, 64);
  EXPECT_EQ(v5.head_dim, 16);
  EXPECT_EQ(v5.num_heads, 4);
  EXPECT_EQ(v5.num_kv_heads, 2);
  EXPECT_EQ(v5.bos_token_id, 1);
  EXPECT_EQ(v5.eos_token_ids, std::vector<std::int64_t>{2});
  for (const auto& l : v5.layers) EXPECT_EQ(l.rope.rotary_dim, 16);
}

INSTANTIATE_TEST_SUITE_P(HfFixtures, EveryFixtureConfig,
                         ::testing::Values("llama", "llama_long", "qwen2", "qwen3", "mistral",
                                           "gemma3", "phi3"));

TEST(HfConfig, GemmaHasSlidingAndGlobalLayersWithTheirOwnRope) {
  const ModelSpec s = read(fixture("gemma3") / "config.json");
  EXPECT_EQ(s.arch, Architecture::kGemma3);
  EXPECT_EQ(s.arch_name, "gemma3_text");
  ASSERT_EQ(s.layers.size(), 4u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(s.layers[i].window, 8) << i;
    EXPECT_EQ(s.layers[i].rope.theta, 10000.0) << i;
  }
  EXPECT_EQ(s.layers[3].window, 0);
  EXPECT_EQ(s.layers[3].rope.theta, 1000000.0);
  EXPECT_FLOAT_EQ(s.attention_scale, 0.25f);  // query_pre_attn_scalar 16
  EXPECT_FLOAT_EQ(s.embedding_scale, 8.0f);   // sqrt(64)
  EXPECT_TRUE(s.norm_weight_offset);
  EXPECT_TRUE(s.sandwich_norms);
  EXPECT_TRUE(s.qk_norm);
  EXPECT_TRUE(s.tie_word_embeddings);
  EXPECT_EQ(s.activation, Activation::kGeluTanh);
  EXPECT_FALSE(s.final_logit_softcap.has_value());
}

TEST(HfConfig, LlamaUsesLlama3RopeScaling) {
  const ModelSpec s = read(fixture("llama") / "config.json");
  EXPECT_EQ(s.arch, Architecture::kLlama);
  ASSERT_EQ(s.layers.size(), 3u);
  const RopeSpec& r = s.layers[0].rope;
  EXPECT_EQ(r.type, RopeType::kLlama3);
  EXPECT_EQ(r.theta, 500000.0);
  EXPECT_EQ(r.factor, 8.0);
  EXPECT_EQ(r.low_freq_factor, 1.0);
  EXPECT_EQ(r.high_freq_factor, 4.0);
  EXPECT_EQ(r.original_max_position, 64);
  EXPECT_EQ(s.layers[0].window, 0);
  EXPECT_FALSE(s.tie_word_embeddings);
  EXPECT_FLOAT_EQ(s.norm_eps, 1e-5f);
  EXPECT_FLOAT_EQ(s.attention_scale, 0.25f);
  EXPECT_EQ(read(fixture("llama_long") / "config.json").layers[0].rope.original_max_position, 256);
}

TEST(HfConfig, MistralSlidesOnEveryLayer) {
  const ModelSpec s = read(fixture("mistral") / "config.json");
  ASSERT_EQ(s.layers.size(), 2u);
  for (const auto& l : s.layers) EXPECT_EQ(l.window, 16);
}

TEST(HfConfig, Qwen2HasBiasesQwen3HasQkNorm) {
  const ModelSpec q2 = read(fixture("qwen2") / "config.json");
  EXPECT_TRUE(q2.attention_bias);
  EXPECT_FALSE(q2.qk_norm);
  EXPECT_TRUE(q2.tie_word_embeddings);
  for (const auto& l : q2.layers) EXPECT_EQ(l.window, 0);  // use_sliding_window false
  const ModelSpec q3 = read(fixture("qwen3") / "config.json");
  EXPECT_FALSE(q3.attention_bias);
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_EQ(q3.layers[0].rope.theta, 1000000.0);
}

TEST(HfConfig, Phi3IsPlainRopeWithoutWindow) {
  const ModelSpec s = read(fixture("phi3") / "config.json");
  EXPECT_EQ(s.arch, Architecture::kPhi3);
  for (const auto& l : s.layers) {
    EXPECT_EQ(l.window, 0);
    EXPECT_EQ(l.rope.type, RopeType::kDefault);
  }
}

// Mutations of a valid config, each checked for the field it names.
class ConfigErrors : public ::testing::Test {
 protected:
  std::string base = R"({"model_type":"llama","vocab_size":10,"hidden_size":8,
    "intermediate_size":16,"num_hidden_layers":2,"num_attention_heads":2,
    "num_key_value_heads":1,"max_position_embeddings":64,"rms_norm_eps":1e-5)";
  Status parse(const std::string& extra) {
    auto r = spec_from_hf_config_text(base + extra + "}", "dir/config.json");
    return r.ok() ? Status::ok() : r.status();
  }
};

TEST_F(ConfigErrors, ValidBaseParses) {
  auto r = spec_from_hf_config_text(base + "}", "dir/config.json");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->head_dim, 4);
  EXPECT_EQ(r->layers[1].rope.theta, 10000.0);
}

TEST_F(ConfigErrors, UnknownArchitectureIsNamed) {
  auto r = spec_from_hf_config_text(R"({"model_type":"gpt_neox"})", "dir/config.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(r.status().message().find("gpt_neox"), std::string::npos);
  EXPECT_NE(r.status().message().find("dir/config.json"), std::string::npos);
}

TEST_F(ConfigErrors, MissingFieldIsNamedWithFile) {
  auto r = spec_from_hf_config_text(R"({"model_type":"qwen3","vocab_size":10})", "x/config.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("x/config.json"), std::string::npos);
  EXPECT_NE(r.status().message().find("num_attention_heads"), std::string::npos);
  auto m = spec_from_hf_config_text(R"({"vocab_size":10})", "x/config.json");
  EXPECT_NE(m.status().message().find("model_type"), std::string::npos);
}

TEST_F(ConfigErrors, WrongTypesAndUnsupportedRopeAreNamed) {
  Status s = parse(R"(,"hidden_size":"big")");
  EXPECT_NE(s.message().find("hidden_size"), std::string::npos) << s.to_string();
  s = parse(R"(,"rope_scaling":{"rope_type":"yarn","factor":4})");
  EXPECT_EQ(s.code(), StatusCode::kNotSupported);
  EXPECT_NE(s.message().find("yarn"), std::string::npos) << s.to_string();
  s = parse(R"(,"rope_scaling":{"rope_type":"llama3","factor":8})");
  EXPECT_NE(s.message().find("low_freq_factor"), std::string::npos) << s.to_string();
  s = parse(R"(,"num_key_value_heads":3)");
  EXPECT_FALSE(s.is_ok());  // 2 heads are not a multiple of 3
  s = parse(R"(,"layer_types":["full_attention","sliding_attention"])");
  EXPECT_NE(s.message().find("sliding_window"), std::string::npos) << s.to_string();
  s = parse(R"(,"hidden_act":"relu")");
  EXPECT_NE(s.message().find("hidden_act"), std::string::npos) << s.to_string();
  s = parse(R"(,"attention_bias":true)");
  EXPECT_EQ(s.code(), StatusCode::kNotSupported);
  EXPECT_FALSE(spec_from_hf_config_text("{not json", "c.json").ok());
}

TEST_F(ConfigErrors, LayerTypesOverrideLegacyPatternAndLinearRopeParses) {
  auto r = spec_from_hf_config_text(
      base + R"(,"layer_types":["sliding_attention","full_attention"],"sliding_window":5,
      "rope_scaling":{"type":"linear","factor":2.0},"partial_rotary_factor":0.5})",
      "c.json");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->layers[0].window, 5);
  EXPECT_EQ(r->layers[1].window, 0);
  EXPECT_EQ(r->layers[0].rope.type, RopeType::kLinear);
  EXPECT_EQ(r->layers[0].rope.factor, 2.0);
  EXPECT_EQ(r->layers[0].rope.rotary_dim, 2);
}

TEST(HfConfig, MultimodalGemma3UsesTextConfig) {
  const std::string text = R"({"model_type":"gemma3","tie_word_embeddings":true,
    "eos_token_id":[1,106],
    "text_config":{"model_type":"gemma3_text","hidden_size":64,"intermediate_size":128,
      "num_hidden_layers":6,"vocab_size":100,"num_attention_heads":4,"num_key_value_heads":2,
      "head_dim":16,"sliding_window":32,"rope_scaling":{"rope_type":"linear","factor":8.0}}})";
  auto r = spec_from_hf_config_text(text, "c.json");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->arch_name, "gemma3_text");
  ASSERT_EQ(r->layers.size(), 6u);
  EXPECT_EQ(r->layers[0].window, 32);  // default pattern 6: layer 5 is global
  EXPECT_EQ(r->layers[0].rope.type, RopeType::kDefault);
  EXPECT_EQ(r->layers[0].rope.theta, 10000.0);
  EXPECT_EQ(r->layers[5].window, 0);
  EXPECT_EQ(r->layers[5].rope.type, RopeType::kLinear);
  EXPECT_EQ(r->layers[5].rope.theta, 1000000.0);
  EXPECT_FLOAT_EQ(r->attention_scale, 1.0f / 16.0f);  // default query_pre_attn_scalar 256
  EXPECT_EQ(r->eos_token_ids, (std::vector<std::int64_t>{1, 106}));
}

TEST(HfConfig, GenerationConfigOverridesAndRefusalChangesNothing) {
  auto r = spec_from_hf_config_text(
      R"({"model_type":"llama","vocab_size":10,"hidden_size":8,"intermediate_size":16,
      "num_hidden_layers":1,"num_attention_heads":2,"max_position_embeddings":64,
      "bos_token_id":1,"eos_token_id":2})",
      "c.json");
  ASSERT_TRUE(r.ok());
  ModelSpec s = *r;
  ASSERT_TRUE(apply_generation_config_text(R"({"eos_token_id":[7,8,7]})", "g.json", s).is_ok());
  EXPECT_EQ(s.eos_token_ids, (std::vector<std::int64_t>{7, 8}));
  EXPECT_EQ(s.bos_token_id, 1);
  const ModelSpec before = s;
  EXPECT_FALSE(
      apply_generation_config_text(R"({"bos_token_id":[1,2],"eos_token_id":3})", "g.json", s)
          .is_ok());
  EXPECT_EQ(s, before);
}

}  // namespace
}  // namespace cellm::model
