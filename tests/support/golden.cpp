#include "support/golden.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "format/safetensors.h"
#include "support/testdata.h"

namespace cellm::testing {
namespace fs = std::filesystem;

// Resolved without testdata_dir(), which reports a failure when nothing is
// found: test registration (INSTANTIATE_...) runs before any test does.
fs::path golden_root() {
  if (auto p = env_path("CELLMDEV_GOLDEN_DIR")) return *p;
  if (auto p = env_path("CELLM_TESTDATA")) return *p / "hf_models";
  const fs::path src = source_dir();
  for (const fs::path& c : {src.parent_path() / "shared" / "testdata", src / ".testdata"}) {
    if (fs::is_directory(c)) return c / "hf_models";
  }
  return src.parent_path() / "shared" / "testdata" / "hf_models";
}

std::vector<std::string> golden_fixture_names() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(golden_root(), ec)) {
    if (entry.is_directory() && fs::exists(entry.path() / "expected.safetensors")) {
      names.push_back(entry.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

namespace {
std::vector<std::int64_t> to_vec(const Tensor& t) {
  auto s = t.span<std::int64_t>();
  return {s.begin(), s.end()};
}
}  // namespace

Result<std::vector<GoldenCase>> load_golden_cases(const fs::path& dir) {
  CELLM_ASSIGN_OR_RETURN(format::SafetensorsFile file,
                         format::SafetensorsFile::open(dir / "expected.safetensors"));
  std::vector<GoldenCase> cases;
  for (int i = 0;; ++i) {
    const std::string n = std::to_string(i);
    if (file.find("prompt_" + n) == nullptr) break;
    GoldenCase c;
    CELLM_ASSIGN_OR_RETURN(Tensor prompt, file.tensor("prompt_" + n));
    CELLM_ASSIGN_OR_RETURN(Tensor greedy, file.tensor("greedy_" + n));
    CELLM_ASSIGN_OR_RETURN(Tensor logits, file.tensor("logits_" + n));
    c.prompt = to_vec(prompt);
    c.greedy = to_vec(greedy);
    c.inputs = c.prompt;
    c.inputs.insert(c.inputs.end(), c.greedy.begin(), c.greedy.end() - 1);
    c.logits = logits.clone();
    if (c.logits.rank() != 2 || c.logits.dim(0) != static_cast<std::int64_t>(c.inputs.size())) {
      return invalid_argument("logits_{} is {}; expected [{}, V]", i, c.logits.describe(),
                              c.inputs.size());
    }
    cases.push_back(std::move(c));
  }
  if (cases.empty()) return invalid_argument("{} holds no prompt_0", dir.string());
  return cases;
}

double golden_row_error(std::span<const float> got, const GoldenCase& c, std::size_t pos) {
  const auto v = static_cast<std::size_t>(c.logits.dim(1));
  if (got.size() != v) return std::nan("");
  const float* ref = c.logits.data_as<float>() + pos * v;
  double diff = 0.0;
  double norm = 0.0;
  for (std::size_t i = 0; i < v; ++i) {
    const double d = static_cast<double>(got[i]) - ref[i];
    diff += d * d;
    norm += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

std::string check_golden_row(std::span<const float> got, const GoldenCase& c, std::size_t pos,
                             const GoldenTolerance& tol) {
  const auto v = static_cast<std::size_t>(c.logits.dim(1));
  if (got.size() != v) return fmt::format("{} logits, expected {}", got.size(), v);
  const float* ref = c.logits.data_as<float>() + pos * v;
  double diff = 0.0;
  double norm = 0.0;
  for (std::size_t i = 0; i < v; ++i) {
    if (!std::isfinite(got[i])) return fmt::format("logit {} is {}", i, got[i]);
    const double d = static_cast<double>(got[i]) - ref[i];
    diff += d * d;
    norm += static_cast<double>(ref[i]) * ref[i];
  }
  const double err = std::sqrt(diff / std::max(norm, 1e-30));
  if (!(err <= tol.max_relative_error)) {
    return fmt::format("relative error {:.3g} > {:.3g}", err, tol.max_relative_error);
  }
  std::vector<std::size_t> order(v);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::partial_sort(order.begin(), order.begin() + 2, order.end(),
                    [&](std::size_t a, std::size_t b) { return ref[a] > ref[b]; });
  const double margin = static_cast<double>(ref[order[0]]) - ref[order[1]];
  const auto got_arg =
      static_cast<std::size_t>(std::max_element(got.begin(), got.end()) - got.begin());
  if (margin > tol.argmax_margin && got_arg != order[0]) {
    return fmt::format("argmax {} but reference {} (margin {:.3g})", got_arg, order[0], margin);
  }
  return "";
}

}  // namespace cellm::testing
