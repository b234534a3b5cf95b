// `--quantize` as run, chat and perplexity register it (add_model_options;
// serve and the bench commands call the same add_quantize_option): fp8 and
// none parse, anything else fails at parse time with a message naming the
// choices, and leaving it out keeps kNone.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cli/generate.h"

namespace cellm::cli {
namespace {

// Parses `args` (after a program name) into fresh ModelArgs.
struct Parsed {
  ModelArgs args;
  std::string error;  // empty when the parse succeeded
};

Parsed parse(std::vector<std::string> argv) {
  Parsed p;
  CLI::App app("test");
  add_model_options(app, p.args);
  std::vector<std::string> reversed(argv.rbegin(), argv.rend());  // CLI11 pops from the back
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    p.error = e.what();
  }
  return p;
}

TEST(QuantizeFlag, ParsesFp8AndNone) {
  Parsed p = parse({"model-dir", "--quantize", "fp8"});
  EXPECT_EQ(p.error, "");
  EXPECT_EQ(p.args.quantize, model::Quantize::kFp8);
  EXPECT_EQ(p.args.model, "model-dir");
  p = parse({"--quantize=none"});
  EXPECT_EQ(p.error, "");
  EXPECT_EQ(p.args.quantize, model::Quantize::kNone);
  p = parse({"model-dir"});
  EXPECT_EQ(p.error, "");
  EXPECT_EQ(p.args.quantize, model::Quantize::kNone);
}

TEST(QuantizeFlag, AnUnknownValueIsAParseErrorNamingTheChoices) {
  for (const std::string bad : {"int8", "FP8", "fp4"}) {
    const Parsed p = parse({"--quantize", bad});
    EXPECT_EQ(p.error, "--quantize '" + bad + "': use fp8 or none") << bad;
    EXPECT_EQ(p.args.quantize, model::Quantize::kNone);
  }
  const Parsed missing = parse({"--quantize"});
  EXPECT_NE(missing.error, "") << "--quantize needs a value";
}

}  // namespace
}  // namespace cellm::cli
