// CpuProgram's surface: methods, metadata, constants, option and weight
// checks, and refusals of malformed calls — each followed by a check that
// the refused call left the program and its KV storage untouched.
#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_program.h"
#include "cellm/types.h"
#include "sampling/logprobs.h"
#include "sampling/penalties.h"
#include "step_driver.h"
#include "tiny_model.h"

namespace cellm::cpu {
namespace {

using model::Architecture;
using testing::DriverToken;
using testing::StepDriver;

program::ProgramOptions small_options() {
  program::ProgramOptions o;
  o.static_widths = {1, 2, 4, 8};
  o.max_step = 64;
  o.kv_cells = 256;
  return o;
}

Tensor i64(std::vector<std::int64_t> values, Shape shape) {
  Tensor t = Tensor::empty(DType::kI64, std::move(shape));
  std::copy(values.begin(), values.end(), t.data_as<std::int64_t>());
  return t;
}

std::vector<float> row_of(const Tensor& t, std::int64_t r) {
  const std::int64_t n = t.dim(1);
  return {t.data_as<float>() + r * n, t.data_as<float>() + (r + 1) * n};
}

TEST(CpuProgramApi, MethodsMetadataAndConstants) {
  const auto m = testing::make_tiny_model(Architecture::kGemma3);
  auto options = small_options();
  options.static_widths = {8, 1, 4, 2, 128};  // 128 > max_step: not exported
  options.min_prefill_chunk = 3;
  auto p = CpuProgram::create(m.spec, m.weights, options);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  std::vector<std::string> names = (*p)->method_names();
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names,
            (std::vector<std::string>{"forward", "forward_1", "forward_2", "forward_4", "forward_8",
                                      "forward_others", "sample", "sample_argmax",
                                      "sample_logprobs", "sample_mask", "sample_penalize"}));
  EXPECT_EQ((*p)->backend_name(), "cpu");

  auto f4 = (*p)->method_meta("forward_4");
  ASSERT_TRUE(f4.ok());
  EXPECT_FALSE(f4->dynamic);
  ASSERT_EQ(f4->inputs.size(), 3u);
  EXPECT_EQ(f4->inputs[0].shape, (Shape{1, 4}));
  EXPECT_EQ(f4->inputs[0].dtype, DType::kI64);
  EXPECT_EQ(f4->inputs[1].shape, (Shape{4}));
  EXPECT_EQ(f4->inputs[2].shape, (Shape{4}));
  ASSERT_EQ(f4->outputs.size(), 1u);  // taps off
  EXPECT_EQ(f4->outputs[0].shape, (Shape{4, m.spec.vocab_size}));
  EXPECT_EQ(f4->outputs[0].dtype, DType::kF32);
  EXPECT_EQ(f4->backends, std::vector<std::string>{"cpu"});

  auto others = (*p)->method_meta("forward_others");
  ASSERT_TRUE(others.ok());
  EXPECT_TRUE(others->dynamic);
  EXPECT_EQ(others->inputs[0].shape, (Shape{1, 64}));
  auto sample = (*p)->method_meta("sample");
  ASSERT_TRUE(sample.ok());
  ASSERT_EQ(sample->inputs.size(), 3u);  // logits, params and the optional suppressed ids
  EXPECT_EQ(sample->inputs[1].shape[1], 4);
  EXPECT_EQ(sample->inputs[2].dtype, DType::kI64);
  EXPECT_EQ(sample->inputs[2].shape, (Shape{64, static_cast<std::int64_t>(kMaxSuppressedTokens)}));
  EXPECT_EQ(sample->optional_inputs, 1);
  auto argmax = (*p)->method_meta("sample_argmax");
  ASSERT_TRUE(argmax.ok());
  EXPECT_EQ(argmax->inputs.size(), 1u);
  EXPECT_EQ(argmax->optional_inputs, 0);
  EXPECT_EQ(sample->outputs[0].dtype, DType::kI64);
  EXPECT_EQ((*p)->method_meta("forward_3").status().code(), StatusCode::kNotFound);

  EXPECT_EQ((*p)->constant("get_vocab_size"), m.spec.vocab_size);
  EXPECT_EQ((*p)->constant("get_max_context_len"), m.spec.max_context);
  EXPECT_EQ((*p)->constant("get_offgraph_kv_max_cells"), 256);
  EXPECT_EQ((*p)->constant("get_min_prefill_chunk"), 3);
  EXPECT_EQ((*p)->constant("nope"), std::nullopt);
  EXPECT_EQ((*p)->cache_layout().layer_windows, (std::vector<std::int32_t>{4, 4, 0}));
}

TEST(CpuProgramApi, OptionalMethodsFollowOptions) {
  const auto m = testing::make_tiny_model(Architecture::kLlama);
  auto options = small_options();
  options.max_step = 8;  // equals the widest static width: no forward_others
  options.device_sampling = false;
  options.taps = true;
  auto p = CpuProgram::create(m.spec, m.weights, options);
  ASSERT_TRUE(p.ok());
  const auto names = (*p)->method_names();
  EXPECT_EQ(std::count(names.begin(), names.end(), "forward_others"), 0);
  EXPECT_EQ(std::count(names.begin(), names.end(), "sample"), 0);
  EXPECT_EQ((*p)->constant("get_min_prefill_chunk"), std::nullopt);
  auto meta = (*p)->method_meta("forward_2");
  ASSERT_TRUE(meta.ok());
  ASSERT_EQ(meta->outputs.size(), 2u);
  EXPECT_EQ(meta->outputs[1].shape, (Shape{2, m.spec.hidden_size}));
}

TEST(CpuProgramApi, RefusesBadOptions) {
  const auto m = testing::make_tiny_model(Architecture::kLlama);
  auto bad = [&](auto mutate) {
    auto o = small_options();
    mutate(o);
    return CpuProgram::create(m.spec, m.weights, o).status().code();
  };
  EXPECT_EQ(bad([](auto& o) { o.static_widths = {1, 0}; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](auto& o) { o.max_step = 0; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](auto& o) { o.static_widths = {128}; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](auto& o) { o.kv_cells = 1; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](auto& o) { o.min_prefill_chunk = 65; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](auto& o) { o.rope_table_dtype = DType::kI64; }), StatusCode::kInvalidArgument);
  // Default KV budget: 4 sequences of the context plus the scratch cell.
  auto o = small_options();
  o.kv_cells = 0;
  auto p = CpuProgram::create(m.spec, m.weights, o);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)->constant("get_offgraph_kv_max_cells"), 4 * m.spec.max_context + 1);
}

TEST(CpuProgramApi, RefusesMissingOrMisshapenWeightsAndBadSpecs) {
  auto m = testing::make_tiny_model(Architecture::kQwen2);
  auto missing = m;
  missing.weights.layers[1].k_bias = Tensor();
  auto r = CpuProgram::create(missing.spec, missing.weights, small_options());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("layers.1.k_bias"), std::string_view::npos)
      << r.status().to_string();

  auto misshapen = m;
  misshapen.weights.layers[0].down_proj = Tensor::empty(DType::kF32, {32, 47});
  r = CpuProgram::create(misshapen.spec, misshapen.weights, small_options());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("layers.0.down_proj"), std::string_view::npos);

  auto ints = m;
  ints.weights.final_norm = Tensor::empty(DType::kI32, {m.spec.hidden_size});
  EXPECT_EQ(CpuProgram::create(ints.spec, ints.weights, small_options()).status().code(),
            StatusCode::kInvalidArgument);

  auto spec = m;
  spec.spec.num_kv_heads = 3;  // 4 heads are not a multiple of 3
  EXPECT_EQ(CpuProgram::create(spec.spec, spec.weights, small_options()).status().code(),
            StatusCode::kInvalidArgument);
  auto rotary = m;
  rotary.spec.layers[0].rope.rotary_dim = 5;
  EXPECT_EQ(CpuProgram::create(rotary.spec, rotary.weights, small_options()).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(CpuProgramApi, RopeTableDtypeOptionRoundsFrequencies) {
  const auto m = testing::make_tiny_model(Architecture::kQwen2);
  std::vector<std::int64_t> tokens(40);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int64_t>(i * 5 % 61);
  const auto ref_f32 = testing::reference_logits(m.spec, m.weights, tokens, DType::kF32);
  const auto ref_bf16 = testing::reference_logits(m.spec, m.weights, tokens, DType::kBF16);
  auto options = small_options();
  options.rope_table_dtype = DType::kBF16;
  auto made = CpuProgram::create(m.spec, m.weights, options);
  ASSERT_TRUE(made.ok());
  auto d = StepDriver::create(std::move(made).value(), {64, 2, 64});
  ASSERT_TRUE(d.ok());
  const auto seq = (*d)->cache().seq_new();
  auto got = (*d)->feed(*seq, tokens, 8);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  double worst_vs_f32 = 0;
  for (std::size_t p = 0; p < tokens.size(); ++p) {
    EXPECT_LE(testing::relative_error((*got)[p], ref_bf16[p]), 1e-4) << p;
    worst_vs_f32 = std::max(worst_vs_f32, testing::relative_error((*got)[p], ref_f32[p]));
  }
  EXPECT_GT(worst_vs_f32, 1e-4);  // the rounding is visible at these positions
}

TEST(CpuProgramApi, BindAndLoadOrder) {
  const auto m = testing::make_tiny_model(Architecture::kLlama);
  auto p = CpuProgram::create(m.spec, m.weights, small_options());
  ASSERT_TRUE(p.ok());
  CpuProgram& program = **p;
  EXPECT_EQ(program.load_method("forward_1").code(), StatusCode::kInvalidArgument);  // no cache
  EXPECT_TRUE(program.load_method("sample_argmax").is_ok());  // samplers need none
  EXPECT_EQ(program.load_method("forward_3").code(), StatusCode::kNotFound);
  EXPECT_EQ(program.bind_cache(nullptr).code(), StatusCode::kInvalidArgument);
  auto big = cache::CellCache::create({257, 2, 16});
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(program.bind_cache(std::move(big).value()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(program.kv_bytes(), 0u);
  auto fits = cache::CellCache::create({256, 2, 16});
  ASSERT_TRUE(fits.ok());
  EXPECT_TRUE(program.bind_cache(std::move(fits).value()).is_ok());
  EXPECT_EQ(program.kv_bytes(),
            2u * 256 * m.spec.num_layers * m.spec.num_kv_heads * m.spec.head_dim * sizeof(float));
  std::vector<Tensor> in = {i64({1}, {1, 1}), i64({0}, {1}), i64({0}, {1})};
  EXPECT_EQ(program.execute("forward_1", in).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(program.execute("forward_9", in).status().code(), StatusCode::kNotFound);
}

// Feeds a prefix, then tries many malformed calls on the next step; after
// each refusal, the step must still run and give the reference logits.
TEST(CpuProgramApi, RefusedForwardsChangeNothing) {
  const auto m = testing::make_tiny_model(Architecture::kMistral);
  auto made = CpuProgram::create(m.spec, m.weights, small_options());
  ASSERT_TRUE(made.ok());
  auto d = StepDriver::create(std::move(made).value(), {256, 4, 64});
  ASSERT_TRUE(d.ok());
  StepDriver& driver = **d;
  const std::vector<std::int64_t> tokens = {3, 9, 27, 20, 0, 5, 44, 17, 8};
  const auto ref = testing::reference_logits(m.spec, m.weights, tokens);
  const auto seq = driver.cache().seq_new();
  ASSERT_TRUE(driver.feed(*seq, std::span(tokens).first(6), 4).ok());

  // Place positions 6, 7 and try a forward_4 in many broken ways.
  ASSERT_TRUE(
      driver.cache()
          .place_step(std::vector<cache::SeqId>{*seq, *seq}, std::vector<std::int32_t>{6, 7})
          .ok());
  CpuProgram& p = driver.program();
  const Tensor good_tok = i64({tokens[6], tokens[7], 0, 0}, {1, 4});
  const Tensor good_pos = i64({6, 7, 0, 0}, {4});
  const Tensor good_sel = i64({0, 1, 1, 1}, {4});
  struct Case {
    const char* what;
    std::vector<Tensor> inputs;
  };
  const std::vector<Case> cases = {
      {"two inputs", {good_tok, good_pos}},
      {"f32 tokens", {Tensor::empty(DType::kF32, {1, 4}), good_pos, good_sel}},
      {"tokens [2, 2]", {i64({1, 2, 3, 4}, {2, 2}), good_pos, good_sel}},
      {"three tokens", {i64({1, 2, 3}, {1, 3}), i64({6, 7, 0}, {3}), good_sel}},
      {"positions too short", {good_tok, i64({6, 7, 0}, {3}), good_sel}},
      {"empty selector", {good_tok, good_pos, i64({}, {0})}},
      {"selector too long", {good_tok, good_pos, i64({0, 1, 1, 1, 1}, {5})}},
      {"selector row 4", {good_tok, good_pos, i64({0, 4, 1, 1}, {4})}},
      {"selector row -1", {good_tok, good_pos, i64({0, -1, 1, 1}, {4})}},
      {"token past vocab", {i64({tokens[6], 61, 0, 0}, {1, 4}), good_pos, good_sel}},
      {"negative token", {i64({tokens[6], tokens[7], -1, 0}, {1, 4}), good_pos, good_sel}},
      {"position disagrees", {good_tok, i64({6, 8, 0, 0}, {4}), good_sel}},
      {"negative padding position", {good_tok, i64({6, 7, -3, 0}, {4}), good_sel}},
  };
  for (const Case& c : cases) {
    auto r = p.execute("forward_4", c.inputs);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.what;
    EXPECT_FALSE(r.status().message().empty()) << c.what;
  }
  // Fewer rows than placed tokens.
  EXPECT_EQ(p.execute("forward_1",
                      std::vector<Tensor>{i64({tokens[6]}, {1, 1}), i64({6}, {1}), i64({0}, {1})})
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  // A dynamic method past its bound.
  EXPECT_EQ(p.execute("forward_others",
                      std::vector<Tensor>{Tensor::empty(DType::kI64, {1, 65}),
                                          Tensor::empty(DType::kI64, {65}), i64({0}, {1})})
                .status()
                .code(),
            StatusCode::kInvalidArgument);

  // Nothing was written: drop the placement and feed the rest normally.
  ASSERT_TRUE(driver.cache().rewind(*seq, 6));
  auto rest = driver.feed(*seq, std::span(tokens).subspan(6), 2);
  ASSERT_TRUE(rest.ok()) << rest.status().to_string();
  for (std::size_t i = 0; i < rest->size(); ++i) {
    EXPECT_LE(testing::relative_error((*rest)[i], ref[6 + i]), 1e-4) << i;
  }
  // With no placement current (a rewind clears it), a forward is refused.
  ASSERT_TRUE(driver.cache().rewind(*seq, 9));
  EXPECT_EQ(
      p.execute("forward_1", std::vector<Tensor>{i64({1}, {1, 1}), i64({0}, {1}), i64({0}, {1})})
          .status()
          .code(),
      StatusCode::kInvalidArgument);
}

TEST(CpuProgramApi, PaddingRowsNeverTouchRealRows) {
  const auto m = testing::make_tiny_model(Architecture::kGemma3);
  std::vector<std::vector<float>> baseline;
  for (std::int64_t pad_token : {0, 7, 60}) {
    auto made = CpuProgram::create(m.spec, m.weights, small_options());
    ASSERT_TRUE(made.ok());
    auto d = StepDriver::create(std::move(made).value(), {64, 2, 32});
    ASSERT_TRUE(d.ok());
    StepDriver& driver = **d;
    const auto seq = driver.cache().seq_new();
    std::vector<std::vector<float>> got;
    // Three steps of 3 real tokens on forward_8: 5 padding rows each, with
    // varying padding tokens and positions.
    for (int s = 0; s < 3; ++s) {
      const std::int32_t base = 3 * s;
      ASSERT_TRUE(driver.cache()
                      .place_step(std::vector<cache::SeqId>(3, *seq),
                                  std::vector<std::int32_t>{base, base + 1, base + 2})
                      .ok());
      std::vector<std::int64_t> toks = {11 + s, 12 + s, 13 + s};
      std::vector<std::int64_t> pos = {base, base + 1, base + 2};
      for (int k = 0; k < 5; ++k) {
        toks.push_back(pad_token);
        pos.push_back(pad_token == 0 ? 0 : pad_token + k);
      }
      auto out = driver.program().execute("forward_8",
                                          std::vector<Tensor>{i64(toks, {1, 8}), i64(pos, {8}),
                                                              i64({0, 1, 2, 2, 2, 2, 2, 2}, {8})});
      ASSERT_TRUE(out.ok()) << out.status().to_string();
      for (int r = 0; r < 3; ++r) got.push_back(row_of((*out)[0], r));
    }
    if (baseline.empty()) {
      baseline = got;
    } else {
      EXPECT_EQ(got, baseline) << "padding token " << pad_token;
    }
  }
}

TEST(CpuProgramApi, SelectorRepeatsReordersAndTapsFeedTheHead) {
  const auto m = testing::make_tiny_model(Architecture::kPhi3);
  auto options = small_options();
  options.taps = true;
  auto made = CpuProgram::create(m.spec, m.weights, options);
  ASSERT_TRUE(made.ok());
  auto d = StepDriver::create(std::move(made).value(), {64, 2, 32});
  ASSERT_TRUE(d.ok());
  StepDriver& driver = **d;
  const std::vector<std::int64_t> tokens = {1, 2, 3, 4, 5};
  const auto ref = testing::reference_logits(m.spec, m.weights, tokens);
  const auto seq = driver.cache().seq_new();
  ASSERT_TRUE(
      driver.cache()
          .place_step(std::vector<cache::SeqId>(5, *seq), std::vector<std::int32_t>{0, 1, 2, 3, 4})
          .ok());
  auto out = driver.program().execute(
      "forward_8",
      std::vector<Tensor>{i64({1, 2, 3, 4, 5, 0, 0, 0}, {1, 8}), i64({0, 1, 2, 3, 4, 0, 0, 0}, {8}),
                          i64({4, 0, 4, 2, 2, 2, 2, 2}, {8})});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[0].shape(), (Shape{8, m.spec.vocab_size}));
  EXPECT_EQ((*out)[1].shape(), (Shape{8, m.spec.hidden_size}));
  const std::int64_t sel[] = {4, 0, 4, 2};
  for (int i = 0; i < 4; ++i) {
    EXPECT_LE(testing::relative_error(row_of((*out)[0], i), ref[sel[i]]), 1e-4) << i;
  }
  // Taps are the LM head's input: logits = taps . lm_head^T.
  const Tensor& taps = (*out)[1];
  for (int i = 0; i < 4; ++i) {
    std::vector<double> want(m.spec.vocab_size);
    for (std::int64_t v = 0; v < m.spec.vocab_size; ++v) {
      double s = 0;
      for (std::int64_t k = 0; k < m.spec.hidden_size; ++k) {
        s += double(taps.data_as<float>()[sel[i] * m.spec.hidden_size + k]) *
             element_as_f32(m.weights.lm_head, v * m.spec.hidden_size + k);
      }
      want[v] = s;
    }
    EXPECT_LE(testing::relative_error(row_of((*out)[0], i), want), 1e-5) << i;
  }
}

TEST(CpuProgramApi, SampleMethodsUseTheHostSampler) {
  const auto m = testing::make_tiny_model(Architecture::kQwen3);
  auto p = CpuProgram::create(m.spec, m.weights, small_options());
  ASSERT_TRUE(p.ok());
  CpuProgram& program = **p;
  const std::int64_t v = m.spec.vocab_size;
  Tensor logits = Tensor::empty(DType::kF32, {3, v});
  for (std::int64_t i = 0; i < 3 * v; ++i) logits.data_as<float>()[i] = std::sin(0.37f * i);
  logits.data_as<float>()[0 * v + 17] = 5.0f;
  logits.data_as<float>()[1 * v + 3] = 5.0f;
  logits.data_as<float>()[2 * v + 59] = 5.0f;
  std::vector<Tensor> one = {logits};
  EXPECT_EQ(program.execute("sample_argmax", one).status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(program.load_method("sample_argmax").is_ok());
  ASSERT_TRUE(program.load_method("sample").is_ok());
  auto am = program.execute("sample_argmax", one);
  ASSERT_TRUE(am.ok()) << am.status().to_string();
  EXPECT_EQ(std::vector<std::int64_t>((*am)[0].span<std::int64_t>().begin(),
                                      (*am)[0].span<std::int64_t>().end()),
            (std::vector<std::int64_t>{17, 3, 59}));
  Tensor params = Tensor::empty(DType::kF32, {3, 4});  // temperature 0: greedy
  auto s = program.execute("sample", std::vector<Tensor>{logits, params});
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ((*s)[0].span<std::int64_t>()[2], 59);
  // Wrong shapes are refused.
  EXPECT_EQ(program.execute("sample", one).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(
      program.execute("sample", std::vector<Tensor>{logits, Tensor::empty(DType::kF32, {2, 4})})
          .status()
          .code(),
      StatusCode::kInvalidArgument);
  std::vector<Tensor> narrow = {Tensor::empty(DType::kF32, {3, v - 1})};
  EXPECT_EQ(program.execute("sample_argmax", narrow).status().code(), StatusCode::kInvalidArgument);
}

// sample_penalize adjusts the logits in place with the host reference
// (sampling/penalties.h) and refuses malformed calls without touching them.
TEST(CpuProgramApi, SamplePenalizeAppliesTheReferenceInPlace) {
  const auto m = testing::make_tiny_model(Architecture::kQwen3);
  auto p = CpuProgram::create(m.spec, m.weights, small_options());
  ASSERT_TRUE(p.ok());
  CpuProgram& program = **p;
  ASSERT_TRUE(program.load_method("sample_penalize").is_ok());
  const std::int64_t v = m.spec.vocab_size;
  Tensor logits = Tensor::empty(DType::kF32, {2, v});
  for (std::int64_t i = 0; i < 2 * v; ++i) logits.data_as<float>()[i] = std::sin(0.37f * i);
  const std::vector<float> original(logits.data_as<float>(), logits.data_as<float>() + 2 * v);
  // Row 0: bias on id 2, repetition on id 5, a subtraction on id 7; row 1:
  // min_p 0.5 at temperature 0.7 and a suppressed id 1.
  std::vector<sampling::PenaltyEntry> entries = {{2, 1.5f, 0.0f, 0},
                                                 {5, 0.0f, 0.0f, sampling::kEntryRepeated},
                                                 {7, 0.0f, 0.75f, 0},
                                                 {1, 0.0f, 0.0f, sampling::kEntrySuppressed}};
  std::vector<float> rows = {1.3f, 0.0f, sampling::min_p_log_threshold(0.0f),
                             1.0f, 0.7f, sampling::min_p_log_threshold(0.5f)};
  std::vector<std::int32_t> offsets = {0, 3, 4};
  const auto call = [&](std::vector<std::int32_t> offs) {
    return program.execute(
        "sample_penalize",
        std::vector<Tensor>{logits, Tensor::view(rows.data(), DType::kF32, {2, 3}),
                            Tensor::view(offs.data(), DType::kI32, {2 + 1}),
                            Tensor::view(entries.data(), DType::kI32,
                                         {static_cast<std::int64_t>(entries.size()), 4})});
  };
  // Offsets that do not end at the entry count, or fall: refused, unchanged.
  EXPECT_EQ(call({0, 3, 3}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(call({0, 4, 3}).status().code(), StatusCode::kInvalidArgument);
  entries[0].token = static_cast<std::int32_t>(v);
  EXPECT_EQ(call(offsets).status().code(), StatusCode::kInvalidArgument);
  entries[0].token = 2;
  EXPECT_EQ(std::vector<float>(logits.data_as<float>(), logits.data_as<float>() + 2 * v), original);

  ASSERT_TRUE(call(offsets).ok());
  std::vector<float> want0(original.begin(), original.begin() + v);
  std::vector<float> want1(original.begin() + v, original.end());
  sampling::apply_entries(want0, std::span(entries).first(3), 1.3f);
  sampling::apply_entries(want1, std::span(entries).subspan(3), 1.0f);
  sampling::apply_min_p(want1, 0.7f, sampling::min_p_log_threshold(0.5f));
  const float* got = logits.data_as<float>();
  EXPECT_EQ(std::vector<float>(got, got + v), want0);
  EXPECT_EQ(std::vector<float>(got + v, got + 2 * v), want1);
  // The definitions, spelled out for row 0.
  EXPECT_EQ(got[2], original[2] + 1.5f);
  EXPECT_EQ(got[5], original[5] > 0 ? original[5] / 1.3f : original[5] * 1.3f);
  EXPECT_EQ(got[7], original[7] - 0.75f);
  EXPECT_EQ(got[v + 1], -std::numeric_limits<float>::infinity());
  EXPECT_GT(std::count(got + v, got + 2 * v, -std::numeric_limits<float>::infinity()), 1);
}

// sample_mask (constrained decoding): every id outside a row's mask becomes
// -inf in place, as sampling/token_mask.h defines; a row of all ones is
// untouched; a misshapen call is refused and changes nothing.
TEST(CpuProgramApi, SampleMaskDropsTheIdsOutsideEachRowsMask) {
  const auto m = testing::make_tiny_model(Architecture::kQwen3);
  auto p = CpuProgram::create(m.spec, m.weights, small_options());
  ASSERT_TRUE(p.ok());
  CpuProgram& program = **p;
  ASSERT_TRUE(program.load_method("sample_mask").is_ok());
  const std::int64_t v = m.spec.vocab_size;
  const std::int64_t per_row = (v + 31) / 32;
  Tensor logits = Tensor::empty(DType::kF32, {2, v});
  for (std::int64_t i = 0; i < 2 * v; ++i) logits.data_as<float>()[i] = std::cos(0.11f * i);
  const std::vector<float> original(logits.data_as<float>(), logits.data_as<float>() + 2 * v);
  std::vector<std::uint32_t> words(static_cast<std::size_t>(2 * per_row), ~0u);
  // Row 1 allows ids 3 and 40 only.
  std::fill(words.begin() + per_row, words.end(), 0u);
  words[static_cast<std::size_t>(per_row) + 0] = 1u << 3;
  words[static_cast<std::size_t>(per_row) + 1] = 1u << (40 - 32);
  const Tensor bad = Tensor::view(words.data(), DType::kI32, {1, per_row});
  EXPECT_EQ(program.execute("sample_mask", std::vector<Tensor>{logits, bad}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(std::vector<float>(logits.data_as<float>(), logits.data_as<float>() + 2 * v), original);
  const Tensor good = Tensor::view(words.data(), DType::kI32, {2, per_row});
  ASSERT_TRUE(program.execute("sample_mask", std::vector<Tensor>{logits, good}).ok());
  for (std::int64_t i = 0; i < v; ++i) {
    EXPECT_EQ(logits.data_as<float>()[i], original[static_cast<std::size_t>(i)]) << i;
    const float got = logits.data_as<float>()[v + i];
    if (i == 3 || i == 40) {
      EXPECT_EQ(got, original[static_cast<std::size_t>(v + i)]) << i;
    } else {
      EXPECT_EQ(got, -std::numeric_limits<float>::infinity()) << i;
    }
  }
}

TEST(CpuProgramApi, SampleLogprobsReportsTheReference) {
  const auto m = testing::make_tiny_model(Architecture::kLlama);
  auto p = CpuProgram::create(m.spec, m.weights, small_options());
  ASSERT_TRUE(p.ok());
  CpuProgram& program = **p;
  ASSERT_TRUE(program.load_method("sample_logprobs").is_ok());
  auto meta = program.method_meta("sample_logprobs");
  ASSERT_TRUE(meta.ok());
  EXPECT_EQ(meta->optional_inputs, 1);
  ASSERT_EQ(meta->outputs.size(), 2u);
  EXPECT_EQ(meta->outputs[0].shape[1], 1 + kMaxTopLogprobs);
  const std::int64_t v = m.spec.vocab_size;
  Tensor logits = Tensor::empty(DType::kF32, {3, v});
  for (std::int64_t i = 0; i < 3 * v; ++i) logits.data_as<float>()[i] = 3.0f * std::cos(0.91f * i);
  // Row 0 greedy with 5 alternatives, row 1 skipped, row 2 at T=0.6 with 20
  // and a suppressed id.
  std::vector<float> params = {0.0f, 5.0f, 0.7f, -1.0f, 0.6f, 20.0f};
  std::vector<std::int64_t> drawn = {4, 999999, 9};
  std::vector<std::int64_t> suppressed(3 * kMaxSuppressedTokens, -1);
  suppressed[2 * kMaxSuppressedTokens] = 3;
  const auto call = [&] {
    return program.execute(
        "sample_logprobs",
        std::vector<Tensor>{logits, Tensor::view(params.data(), DType::kF32, {3, 2}),
                            Tensor::view(drawn.data(), DType::kI64, {3}),
                            Tensor::view(suppressed.data(), DType::kI64,
                                         {3, static_cast<std::int64_t>(kMaxSuppressedTokens)})});
  };
  auto out = call();
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  ASSERT_EQ(out->size(), 2u);
  const float* values = (*out)[0].data_as<float>();
  const std::int64_t* ids = (*out)[1].data_as<std::int64_t>();
  constexpr std::int64_t kTop = kMaxTopLogprobs;
  for (std::int64_t r : {0, 2}) {
    const std::span<const float> row(logits.data_as<float>() + r * v, static_cast<std::size_t>(v));
    std::vector<Token> banned;
    if (r == 2) banned.push_back(3);
    TokenLogprobs want;
    sampling::row_logprobs(row, params[static_cast<std::size_t>(r) * 2], banned,
                           static_cast<Token>(drawn[static_cast<std::size_t>(r)]),
                           static_cast<int>(params[static_cast<std::size_t>(r) * 2 + 1]), want);
    EXPECT_EQ(values[r * (1 + kTop)], want.logprob) << "row " << r;
    for (std::int64_t j = 0; j < kTop; ++j) {
      if (j < static_cast<std::int64_t>(want.top.size())) {
        EXPECT_EQ(ids[r * kTop + j], static_cast<std::int64_t>(want.top[j].token)) << r;
        EXPECT_EQ(values[r * (1 + kTop) + 1 + j], want.top[j].logprob) << r;
        EXPECT_NE(ids[r * kTop + j], 3) << "a suppressed id is ranked";
      } else {
        EXPECT_EQ(ids[r * kTop + j], -1) << "row " << r << " slot " << j;
      }
    }
  }
  // Refused: a count past 20, a drawn id outside the vocabulary of a row that
  // asks, a fractional count.
  params[1] = 21.0f;
  EXPECT_EQ(call().status().code(), StatusCode::kInvalidArgument);
  params[1] = 2.5f;
  EXPECT_EQ(call().status().code(), StatusCode::kInvalidArgument);
  params[1] = 5.0f;
  params[3] = 1.0f;  // row 1 now asks, with its out-of-vocabulary id
  EXPECT_EQ(call().status().code(), StatusCode::kInvalidArgument);
}

TEST(CpuProgramApi, SampleHonoursTheOptionalSuppressedIds) {
  const auto m = testing::make_tiny_model(Architecture::kQwen3);
  auto p = CpuProgram::create(m.spec, m.weights, small_options());
  ASSERT_TRUE(p.ok());
  CpuProgram& program = **p;
  ASSERT_TRUE(program.load_method("sample").is_ok());
  const std::int64_t v = m.spec.vocab_size;
  constexpr auto kSlots = static_cast<std::int64_t>(kMaxSuppressedTokens);
  // Row 0 peaks at 17 then 4; row 1 at 3 then 8; rows are greedy.
  Tensor logits = Tensor::empty(DType::kF32, {2, v});
  for (std::int64_t i = 0; i < 2 * v; ++i) logits.data_as<float>()[i] = 0.0f;
  logits.data_as<float>()[0 * v + 17] = 5.0f;
  logits.data_as<float>()[0 * v + 4] = 4.0f;
  logits.data_as<float>()[1 * v + 3] = 5.0f;
  logits.data_as<float>()[1 * v + 8] = 4.0f;
  Tensor params = Tensor::empty(DType::kF32, {2, 4});
  std::fill_n(params.data_as<float>(), 8, 0.0f);
  Tensor ids = Tensor::empty(DType::kI64, {2, kSlots});
  std::fill_n(ids.data_as<std::int64_t>(), 2 * kSlots, std::int64_t{-1});
  ids.data_as<std::int64_t>()[0] = 17;  // row 0 loses its peak; row 1 nothing
  auto s = program.execute("sample", std::vector<Tensor>{logits, params, ids});
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ((*s)[0].span<std::int64_t>()[0], 4);
  EXPECT_EQ((*s)[0].span<std::int64_t>()[1], 3);

  // A sampled row never draws a suppressed id: leave it only two candidates
  // of any weight, suppress one, and every coin lands on the other.
  for (std::int64_t i = 0; i < 2 * v; ++i) logits.data_as<float>()[i] = -1000.0f;
  logits.data_as<float>()[0 * v + 9] = 1.0f;
  logits.data_as<float>()[0 * v + 10] = 1.0f;
  logits.data_as<float>()[1 * v + 9] = 1.0f;
  logits.data_as<float>()[1 * v + 10] = 1.0f;
  ids.data_as<std::int64_t>()[0] = 9;
  ids.data_as<std::int64_t>()[kSlots + 3] = 10;
  for (float coin : {0.0f, 0.25f, 0.5f, 0.75f, 0.999f}) {
    for (int r = 0; r < 2; ++r) {
      float* q = params.data_as<float>() + 4 * r;
      q[0] = 1.0f;  // temperature
      q[1] = 1.0f;  // top_p
      q[2] = 0.0f;  // top_k
      q[3] = coin;
    }
    auto drawn = program.execute("sample", std::vector<Tensor>{logits, params, ids});
    ASSERT_TRUE(drawn.ok()) << drawn.status().to_string();
    EXPECT_EQ((*drawn)[0].span<std::int64_t>()[0], 10) << coin;
    EXPECT_EQ((*drawn)[0].span<std::int64_t>()[1], 9) << coin;
  }

  // A malformed third input is refused, naming it; four inputs are too many.
  const std::vector<Tensor> bad_ids[] = {
      {logits, params, Tensor::empty(DType::kI64, {2, kSlots - 1})},
      {logits, params, Tensor::empty(DType::kI64, {1, kSlots})},
      {logits, params, Tensor::empty(DType::kF32, {2, kSlots})},
  };
  for (const auto& inputs : bad_ids) {
    auto r = program.execute("sample", inputs);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(r.status().message()).find("suppressed"), std::string::npos)
        << r.status().to_string();
  }
  auto four = program.execute("sample", std::vector<Tensor>{logits, params, ids, ids});
  EXPECT_EQ(four.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(four.status().message()).find("2 or 3"), std::string::npos);
}

}  // namespace
}  // namespace cellm::cpu
