// Dequantization against the `gguf` Python package, bit for bit, in f32 and
// bf16: on tensors of the real GGUF models (scripts/fetch-model) and on
// synthesized random blocks for every supported type, including those the
// real files lack. The reference runs through tests/format/gguf_dequant_ref.py
// in the project's virtual environment (scripts/setup makes it).
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "format/ggml_types.h"
#include "format/gguf.h"
#include "format/test_writers.h"
#include "support/testdata.h"

namespace cellm::format {
namespace {

namespace fs = std::filesystem;

fs::path venv_python() {
  return testing::source_dir() / ".venv" / "bin" / "python";
}
fs::path helper() {
  return testing::source_dir() / "tests" / "format" / "gguf_dequant_ref.py";
}
fs::path models_dir() {
  return testing::env_path("CELLMDEV_MODELS_DIR").value_or(testing::source_dir() / "models");
}

std::vector<std::uint8_t> slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

fs::path scratch(const std::string& tag) {
  const fs::path dir = fs::path(::testing::TempDir()) / "cellm_dequant";
  fs::create_directories(dir);
  return dir / tag;
}

// Runs the helper; false (with a test failure explaining why) when it cannot.
bool run_reference(const std::string& args) {
  if (!fs::exists(venv_python())) {
    ADD_FAILURE() << "no Python virtual environment at " << venv_python()
                  << "; run scripts/setup to create it (it installs the gguf package)";
    return false;
  }
  const std::string cmd =
      venv_python().string() + " " + helper().string() + " " + args + " >/dev/null";
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    ADD_FAILURE() << "reference helper failed (" << rc << "): " << cmd
                  << "\nIf the gguf package is missing, run scripts/setup.";
    return false;
  }
  return true;
}

// Our f32 and bf16 decodings of `raw` against the helper's files at `prefix`.
void compare(GgmlType type, std::span<const std::uint8_t> raw, const fs::path& prefix,
             const std::string& what) {
  const auto info = ggml_type_info(static_cast<std::uint32_t>(type));
  ASSERT_TRUE(info.has_value());
  const std::size_t n = raw.size() / info->block_bytes * info->block_elems;
  std::vector<float> f32(n);
  std::vector<std::uint16_t> bf16(n);
  ASSERT_TRUE(dequantize_f32(type, raw, f32).is_ok()) << what;
  ASSERT_TRUE(dequantize_bf16(type, raw, bf16).is_ok()) << what;
  const auto ref_f32 = slurp(prefix.string() + ".f32");
  const auto ref_bf16 = slurp(prefix.string() + ".bf16");
  ASSERT_EQ(ref_f32.size(), n * 4) << what;
  ASSERT_EQ(ref_bf16.size(), n * 2) << what;
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t ref_bits;
    std::memcpy(&ref_bits, ref_f32.data() + 4 * i, 4);
    std::uint16_t ref_half;
    std::memcpy(&ref_half, ref_bf16.data() + 2 * i, 2);
    if (std::bit_cast<std::uint32_t>(f32[i]) != ref_bits || bf16[i] != ref_half) {
      if (++mismatches <= 5) {
        ADD_FAILURE() << what << " element " << i << ": ours " << f32[i] << " (bf16 0x" << std::hex
                      << bf16[i] << "), gguf " << std::bit_cast<float>(ref_bits) << " (bf16 0x"
                      << ref_half << std::dec << ")";
      }
    }
  }
  EXPECT_EQ(mismatches, 0u) << what << ": " << n << " elements compared";
}

void check_real_model(const std::string& file, const std::set<std::string>& must_cover) {
  const fs::path path = models_dir() / file;
  if (!fs::exists(path)) {
    FAIL() << path << " is missing; run scripts/fetch-model to download the test models";
  }
  auto gguf = GgufFile::open(path);
  ASSERT_TRUE(gguf.ok()) << gguf.status().to_string();
  // The first tensor of each type, all decoded by one helper run.
  std::set<std::string> covered;
  std::vector<const GgufTensorInfo*> picked;
  for (const auto& t : gguf->tensors()) {
    if (covered.insert(std::string(ggml_type_name(t.type))).second) picked.push_back(&t);
  }
  constexpr std::uint64_t kRows = 48;
  const fs::path out = scratch(file + ".ref");
  fs::create_directories(out);
  std::string names;
  for (const auto* t : picked) names += " " + t->name;
  if (!run_reference(fmt::format("real {} {} {}{}", path.string(), kRows, out.string(), names))) {
    return;
  }
  for (const auto* t : picked) {
    const auto info = *ggml_type_info(static_cast<std::uint32_t>(t->type));
    const std::uint64_t row_bytes = t->ne[0] / info.block_elems * info.block_bytes;
    const std::uint64_t rows = std::min<std::uint64_t>(t->numel() / t->ne[0], kRows);
    compare(t->type, gguf->tensor_bytes(*t).subspan(0, rows * row_bytes), out / t->name,
            file + ":" + t->name + " (" + std::string(info.name) + ")");
  }
  for (const auto& type : must_cover)
    EXPECT_EQ(covered.count(type), 1u) << file << " lacks " << type;
}

TEST(DequantReference, SmolLM2RealTensors) {
  check_real_model("SmolLM2-135M-Instruct.Q4_1.gguf", {"Q4_1", "Q8_0", "F32"});
}

TEST(DequantReference, Gemma3RealTensors) {
  check_real_model("gemma-3-270m-q4_k_m.gguf", {"Q4_K", "Q6_K", "Q5_0", "Q8_0", "F32"});
}

// Random blocks whose f16 scale fields are finite (NaN payloads are not
// comparable across implementations; everything else is fair game).
std::vector<std::uint8_t> random_blocks(GgmlType type, std::size_t blocks, std::mt19937& rng) {
  const auto info = *ggml_type_info(static_cast<std::uint32_t>(type));
  std::vector<std::uint8_t> b(blocks * info.block_bytes);
  for (auto& x : b) x = static_cast<std::uint8_t>(rng());
  const auto finite_half = [&](std::size_t at) {
    std::uint16_t h = static_cast<std::uint16_t>(rng());
    if ((h & 0x7C00) == 0x7C00) h = static_cast<std::uint16_t>(h & ~0x4000);
    std::memcpy(b.data() + at, &h, 2);
  };
  if (type == GgmlType::kBF16) {
    for (std::size_t i = 0; i + 1 < b.size(); i += 2) {
      if ((b[i + 1] & 0x7F) == 0x7F && (b[i] & 0x80)) b[i + 1] &= 0xBF;  // no inf/NaN
    }
    return b;
  }
  if (type == GgmlType::kF32) {
    std::uniform_real_distribution<float> d(-100.0f, 100.0f);
    for (std::size_t i = 0; i < blocks; ++i) {
      const float v = d(rng);
      std::memcpy(b.data() + 4 * i, &v, 4);
    }
    return b;
  }
  // Offsets of the f16 fields in one block.
  std::vector<std::size_t> halves = {0};
  if (type == GgmlType::kQ4_1 || type == GgmlType::kQ5_1 || type == GgmlType::kQ4_K ||
      type == GgmlType::kQ5_K)
    halves = {0, 2};
  if (type == GgmlType::kQ6_K) halves = {208};
  if (type == GgmlType::kQ2_K) halves = {80, 82};
  if (type == GgmlType::kQ3_K) halves = {108};
  for (std::size_t blk = 0; blk < blocks; ++blk) {
    for (std::size_t off : halves) finite_half(blk * info.block_bytes + off);
  }
  return b;
}

class SynthesizedBlocks : public ::testing::TestWithParam<GgmlType> {};

TEST_P(SynthesizedBlocks, MatchTheReferenceBitForBit) {
  const GgmlType type = GetParam();
  std::mt19937 rng(1234 + static_cast<unsigned>(type));
  const bool plain = type == GgmlType::kF32 || type == GgmlType::kF16 || type == GgmlType::kBF16;
  const auto raw = random_blocks(type, plain ? 1024 : 24, rng);
  const std::string name(ggml_type_name(type));
  const fs::path in = scratch("synth_" + name + ".bin");
  testing::write_file(in, raw);
  const fs::path prefix = scratch("synth_" + name);
  if (!run_reference(fmt::format("synth {} {} {}", name, in.string(), prefix.string()))) return;
  compare(type, raw, prefix, "synthesized " + name);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, SynthesizedBlocks,
                         ::testing::Values(GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16,
                                           GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0,
                                           GgmlType::kQ5_1, GgmlType::kQ8_0, GgmlType::kQ2_K,
                                           GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K,
                                           GgmlType::kQ6_K, GgmlType::kIQ4_XS),
                         [](const auto& info) { return std::string(ggml_type_name(info.param)); });

TEST(Dequantize, RefusesMismatchedSizesAndUnsupportedTypes) {
  std::vector<float> out(32);
  std::vector<std::uint8_t> block(34, 0);
  EXPECT_TRUE(dequantize_f32(GgmlType::kQ8_0, block, out).is_ok());
  std::vector<float> wrong(31);
  EXPECT_EQ(dequantize_f32(GgmlType::kQ8_0, block, wrong).code(), StatusCode::kInvalidArgument);
  std::vector<std::uint8_t> q8k(292, 0);
  std::vector<float> q8k_out(256);
  EXPECT_EQ(dequantize_f32(GgmlType::kQ8_K, q8k, q8k_out).code(), StatusCode::kNotSupported);
}

}  // namespace
}  // namespace cellm::format
