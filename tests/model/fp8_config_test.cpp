// config.json's quantization_config into ModelSpec::quant: every layout the
// FP8 checkpoint writer produces parses to the expected QuantSpec (method,
// granularity, block, scale tensor name, ignore list and its "re:" patterns),
// and everything cellm does not load is refused with a message naming the
// field, its value and what is supported.
#include <gtest/gtest.h>

#include "model/fp8_checkpoint.h"
#include "model/hf_config.h"

namespace cellm::model {
namespace {

using cellm::testing::Fp8Layout;
using nlohmann::json;

Result<ModelSpec> parse_quant(const json& quant) {
  return spec_from_hf_config_text(cellm::testing::fp8_config_with(quant), "cfg.json");
}

void expect_refused(const json& quant, std::initializer_list<std::string_view> needles) {
  auto r = parse_quant(quant);
  ASSERT_FALSE(r.ok()) << "accepted " << quant.dump();
  for (auto n : needles) {
    EXPECT_NE(r.status().message().find(n), std::string::npos)
        << "'" << n << "' not in: " << r.status().to_string();
  }
}

TEST(Fp8Config, EveryWrittenLayoutParses) {
  struct Want {
    Fp8Layout layout;
    QuantMethod method;
    ScaleGranularity granularity;
    const char* scale_name;
    std::size_t ignored;
  };
  for (const Want& w : {
           Want{Fp8Layout::kFp8Tensor, QuantMethod::kFp8, ScaleGranularity::kTensor, "weight_scale",
                1},
           Want{Fp8Layout::kFp8Block, QuantMethod::kFp8, ScaleGranularity::kBlock,
                "weight_scale_inv", 1},
           Want{Fp8Layout::kFbgemmChannel, QuantMethod::kFbgemmFp8, ScaleGranularity::kChannel,
                "weight_scale", 1},
           Want{Fp8Layout::kCtTensor, QuantMethod::kCompressedTensors, ScaleGranularity::kTensor,
                "weight_scale", 2},
           Want{Fp8Layout::kCtChannel, QuantMethod::kCompressedTensors, ScaleGranularity::kChannel,
                "weight_scale", 2},
           Want{Fp8Layout::kCtBlock, QuantMethod::kCompressedTensors, ScaleGranularity::kBlock,
                "weight_scale", 2},
       }) {
    SCOPED_TRACE(fp8_layout_name(w.layout));
    cellm::testing::Fp8WriteOptions o;
    o.layout = w.layout;
    o.block_rows = 32;
    o.block_cols = 16;
    auto spec = parse_quant(cellm::testing::fp8_detail::quant_config(o));
    ASSERT_TRUE(spec.ok()) << spec.status().to_string();
    const QuantSpec& q = spec->quant;
    EXPECT_EQ(q.method, w.method);
    EXPECT_EQ(q.granularity, w.granularity);
    EXPECT_EQ(q.scale_name, w.scale_name);
    EXPECT_EQ(q.ignore.size(), w.ignored);
    EXPECT_TRUE(q.ignores("lm_head"));
    EXPECT_FALSE(q.ignores("model.layers.0.mlp.up_proj"));
    EXPECT_EQ(q.ignores("model.layers.0.mlp.down_proj"), w.ignored == 2);
    EXPECT_FALSE(q.ignores("model.layers.10.mlp.down_proj"));
    if (w.granularity == ScaleGranularity::kBlock) {
      EXPECT_EQ(q.block_rows, 32);
      EXPECT_EQ(q.block_cols, 16);
      EXPECT_EQ(q.scale_grid(160, 64), (std::pair<std::int64_t, std::int64_t>{5, 4}));
      EXPECT_EQ(q.scale_grid(33, 17), (std::pair<std::int64_t, std::int64_t>{2, 2}));
    }
  }
  auto none = parse_quant(json());
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->quant.quantized());
}

TEST(Fp8Config, RefusalsNameTheFieldAndWhatIsSupported) {
  expect_refused({{"quant_method", "awq"}, {"bits", 4}},
                 {"cfg.json", "'quantization_config.quant_method'", "'awq'", "fbgemm_fp8",
                  "compressed-tensors"});
  expect_refused({{"bits", 4}}, {"'quantization_config.quant_method'", "missing"});
  expect_refused({{"quant_method", "fp8"}, {"fmt", "e5m2"}}, {"quantization_config.fmt", "e4m3"});
  expect_refused({{"quant_method", "fp8"}, {"weight_block_size", {128}}},
                 {"quantization_config.weight_block_size", "[128]"});
  expect_refused({{"quant_method", "fp8"}, {"activation_scheme", "weird"}},
                 {"quantization_config.activation_scheme"});
  const auto ct = [](json weights, json extra = json::object()) {
    json q = {{"quant_method", "compressed-tensors"},
              {"format", "float-quantized"},
              {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}}}}}};
    q.update(extra);
    return q;
  };
  const json fp8_weights = {{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}};
  ASSERT_TRUE(parse_quant(ct(fp8_weights)).ok());
  json w = fp8_weights;
  w["num_bits"] = 4;
  expect_refused(ct(w), {"config_groups.group_0.weights.num_bits", "4", "8-bit"});
  w = fp8_weights;
  w["type"] = "int";
  expect_refused(ct(w), {"config_groups.group_0.weights.type", "\"int\"", "float"});
  w = fp8_weights;
  w["strategy"] = "group";
  w["group_size"] = 128;
  expect_refused(ct(w), {"weights.strategy", "'group'"});
  w = fp8_weights;
  w["strategy"] = "block";
  expect_refused(ct(w), {"weights.block_structure", "missing"});
  w = fp8_weights;
  w["symmetric"] = false;
  expect_refused(ct(w), {"weights.symmetric"});
  expect_refused(ct(fp8_weights, {{"format", "pack-quantized"}}),
                 {"quantization_config.format", "pack-quantized"});
  expect_refused(ct(fp8_weights, {{"sparsity_config", {{"format", "sparse-24"}}}}),
                 {"quantization_config.sparsity_config"});
  expect_refused(ct(fp8_weights, {{"ignore", {"re:(unclosed"}}}),
                 {"quantization_config.ignore", "re:(unclosed"});
  expect_refused(ct(fp8_weights, {{"config_groups", json::object()}}),
                 {"quantization_config.config_groups"});
}

}  // namespace
}  // namespace cellm::model
