// GGUF models: ModelSpec from metadata, the GGUF→HF name mapping, Q/K row
// un-permutation (checked against the converter's permutation applied here
// to known values), quantized weights, and the real SmolLM2 and Gemma 3 files.
#include "model/gguf_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

#include "format/fp8.h"
#include "format/test_writers.h"
#include "model/loader.h"
#include "support/testdata.h"

namespace cellm::model {
namespace {

namespace fs = std::filesystem;
using testing::Bytes;
using testing::GgufBuilder;

constexpr std::int64_t kHidden = 32, kHeads = 2, kKvHeads = 1, kHeadDim = 16, kInter = 64,
                       kVocab = 8;

// Row r, column c of a test matrix: distinct, exact in f32.
float cell(std::int64_t r, std::int64_t c, float salt) {
  return salt + static_cast<float>(r) * 64.0f + static_cast<float>(c);
}
std::vector<float> matrix(std::int64_t rows, std::int64_t cols, float salt) {
  std::vector<float> m;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) m.push_back(cell(r, c, salt));
  }
  return m;
}
// What GGUF's llama converter does to Q/K: within each head, row (j, i) of
// the [2, head_dim/2] split moves to (i, j).
std::vector<float> converter_permute(const std::vector<float>& m, std::int64_t heads,
                                     std::int64_t cols) {
  const std::int64_t rows = static_cast<std::int64_t>(m.size()) / cols;
  const std::int64_t hd = rows / heads;
  std::vector<float> out(m.size());
  for (std::int64_t h = 0; h < heads; ++h) {
    for (std::int64_t j = 0; j < 2; ++j) {
      for (std::int64_t i = 0; i < hd / 2; ++i) {
        const std::int64_t src = h * hd + j * (hd / 2) + i;
        const std::int64_t dst = h * hd + i * 2 + j;
        std::copy_n(m.begin() + src * cols, cols, out.begin() + dst * cols);
      }
    }
  }
  return out;
}
Bytes f32(const std::vector<float>& v) {
  return testing::bytes_of(v);
}
std::vector<std::uint64_t> ne(std::int64_t rows, std::int64_t cols) {
  return {static_cast<std::uint64_t>(cols), static_cast<std::uint64_t>(rows)};
}
// Q8_0 blocks with scale 1 and quants q(k) = (k % 19) - 9: values known exactly.
Bytes q8_matrix(std::int64_t rows, std::int64_t cols) {
  Bytes b;
  std::int64_t k = 0;
  for (std::int64_t blk = 0; blk < rows * cols / 32; ++blk) {
    b.push_back(0x00);
    b.push_back(0x3c);
    for (int e = 0; e < 32; ++e, ++k)
      b.push_back(static_cast<std::uint8_t>(static_cast<std::int8_t>(k % 19 - 9)));
  }
  return b;
}

// `gate_type` 8 is Q8_0 (known values); 0 is F32 (an all-float file); 7 is
// Q5_1, which cellm cannot read. `all_q8`: every other projection is Q8_0
// too (as a quantized file has them).
GgufBuilder tiny(const std::string& arch, std::uint32_t gate_type = 8, bool all_q8 = false) {
  GgufBuilder g;
  g.kv_str("general.architecture", arch)
      .kv_u32(arch + ".block_count", 1)
      .kv_u32(arch + ".context_length", 128)
      .kv_u32(arch + ".embedding_length", kHidden)
      .kv_u32(arch + ".feed_forward_length", kInter)
      .kv_u32(arch + ".attention.head_count", kHeads)
      .kv_u32(arch + ".attention.head_count_kv", kKvHeads)
      .kv_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f)
      .kv_f32(arch + ".rope.freq_base", 50000.0f)
      .kv_strs("tokenizer.ggml.tokens",
               {"<pad>", "<eos>", "<bos>", "a", "b", "<end_of_turn>", "c", "d"})
      .kv_u32("tokenizer.ggml.bos_token_id", 2)
      .kv_u32("tokenizer.ggml.eos_token_id", 1);
  const std::int64_t q = kHeads * kHeadDim, kv = kKvHeads * kHeadDim;
  g.tensor("token_embd.weight", ne(kVocab, kHidden), 0, f32(matrix(kVocab, kHidden, 0.5f)));
  g.tensor("output_norm.weight", {kHidden}, 0, f32(std::vector<float>(kHidden, 1.0f)));
  g.tensor("blk.0.attn_norm.weight", {kHidden}, 0, f32(std::vector<float>(kHidden, 2.0f)));
  g.tensor("blk.0.ffn_norm.weight", {kHidden}, 0, f32(std::vector<float>(kHidden, 3.0f)));
  const auto perm = [&](std::vector<float> m, std::int64_t heads) {
    return arch == "llama" ? converter_permute(m, heads, kHidden) : m;
  };
  if (all_q8) {
    g.tensor("blk.0.attn_q.weight", ne(q, kHidden), 8, q8_matrix(q, kHidden));
    g.tensor("blk.0.attn_k.weight", ne(kv, kHidden), 8, q8_matrix(kv, kHidden));
    g.tensor("blk.0.attn_v.weight", ne(kv, kHidden), 8, q8_matrix(kv, kHidden));
    g.tensor("blk.0.attn_output.weight", ne(kHidden, q), 8, q8_matrix(kHidden, q));
  } else {
    g.tensor("blk.0.attn_q.weight", ne(q, kHidden), 0,
             f32(perm(matrix(q, kHidden, 0.25f), kHeads)));
    g.tensor("blk.0.attn_k.weight", ne(kv, kHidden), 0,
             f32(perm(matrix(kv, kHidden, 0.75f), kKvHeads)));
    g.tensor("blk.0.attn_v.weight", ne(kv, kHidden), 0, f32(matrix(kv, kHidden, 0.125f)));
    g.tensor("blk.0.attn_output.weight", ne(kHidden, q), 0, f32(matrix(kHidden, q, 0.375f)));
  }
  if (gate_type == 8) {
    g.tensor("blk.0.ffn_gate.weight", ne(kInter, kHidden), 8, q8_matrix(kInter, kHidden));
  } else if (gate_type == 0) {
    g.tensor("blk.0.ffn_gate.weight", ne(kInter, kHidden), 0,
             f32(matrix(kInter, kHidden, 0.5625f)));
  } else {
    // Q8_1 blocks: 36 bytes per 32 values.
    g.tensor("blk.0.ffn_gate.weight", ne(kInter, kHidden), gate_type,
             Bytes(static_cast<std::size_t>(kInter * kHidden / 32 * 36), 0));
  }
  if (all_q8) {
    g.tensor("blk.0.ffn_up.weight", ne(kInter, kHidden), 8, q8_matrix(kInter, kHidden));
    g.tensor("blk.0.ffn_down.weight", ne(kHidden, kInter), 8, q8_matrix(kHidden, kInter));
  } else {
    g.tensor("blk.0.ffn_up.weight", ne(kInter, kHidden), 0, f32(matrix(kInter, kHidden, 0.625f)));
    g.tensor("blk.0.ffn_down.weight", ne(kHidden, kInter), 0, f32(matrix(kHidden, kInter, 0.875f)));
  }
  if (arch == "gemma3") {
    g.kv_u32("gemma3.attention.key_length", kHeadDim)
        .kv_u32("gemma3.attention.value_length", kHeadDim);
    g.kv_u32("gemma3.attention.sliding_window", 4);
    g.tensor("blk.0.attn_q_norm.weight", {kHeadDim}, 0, f32(std::vector<float>(kHeadDim, 4.0f)));
    g.tensor("blk.0.attn_k_norm.weight", {kHeadDim}, 0, f32(std::vector<float>(kHeadDim, 5.0f)));
    g.tensor("blk.0.post_attention_norm.weight", {kHidden}, 0,
             f32(std::vector<float>(kHidden, 6.0f)));
    g.tensor("blk.0.post_ffw_norm.weight", {kHidden}, 0, f32(std::vector<float>(kHidden, 7.0f)));
  }
  return g;
}

class GgufTiny : public ::testing::Test {
 protected:
  fs::path path;
  void SetUp() override {
    path = fs::path(::testing::TempDir()) /
           (std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + ".gguf");
  }
  void TearDown() override { fs::remove(path); }
  Result<LoadedModel> load(const GgufBuilder& g, LoadOptions o = {}) {
    testing::write_file(path, g.build());
    return load_model(path, o);
  }
};

void expect_matrix(const Tensor& t, std::int64_t rows, std::int64_t cols, float salt) {
  ASSERT_EQ(t.shape(), (Shape{rows, cols}));
  std::int64_t bad = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      if (element_as_f32(t, r * cols + c) != cell(r, c, salt)) ++bad;
    }
  }
  EXPECT_EQ(bad, 0) << "elements differing from the Hugging Face layout";
}

TEST_F(GgufTiny, LlamaSpecAndUnpermutedAttention) {
  auto m = load(tiny("llama"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const ModelSpec& s = m->spec;
  EXPECT_EQ(s.arch, Architecture::kLlama);
  EXPECT_EQ(s.num_layers, 1);
  EXPECT_EQ(s.head_dim, kHeadDim);
  EXPECT_EQ(s.vocab_size, kVocab);
  EXPECT_EQ(s.layers[0].rope.theta, 50000.0);
  EXPECT_EQ(s.layers[0].rope.rotary_dim, kHeadDim);
  EXPECT_TRUE(s.tie_word_embeddings);
  EXPECT_EQ(s.bos_token_id, 2);
  EXPECT_EQ(s.eos_token_ids, std::vector<std::int64_t>{1});
  EXPECT_EQ(m->format, ModelFormat::kGguf);
  ASSERT_NE(m->gguf_metadata(), nullptr);
  EXPECT_EQ(m->gguf_metadata()->find("tokenizer.ggml.tokens")->strings.size(), 8u);
  const LayerWeights& l = m->weights.layers[0];
  expect_matrix(l.q_proj, kHeads * kHeadDim, kHidden, 0.25f);
  expect_matrix(l.k_proj, kKvHeads * kHeadDim, kHidden, 0.75f);
  expect_matrix(l.v_proj, kKvHeads * kHeadDim, kHidden, 0.125f);
  expect_matrix(l.down_proj, kHidden, kInter, 0.875f);
  EXPECT_EQ(element_as_f32(l.mlp_norm, 0), 3.0f);  // ffn_norm is llama's post_attention_layernorm
  EXPECT_EQ(m->weights.lm_head.data(), m->weights.embed_tokens.data());
  // Q8_0 with scale 1: element k is (k % 19) - 9.
  ASSERT_EQ(l.gate_proj.dtype(), DType::kF32);
  for (std::int64_t k : {std::int64_t{0}, std::int64_t{1}, std::int64_t{18}, std::int64_t{19},
                         std::int64_t{1000}, kInter * kHidden - 1}) {
    EXPECT_EQ(element_as_f32(l.gate_proj, k), static_cast<float>(k % 19 - 9)) << k;
  }
}

// --keep-quantized on the GPU: the projections it keeps in blocks are not
// dequantized on the host (their tensors stay undefined); everything else
// loads as usual, and without the option everything loads.
TEST_F(GgufTiny, WhatTheGpuKeepsInBlocksIsNotDequantized) {
  LoadOptions o;
  o.gpu_keeps_blocks = true;
  auto m = load(tiny("llama", 8, /*all_q8=*/true), o);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const LayerWeights& l = m->weights.layers[0];
  for (const Tensor* t :
       {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj}) {
    EXPECT_FALSE(t->defined());
  }
  // The tied head's embedding is looked up on the GPU in bf16: loaded.
  EXPECT_EQ(m->weights.embed_tokens.shape(), (Shape{kVocab, kHidden}));
  EXPECT_NE(m->weights.embed_tokens.data(), nullptr);
  EXPECT_EQ(element_as_f32(l.mlp_norm, 0), 3.0f);

  auto all = load_model(path);
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  EXPECT_EQ(all->weights.layers[0].up_proj.shape(), (Shape{kInter, kHidden}));
  EXPECT_NE(all->weights.layers[0].up_proj.data(), nullptr);
}

// A group the GPU keeps only whole: gate (Q8_0) beside an F32 up stays
// bf16 on the GPU, so both load; so do the F32 attention projections.
TEST_F(GgufTiny, AGroupWithAFloatTensorIsLoadedWhole) {
  LoadOptions o;
  o.gpu_keeps_blocks = true;
  auto m = load(tiny("llama"), o);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const LayerWeights& l = m->weights.layers[0];
  for (const Tensor* t :
       {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj}) {
    EXPECT_NE(t->data(), nullptr);
  }
  EXPECT_EQ(element_as_f32(l.gate_proj, 20), -8.0f);  // (20 % 19) - 9
}

TEST_F(GgufTiny, QuantizedWeightsCanBecomeBf16) {
  LoadOptions o;
  o.dequant_dtype = DType::kBF16;
  auto m = load(tiny("llama"), o);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->weights.layers[0].gate_proj.dtype(), DType::kBF16);
  EXPECT_EQ(element_as_f32(m->weights.layers[0].gate_proj, 20), -8.0f);  // (20 % 19) - 9
  EXPECT_EQ(m->weights.layers[0].up_proj.dtype(), DType::kF32);          // f32 tensors stay views
  o.dequant_dtype = DType::kF16;
  EXPECT_EQ(load_model(path, o).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(GgufTiny, Gemma3SpecKeepsAttentionRowsAndFoldsNormOffset) {
  auto m = load(tiny("gemma3"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const ModelSpec& s = m->spec;
  EXPECT_EQ(s.arch, Architecture::kGemma3);
  EXPECT_FALSE(s.norm_weight_offset);
  EXPECT_TRUE(s.sandwich_norms);
  EXPECT_TRUE(s.qk_norm);
  EXPECT_EQ(s.activation, Activation::kGeluTanh);
  EXPECT_FLOAT_EQ(s.embedding_scale, std::sqrt(32.0f));
  EXPECT_FLOAT_EQ(s.attention_scale, 0.25f);
  EXPECT_EQ(s.layers[0].window, 4);  // one layer: sliding (pattern 6)
  EXPECT_EQ(s.layers[0].rope.theta, 10000.0);
  EXPECT_EQ(s.eos_token_ids, (std::vector<std::int64_t>{1, 5}));  // <eos>, <end_of_turn>
  const LayerWeights& l = m->weights.layers[0];
  expect_matrix(l.q_proj, kHeads * kHeadDim, kHidden, 0.25f);  // no permutation for gemma3
  EXPECT_EQ(element_as_f32(l.mlp_norm, 0), 3.0f);  // ffn_norm = pre_feedforward_layernorm
  EXPECT_EQ(element_as_f32(l.post_attn_norm, 0), 6.0f);
  EXPECT_EQ(element_as_f32(l.post_mlp_norm, 0), 7.0f);
  EXPECT_EQ(element_as_f32(l.k_norm, 0), 5.0f);
}

TEST_F(GgufTiny, ErrorsNameTheKeyOrTensor) {
  testing::write_file(path, GgufBuilder().kv_str("general.architecture", "falcon").build());
  auto r = load_model(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("falcon"), std::string::npos);

  testing::write_file(path, GgufBuilder().kv_str("general.architecture", "llama").build());
  r = load_model(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("llama.block_count"), std::string::npos)
      << r.status().to_string();

  auto g = tiny("llama");
  g.tensor("blk.0.attn_q.bias", {kHeads * kHeadDim}, 0, f32(std::vector<float>(32, 0)));
  r = load(g);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("self_attn.q_proj.bias"), std::string::npos)
      << r.status().to_string();
}

TEST_F(GgufTiny, UnsupportedArchitectureOrTensorTypeIsRefusedByName) {
  auto g = tiny("gpt2");
  auto r = load(g);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(r.status().message().find("'gpt2'"), std::string::npos) << r.status().to_string();

  r = load(tiny("llama", 9));  // Q8_1: llama.cpp's activation format, never a weight's
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(r.status().message().find("blk.0.ffn_gate.weight"), std::string::npos)
      << r.status().to_string();
  EXPECT_NE(r.status().message().find("Q8_1"), std::string::npos) << r.status().to_string();
}

// --quantize fp8 starts from float weights: a file holding a block-quantized
// tensor is refused by name, an all-float one is quantized (its values are
// checked in depth on the Hugging Face fixtures, fp8_quantize_test.cpp).
TEST_F(GgufTiny, QuantizeFp8RefusesBlockQuantizedFiles) {
  LoadOptions o;
  o.quantize = Quantize::kFp8;
  auto r = load(tiny("llama"), o);
  ASSERT_FALSE(r.ok());
  const std::string msg(r.status().message());
  EXPECT_NE(msg.find(path.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("'blk.0.ffn_gate.weight' is stored as Q8_0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("without --quantize"), std::string::npos) << msg;
  EXPECT_TRUE(load_model(path).ok()) << "the same file loads without --quantize";
}

TEST_F(GgufTiny, QuantizeFp8TakesAllFloatFiles) {
  auto plain = load(tiny("llama", 0));
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_TRUE(plain->weights.fp8.empty());
  LoadOptions o;
  o.quantize = Quantize::kFp8;
  auto m = load_model(path, o);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->weights.fp8.size(), 7u);
  const Fp8Weight& f = m->weights.fp8.at("model.layers.0.mlp.gate_proj.weight");
  const Tensor& before = plain->weights.layers[0].gate_proj;
  const Tensor& after = m->weights.layers[0].gate_proj;
  ASSERT_EQ(f.codes.shape(), (Shape{kInter, kHidden}));
  std::int64_t moved = 0;
  for (std::int64_t k = 0; k < kInter * kHidden; ++k) {
    const float scale = f.scales.data_as<float>()[k / kHidden];
    const float v = element_as_f32(after, k);
    EXPECT_EQ(v, format::e4m3_to_f32(f.codes.data_as<std::uint8_t>()[k]) * scale) << k;
    // Within half a step of 3 mantissa bits (1/16 of the value), or of the
    // subnormal quantum 2^-9 × scale.
    const float x = element_as_f32(before, k);
    EXPECT_LE(std::fabs(v - x), std::max(std::fabs(x) / 16, std::ldexp(scale, -10)) * 1.0001f);
    if (v != x) ++moved;
  }
  EXPECT_GT(moved, 0);
  EXPECT_EQ(m->weights.embed_tokens.dtype(), DType::kF32);
  EXPECT_EQ(std::memcmp(m->weights.embed_tokens.data(), plain->weights.embed_tokens.data(),
                        plain->weights.embed_tokens.nbytes()),
            0)
      << "the embedding is left as stored";
}

TEST(GgufNames, MapToHuggingFace) {
  EXPECT_EQ(canonical_tensor_name(Architecture::kPhi3, "blk.1.attn_qkv.weight"),
            "model.layers.1.self_attn.qkv_proj.weight");
  EXPECT_EQ(canonical_tensor_name(Architecture::kPhi3, "blk.1.ffn_up.weight"),
            "model.layers.1.mlp.gate_up_proj.weight");
  EXPECT_EQ(canonical_tensor_name(Architecture::kQwen2, "blk.1.ffn_up.weight"),
            "model.layers.1.mlp.up_proj.weight");
  EXPECT_EQ(canonical_tensor_name(Architecture::kQwen3, "blk.0.attn_k_norm.weight"),
            "model.layers.0.self_attn.k_norm.weight");
  EXPECT_EQ(canonical_tensor_name(Architecture::kLlama, "blk.12.ffn_norm.weight"),
            "model.layers.12.post_attention_layernorm.weight");
  EXPECT_EQ(canonical_tensor_name(Architecture::kGemma3, "blk.3.ffn_norm.weight"),
            "model.layers.3.pre_feedforward_layernorm.weight");
  EXPECT_EQ(canonical_tensor_name(Architecture::kLlama, "output.weight"), "lm_head.weight");
  EXPECT_EQ(canonical_tensor_name(Architecture::kLlama, "blk.x.attn_q.weight"),
            "blk.x.attn_q.weight");
  EXPECT_EQ(canonical_tensor_name(Architecture::kLlama, "rope_freqs.weight"), "rope_freqs.weight");
}

fs::path real_model(const std::string& file) {
  return testing::env_path("CELLMDEV_MODELS_DIR").value_or(testing::source_dir() / "models") / file;
}

TEST(GgufReal, SmolLM2) {
  const fs::path p = real_model("SmolLM2-135M-Instruct.Q4_1.gguf");
  if (!fs::exists(p)) FAIL() << p << " is missing; run scripts/fetch-model";
  auto m = load_model(p);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const ModelSpec& s = m->spec;  // facts from SmolLM2-135M-Instruct's config.json
  EXPECT_EQ(s.arch, Architecture::kLlama);
  EXPECT_EQ(s.num_layers, 30);
  EXPECT_EQ(s.hidden_size, 576);
  EXPECT_EQ(s.intermediate_size, 1536);
  EXPECT_EQ(s.num_heads, 9);
  EXPECT_EQ(s.num_kv_heads, 3);
  EXPECT_EQ(s.head_dim, 64);
  EXPECT_EQ(s.vocab_size, 49152);
  EXPECT_EQ(s.max_context, 8192);
  EXPECT_EQ(s.layers[0].rope.theta, 100000.0);
  EXPECT_FLOAT_EQ(s.norm_eps, 1e-5f);
  EXPECT_TRUE(s.tie_word_embeddings);
  EXPECT_EQ(s.bos_token_id, 1);
  EXPECT_EQ(s.eos_token_ids, std::vector<std::int64_t>{2});
  EXPECT_EQ(s.parameter_count(), 134515008);  // the published 135M count
}

TEST(GgufReal, Gemma3) {
  const fs::path p = real_model("gemma-3-270m-q4_k_m.gguf");
  if (!fs::exists(p)) FAIL() << p << " is missing; run scripts/fetch-model";
  LoadOptions o;
  o.dequant_dtype = DType::kBF16;
  auto m = load_model(p, o);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const ModelSpec& s = m->spec;  // facts from gemma-3-270m's config.json
  EXPECT_EQ(s.arch, Architecture::kGemma3);
  EXPECT_EQ(s.num_layers, 18);
  EXPECT_EQ(s.hidden_size, 640);
  EXPECT_EQ(s.intermediate_size, 2048);
  EXPECT_EQ(s.num_heads, 4);
  EXPECT_EQ(s.num_kv_heads, 1);
  EXPECT_EQ(s.head_dim, 256);
  EXPECT_EQ(s.vocab_size, 262144);
  EXPECT_FLOAT_EQ(s.attention_scale, 1.0f / 16.0f);  // query_pre_attn_scalar 256
  for (int i = 0; i < 18; ++i) {
    const bool global = i % 6 == 5;
    EXPECT_EQ(s.layers[i].window, global ? 0 : 512) << i;
    EXPECT_EQ(s.layers[i].rope.theta, global ? 1e6 : 1e4) << i;
  }
  EXPECT_EQ(s.bos_token_id, 2);
  EXPECT_EQ(s.eos_token_ids, (std::vector<std::int64_t>{1, 106}));
  EXPECT_EQ(m->weights.embed_tokens.dtype(), DType::kBF16);
  EXPECT_EQ(m->weights.layers[0].attn_norm.dtype(), DType::kF32);
}

}  // namespace
}  // namespace cellm::model
