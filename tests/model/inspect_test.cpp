// The inspect report: KV arithmetic, distinct-storage byte counts (tied heads
// counted once) and the facts the report must show.
#include "model/inspect.h"

#include <gtest/gtest.h>

#include "support/testdata.h"

namespace cellm::model {
namespace {

TEST(Inspect, KvBytesFollowTheFormula) {
  ModelSpec s;
  s.num_layers = 30;
  s.num_kv_heads = 3;
  s.head_dim = 64;
  // SmolLM2-135M at 8192 tokens in bf16: 2*30*3*64*8192*2 = 188,743,680 bytes.
  EXPECT_EQ(kv_cache_bytes(s, 8192, DType::kBF16), 188743680);
  EXPECT_EQ(kv_cache_bytes(s, 1, DType::kF32), 2 * 30 * 3 * 64 * 4);
}

TEST(Inspect, ReportOnATiedFixture) {
  auto m = load_model(testing::testdata_dir() / "hf_models" / "qwen2");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  // Distinct storage: the tied head is the embedding, counted once.
  std::int64_t expected = 0;
  for (const auto& [name, t] : named_weights(m->weights)) {
    if (name != "lm_head") expected += static_cast<std::int64_t>(t.nbytes());
  }
  EXPECT_EQ(weight_bytes(m->weights), expected);
  InspectOptions o;
  o.context = 100;
  o.sessions = 3;
  const std::string r = inspect_report(*m, o);
  EXPECT_NE(r.find("qwen2"), std::string::npos) << r;
  EXPECT_NE(r.find("300 KV cells"), std::string::npos) << r;
  EXPECT_NE(r.find("2 x 2 layers x 2 kv heads x 16 head_dim x 300 cells x 2 B"), std::string::npos)
      << r;
  EXPECT_NE(r.find("tied embeddings"), std::string::npos);
  EXPECT_NE(r.find("q/k/v biases"), std::string::npos);
  EXPECT_NE(r.find("layers.1.v_bias"), std::string::npos);
  EXPECT_NE(r.find("(= embed_tokens)"), std::string::npos);
  const std::string params = fmt::format("parameters   {} ", m->spec.parameter_count());
  EXPECT_NE(r.find(params), std::string::npos) << "loaded tensors disagree with the config count\n"
                                               << r;
}

TEST(Inspect, MissingModelIsAnError) {
  EXPECT_FALSE(inspect_model("/nonexistent/model.gguf").ok());
}

}  // namespace
}  // namespace cellm::model
