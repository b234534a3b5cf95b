// Writes FP8 checkpoints from the Hugging Face fixture folders, the way
// quantizers do: every linear weight ("*_proj.weight") not left unquantized
// is scaled by amax / 448 over its scale block (the whole tensor, one output
// row, or a [bo, bi] tile) and rounded to E4M3 by the tests' own encoder
// (format/fp8_reference.h), with the config.json `quantization_config` and the
// scale tensor names and shapes of each format (fp8 per-tensor as vLLM /
// AutoFP8 write it, fp8 with weight_block_size as transformers'
// fine-grained FP8 does, fbgemm_fp8, and compressed-tensors tensor / channel
// / block). Alongside, it records the dequantized value of every weight it
// wrote, computed from the encoder's values — what the loader must produce.
//
// Thread-safety: plain functions over files the caller owns.
#pragma once

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "format/fp8_reference.h"
#include "format/safetensors.h"
#include "format/test_writers.h"

namespace cellm::testing {

enum class Fp8Layout { kFp8Tensor, kFp8Block, kFbgemmChannel, kCtTensor, kCtChannel, kCtBlock };

inline const char* fp8_layout_name(Fp8Layout l) {
  switch (l) {
    case Fp8Layout::kFp8Tensor: return "fp8_tensor";
    case Fp8Layout::kFp8Block: return "fp8_block";
    case Fp8Layout::kFbgemmChannel: return "fbgemm_channel";
    case Fp8Layout::kCtTensor: return "ct_tensor";
    case Fp8Layout::kCtChannel: return "ct_channel";
    case Fp8Layout::kCtBlock: return "ct_block";
  }
  return "?";
}

struct Fp8Written {
  // Stored weight name -> its dequantized values (code value × scale, in f32).
  std::map<std::string, std::vector<float>> expected;
  // Stored weight name -> the codes written.
  std::map<std::string, std::vector<std::uint8_t>> codes;
  std::set<std::string> left_unquantized;  // linear weights kept in their stored dtype
};

struct Fp8WriteOptions {
  Fp8Layout layout = Fp8Layout::kFp8Tensor;
  std::int64_t block_rows = 128;  // kFp8Block, kCtBlock
  std::int64_t block_cols = 128;
  // Write the dequantized values as plain F32 weights instead (no
  // quantization_config): the same model as the FP8 folder, loaded without
  // the FP8 path.
  bool plain_dequantized = false;
};

// A minimal llama config.json text with `quant` as its quantization_config
// (none when null): for the config parser's and loader's refusal tests.
inline std::string fp8_config_with(const nlohmann::json& quant) {
  nlohmann::json c = {{"model_type", "llama"},      {"vocab_size", 6},
                      {"hidden_size", 4},           {"intermediate_size", 8},
                      {"num_hidden_layers", 1},     {"num_attention_heads", 2},
                      {"num_key_value_heads", 1},   {"max_position_embeddings", 32},
                      {"tie_word_embeddings", true}};
  if (!quant.is_null()) c["quantization_config"] = quant;
  return c.dump();
}

namespace fp8_detail {

inline bool is_ct(Fp8Layout l) {
  return l == Fp8Layout::kCtTensor || l == Fp8Layout::kCtChannel || l == Fp8Layout::kCtBlock;
}

// compressed-tensors leaves layer 0's down_proj unquantized through a "re:"
// pattern; every format leaves lm_head unquantized.
inline bool left_unquantized(Fp8Layout l, const std::string& module) {
  if (module == "lm_head") return true;
  return is_ct(l) && module == "model.layers.0.mlp.down_proj";
}

inline nlohmann::json quant_config(const Fp8WriteOptions& o) {
  using nlohmann::json;
  const json block = json::array({o.block_rows, o.block_cols});
  switch (o.layout) {
    case Fp8Layout::kFp8Tensor:
      return {{"quant_method", "fp8"},
              {"activation_scheme", "static"},
              {"ignored_layers", {"lm_head"}}};
    case Fp8Layout::kFp8Block:
      return {{"quant_method", "fp8"},
              {"activation_scheme", "dynamic"},
              {"fmt", "e4m3"},
              {"weight_block_size", block},
              {"modules_to_not_convert", {"lm_head"}}};
    case Fp8Layout::kFbgemmChannel:
      return {{"quant_method", "fbgemm_fp8"},
              {"activation_scale_ub", 1200.0},
              {"modules_to_not_convert", {"lm_head"}}};
    case Fp8Layout::kCtTensor:
    case Fp8Layout::kCtChannel:
    case Fp8Layout::kCtBlock: {
      json weights = {{"num_bits", 8},
                      {"type", "float"},
                      {"symmetric", true},
                      {"dynamic", false},
                      {"group_size", nullptr},
                      {"observer", "minmax"},
                      {"strategy", o.layout == Fp8Layout::kCtTensor    ? "tensor"
                                   : o.layout == Fp8Layout::kCtChannel ? "channel"
                                                                       : "block"}};
      weights["block_structure"] = o.layout == Fp8Layout::kCtBlock ? block : json(nullptr);
      const json inputs = {{"num_bits", 8},
                           {"type", "float"},
                           {"symmetric", true},
                           {"dynamic", true},
                           {"strategy", "token"}};
      return {{"quant_method", "compressed-tensors"},
              {"format", "float-quantized"},
              {"quantization_status", "compressed"},
              {"kv_cache_scheme", nullptr},
              {"ignore", {"lm_head", "re:.*layers[.]0[.]mlp[.]down_proj$"}},
              {"config_groups",
               {{"group_0",
                 {{"targets", {"Linear"}},
                  {"weights", weights},
                  {"input_activations", inputs},
                  {"output_activations", nullptr}}}}}};
    }
  }
  return {};
}

}  // namespace fp8_detail

// Writes `out` (config.json, generation_config.json, model.safetensors) from
// fixture folder `fixture`; returns what the loader must produce.
inline Fp8Written write_fp8_checkpoint(const std::filesystem::path& fixture,
                                       const std::filesystem::path& out, const Fp8WriteOptions& o) {
  namespace fs = std::filesystem;
  using nlohmann::json;
  Fp8Written written;
  fs::remove_all(out);
  fs::create_directories(out);
  {
    std::ifstream in(fixture / "config.json");
    json config = json::parse(in);
    if (!o.plain_dequantized) config["quantization_config"] = fp8_detail::quant_config(o);
    write_text(out / "config.json", config.dump(2));
  }
  fs::copy_file(fixture / "generation_config.json", out / "generation_config.json");

  auto st = format::SafetensorsFile::open(fixture / "model.safetensors");
  EXPECT_TRUE(st.ok()) << st.status().to_string();
  if (!st.ok()) return written;
  const bool ct = fp8_detail::is_ct(o.layout);
  SafetensorsBuilder b;
  for (const auto& e : st->entries()) {
    const Tensor t = st->tensor(e.name).value();
    const std::string module = e.name.substr(0, e.name.size() - std::string(".weight").size());
    const bool linear = e.name.ends_with("_proj.weight") || e.name == "lm_head.weight";
    if (!linear || t.rank() != 2 || fp8_detail::left_unquantized(o.layout, module)) {
      if (linear) written.left_unquantized.insert(e.name);
      Bytes raw(t.nbytes());
      std::memcpy(raw.data(), t.data(), raw.size());
      b.add(e.name,
            e.dtype == DType::kF32    ? "F32"
            : e.dtype == DType::kBF16 ? "BF16"
                                      : "F16",
            e.shape, std::move(raw));
      continue;
    }
    const std::int64_t rows = t.dim(0), cols = t.dim(1);
    std::int64_t br = rows, bc = cols;  // per tensor
    if (o.layout == Fp8Layout::kFbgemmChannel || o.layout == Fp8Layout::kCtChannel) br = 1;
    if (o.layout == Fp8Layout::kFp8Block || o.layout == Fp8Layout::kCtBlock) {
      br = o.block_rows;
      bc = o.block_cols;
    }
    const std::int64_t gr = (rows + br - 1) / br, gc = (cols + bc - 1) / bc;
    // compressed-tensors keeps scales in the model's dtype (bf16 here); the others in f32.
    std::vector<float> scales(static_cast<std::size_t>(gr * gc));
    Bytes scale_bytes;
    for (std::int64_t g = 0; g < gr * gc; ++g) {
      const std::int64_t r0 = (g / gc) * br, c0 = (g % gc) * bc;
      float amax = 0;
      for (std::int64_t r = r0; r < std::min(rows, r0 + br); ++r) {
        for (std::int64_t c = c0; c < std::min(cols, c0 + bc); ++c) {
          amax = std::max(amax, std::fabs(element_as_f32(t, r * cols + c)));
        }
      }
      float s = amax > 0 ? amax / 448.0f : 1.0f;
      if (ct) {
        const std::uint16_t bits = f32_to_bf16(s);
        s = bf16_to_f32(bits);
        put(scale_bytes, bits);
      } else {
        put(scale_bytes, s);
      }
      scales[static_cast<std::size_t>(g)] = s;
    }
    Bytes codes(static_cast<std::size_t>(rows * cols));
    std::vector<float> expected(codes.size());
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) {
        const float s = scales[static_cast<std::size_t>((r / br) * gc + c / bc)];
        const float x = element_as_f32(t, r * cols + c) / s;
        const E4M3 q = encode_e4m3(std::clamp(x, -448.0f, 448.0f));
        const auto i = static_cast<std::size_t>(r * cols + c);
        codes[i] = q.code;
        expected[i] = static_cast<float>(q.value) * s;
      }
    }
    if (o.plain_dequantized) {
      b.add(e.name, "F32", e.shape, bytes_of(expected));
      written.expected[e.name] = std::move(expected);
      continue;
    }
    written.codes[e.name] = codes;
    written.expected[e.name] = std::move(expected);
    b.add(e.name, "F8_E4M3", e.shape, std::move(codes));
    // Scale shapes as each format writes them.
    std::vector<std::int64_t> scale_shape;
    switch (o.layout) {
      case Fp8Layout::kFp8Tensor: scale_shape = {}; break;
      case Fp8Layout::kCtTensor: scale_shape = {1}; break;
      case Fp8Layout::kFbgemmChannel:
      case Fp8Layout::kCtChannel: scale_shape = {rows, 1}; break;
      case Fp8Layout::kFp8Block:
      case Fp8Layout::kCtBlock: scale_shape = {gr, gc}; break;
    }
    const std::string scale_name =
        module + (o.layout == Fp8Layout::kFp8Block ? ".weight_scale_inv" : ".weight_scale");
    b.add(scale_name, ct ? "BF16" : "F32", scale_shape, std::move(scale_bytes));
    // Activation scales, which the loader must read past.
    if (o.layout == Fp8Layout::kFp8Tensor) b.add_f32(module + ".input_scale", {}, {0.05f});
    if (o.layout == Fp8Layout::kFbgemmChannel) {
      b.add_f32(module + ".input_scale_ub", {1}, {1200.0f});
    }
  }
  write_file(out / "model.safetensors", b.build());
  return written;
}

}  // namespace cellm::testing
