// --quantize fp8 (model/quantize.h) on the Hugging Face fixtures: every
// projection's codes and per-row scales against a computation of the test's
// own (the row's amax / 448, and the nearest E4M3 value found by a search of
// the sorted value table with ties to the even code), its replacement
// tensor equal to code value × scale, everything else untouched; and the
// refusals: an FP8 checkpoint, and parse_quantize on unknown names. (GGUF
// files: gguf_model_test.cpp.)
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

#include <gtest/gtest.h>

#include "format/fp8.h"
#include "model/fp8_checkpoint.h"
#include "model/loader.h"
#include "model/quantize.h"
#include "support/testdata.h"

namespace cellm::model {
namespace {

namespace fs = std::filesystem;

fs::path fixture(const std::string& name) {
  return cellm::testing::testdata_dir() / "hf_models" / name;
}

// The E4M3 magnitude code nearest to |x| (ties to the even code), signed as
// x: a binary search over the positive finite values, which increase with
// the code, then the nearer neighbour.
std::uint8_t nearest_code(float x) {
  static const std::vector<double> positive = [] {
    std::vector<double> v;
    for (int c = 0; c <= 0x7E; ++c) v.push_back(format::e4m3_values()[static_cast<std::size_t>(c)]);
    return v;
  }();
  const double a = std::fabs(static_cast<double>(x));
  const auto hi = std::lower_bound(positive.begin(), positive.end(), a);
  int code = 0;
  if (hi == positive.end()) {
    code = 0x7E;  // beyond 448: the nearest finite value
  } else if (hi == positive.begin()) {
    code = 0;
  } else {
    const int h = static_cast<int>(hi - positive.begin());
    const double dl = a - positive[static_cast<std::size_t>(h - 1)];
    const double dh = positive[static_cast<std::size_t>(h)] - a;
    code = dl < dh ? h - 1 : dh < dl ? h : ((h & 1) == 0 ? h : h - 1);
  }
  return static_cast<std::uint8_t>((std::signbit(x) ? 0x80 : 0x00) | code);
}

struct Projection {
  const char* suffix;
  Tensor LayerWeights::*member;
};
constexpr Projection kProjections[] = {
    {"self_attn.q_proj", &LayerWeights::q_proj}, {"self_attn.k_proj", &LayerWeights::k_proj},
    {"self_attn.v_proj", &LayerWeights::v_proj}, {"self_attn.o_proj", &LayerWeights::o_proj},
    {"mlp.gate_proj", &LayerWeights::gate_proj}, {"mlp.up_proj", &LayerWeights::up_proj},
    {"mlp.down_proj", &LayerWeights::down_proj}};

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

struct QuantizeCase {
  std::string fixture;
  DType dtype;
};

void PrintTo(const QuantizeCase& c, std::ostream* os) {
  *os << c.fixture << " " << dtype_name(c.dtype);
}

class Fp8Quantize : public ::testing::TestWithParam<QuantizeCase> {};

TEST_P(Fp8Quantize, CodesAndScalesMatchAPerRowComputation) {
  const QuantizeCase& c = GetParam();
  LoadOptions o;
  o.dequant_dtype = c.dtype;
  auto base = load_model(fixture(c.fixture), o);
  ASSERT_TRUE(base.ok()) << base.status().to_string();
  o.quantize = Quantize::kFp8;
  auto q = load_model(fixture(c.fixture), o);
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  EXPECT_NE(q->source.find("FP8"), std::string::npos) << q->source;
  ASSERT_EQ(q->weights.layers.size(), base->weights.layers.size());
  EXPECT_EQ(q->weights.fp8.size(), 7 * base->weights.layers.size());

  std::int64_t checked = 0, changed = 0;
  for (std::size_t i = 0; i < base->weights.layers.size(); ++i) {
    const LayerWeights& bl = base->weights.layers[i];
    const LayerWeights& ql = q->weights.layers[i];
    for (const Projection& p : kProjections) {
      const std::string name = fmt::format("model.layers.{}.{}.weight", i, p.suffix);
      SCOPED_TRACE(name);
      const Tensor& w = bl.*p.member;
      const Tensor& got = ql.*p.member;
      const auto it = q->weights.fp8.find(name);
      ASSERT_NE(it, q->weights.fp8.end());
      const Fp8Weight& f = it->second;
      const std::int64_t rows = w.dim(0), cols = w.dim(1);
      ASSERT_EQ(got.dtype(), c.dtype);
      ASSERT_EQ(got.shape(), (Shape{rows, cols}));
      ASSERT_EQ(f.codes.dtype(), DType::kU8);
      ASSERT_EQ(f.codes.shape(), (Shape{rows, cols}));
      ASSERT_EQ(f.scales.dtype(), DType::kF32);
      ASSERT_EQ(f.scales.shape(), (Shape{rows, 1}));
      EXPECT_EQ(f.block_rows, 1);
      EXPECT_EQ(f.block_cols, cols);
      const auto* codes = f.codes.data_as<std::uint8_t>();
      std::int64_t bad_codes = 0, bad_values = 0;
      for (std::int64_t r = 0; r < rows; ++r) {
        double amax = 0;
        for (std::int64_t k = 0; k < cols; ++k) {
          amax = std::max(amax, std::fabs(static_cast<double>(element_as_f32(w, r * cols + k))));
        }
        const float scale = amax > 0 ? static_cast<float>(amax) / 448.0f : 1.0f;
        ASSERT_EQ(f.scales.data_as<float>()[r], scale) << "row " << r;
        for (std::int64_t k = 0; k < cols; ++k) {
          const std::int64_t e = r * cols + k;
          const float x = element_as_f32(w, e);
          const std::uint8_t want = nearest_code(x / scale);
          if (codes[e] != want) ++bad_codes;
          const float value = static_cast<float>(static_cast<double>(format::e4m3_values()[want]) *
                                                 static_cast<double>(scale));
          const float expect = c.dtype == DType::kF32 ? value : bf16_to_f32(f32_to_bf16(value));
          if (element_as_f32(got, e) != expect) ++bad_values;
          if (element_as_f32(got, e) != x) ++changed;
          ++checked;
        }
      }
      EXPECT_EQ(bad_codes, 0);
      EXPECT_EQ(bad_values, 0);
    }
    // Norms and biases are untouched.
    EXPECT_TRUE(same_bytes(ql.attn_norm, bl.attn_norm));
    EXPECT_TRUE(same_bytes(ql.mlp_norm, bl.mlp_norm));
    if (bl.q_bias.data() != nullptr) {  // attention_bias only
      EXPECT_TRUE(same_bytes(ql.q_bias, bl.q_bias));
    }
  }
  EXPECT_TRUE(same_bytes(q->weights.embed_tokens, base->weights.embed_tokens));
  EXPECT_TRUE(same_bytes(q->weights.lm_head, base->weights.lm_head));
  EXPECT_TRUE(same_bytes(q->weights.final_norm, base->weights.final_norm));
  EXPECT_EQ(q->weights.fp8.count("lm_head.weight"), 0u);
  EXPECT_EQ(q->weights.fp8.count("model.layers.0.self_attn.qkv_proj.weight"), 0u);
  // Rounding to 3 mantissa bits moves most weights.
  EXPECT_GT(changed, checked / 2) << "of " << checked;
}

std::string case_name(const ::testing::TestParamInfo<QuantizeCase>& info) {
  return info.param.fixture + "_" + std::string(dtype_name(info.param.dtype));
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, Fp8Quantize,
    ::testing::Values(QuantizeCase{"llama", DType::kF32}, QuantizeCase{"qwen2", DType::kF32},
                      QuantizeCase{"qwen3", DType::kF32}, QuantizeCase{"mistral", DType::kF32},
                      QuantizeCase{"gemma3", DType::kF32}, QuantizeCase{"phi3", DType::kF32},
                      QuantizeCase{"llama", DType::kBF16}, QuantizeCase{"phi3", DType::kBF16}),
    case_name);

// quantize_fp8 on hand-made rows: an all-zero row gets scale 1 and zero
// codes, the row's largest magnitude maps to ±448 exactly, f16 input reads.
TEST(Fp8QuantizeRows, ZeroRowsAndF16Input) {
  ModelSpec spec;
  spec.num_layers = 1;
  Weights w;
  w.layers.resize(1);
  const std::vector<float> row_values = {0.0f, 0.0f, 0.0f, 0.0f, 1.5f, -3.0f, 0.25f, 0.0f};
  Tensor t = Tensor::empty(DType::kF16, {2, 4});
  for (std::size_t k = 0; k < row_values.size(); ++k) {
    t.data_as<std::uint16_t>()[k] = f32_to_f16(row_values[k]);
  }
  LayerWeights& l = w.layers[0];
  for (const Projection& p : kProjections) l.*p.member = t;
  ASSERT_TRUE(quantize_fp8(spec, w, DType::kF32).is_ok());
  const Fp8Weight& f = w.fp8.at("model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(f.scales.data_as<float>()[0], 1.0f);
  EXPECT_EQ(f.scales.data_as<float>()[1], 3.0f / 448.0f);
  const auto* codes = f.codes.data_as<std::uint8_t>();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(codes[k], 0x00);
  EXPECT_EQ(codes[5], 0xFE);  // -3 is the row's amax: -448
  EXPECT_EQ(l.down_proj.dtype(), DType::kF32);
  EXPECT_FLOAT_EQ(l.down_proj.data_as<float>()[5], -3.0f);
  EXPECT_EQ(l.down_proj.data_as<float>()[0], 0.0f);
  EXPECT_EQ(t.dtype(), DType::kF16) << "the input tensor itself is left alone";

  Weights bad;
  bad.layers.resize(1);
  Tensor inf = Tensor::empty(DType::kF32, {1, 2});
  inf.data_as<float>()[0] = 1.0f;
  inf.data_as<float>()[1] = std::numeric_limits<float>::infinity();
  for (const Projection& p : kProjections) bad.layers[0].*p.member = inf;
  const Status s = quantize_fp8(spec, bad, DType::kF32);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("row 0"), std::string::npos) << s.to_string();
  EXPECT_FALSE(quantize_fp8(spec, w, DType::kF16).is_ok()) << "f16 output is not offered";
}

TEST(Fp8QuantizeRefusals, AnFp8CheckpointIsQuantizedAlready) {
  const fs::path out = fs::path(::testing::TempDir()) / "cellm_fp8_quantize_refusal";
  cellm::testing::Fp8WriteOptions wo;
  wo.layout = cellm::testing::Fp8Layout::kFbgemmChannel;
  cellm::testing::write_fp8_checkpoint(fixture("llama"), out, wo);
  ASSERT_TRUE(load_model(out).ok()) << "the checkpoint itself loads";
  LoadOptions o;
  o.quantize = Quantize::kFp8;
  auto m = load_model(out, o);
  ASSERT_FALSE(m.ok());
  const std::string msg(m.status().message());
  EXPECT_NE(msg.find(out.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("quantized already"), std::string::npos) << msg;
  EXPECT_NE(msg.find("without --quantize"), std::string::npos) << msg;
  fs::remove_all(out);
}

TEST(Fp8QuantizeNames, ParseAndName) {
  EXPECT_EQ(parse_quantize("fp8").value(), Quantize::kFp8);
  EXPECT_EQ(parse_quantize("none").value(), Quantize::kNone);
  EXPECT_EQ(quantize_name(Quantize::kFp8), "fp8");
  EXPECT_EQ(quantize_name(Quantize::kNone), "none");
  for (const char* bad : {"FP8", "int8", "", "fp8 "}) {
    auto q = parse_quantize(bad);
    ASSERT_FALSE(q.ok()) << bad;
    EXPECT_EQ(q.status().message(), fmt::format("--quantize '{}': use fp8 or none", bad));
  }
}

}  // namespace
}  // namespace cellm::model
