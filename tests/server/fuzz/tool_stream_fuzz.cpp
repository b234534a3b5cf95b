// Fuzz target: arbitrary model output through ToolCallParser, streamed.
// Input: byte 0 picks the format (llama3, hermes, mistral, gemma), byte 1
// seeds how the rest is split into pushes; the rest is the output. The
// parser must never crash or hang, and what it streams must hold together:
// call starts numbered in order, argument pieces only for the call being
// streamed, each piece keeping the JSON formats' arguments a valid JSON
// prefix, a complete call's arguments a JSON object, the pieces adding up to
// calls(), and the split feed releasing exactly what the whole output does.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/json_prefix.h"
#include "server/tool_calls.h"

namespace {

using cellm::server::JsonPrefixScanner;
using cellm::server::ToolCallParser;
using cellm::server::ToolEvent;
using cellm::server::ToolFormat;
using cellm::server::ToolParse;

// Says which property broke, then stops the run (as a crash would).
void require_at(bool ok, const char* what, int line) {
  if (ok) return;
  std::fprintf(stderr, "tool_stream_fuzz.cpp:%d: broken: %s\n", line, what);
  __builtin_trap();
}
#define require(cond) require_at((cond), #cond, __LINE__)

struct Outcome {
  std::string content;
  std::vector<std::string> names;
  std::vector<std::string> arguments;
  std::vector<bool> complete;
};

Outcome run(ToolFormat format, const std::vector<std::string_view>& pieces) {
  ToolCallParser parser(format);
  Outcome o;
  std::vector<JsonPrefixScanner> scanners;
  const bool json_format = format != ToolFormat::kGemma;
  const auto take = [&](const ToolParse& p) {
    for (const ToolEvent& e : p.events) {
      if (e.kind == ToolEvent::Kind::kContent) {
        o.content += e.text;
      } else if (e.kind == ToolEvent::Kind::kCallStart) {
        require(e.index == static_cast<std::int32_t>(o.names.size()) && !e.name.empty());
        o.names.push_back(e.name);
        o.arguments.emplace_back();
        scanners.emplace_back();
      } else {
        require(!o.names.empty() && e.index == static_cast<std::int32_t>(o.names.size()) - 1);
        o.arguments.back() += e.text;
        for (char c : e.text) {
          if (json_format) require(scanners.back().push(c).ok);
        }
      }
    }
  };
  for (std::string_view piece : pieces) take(parser.push(piece));
  take(parser.finish());
  require(parser.calls().size() == o.names.size());
  for (std::size_t i = 0; i < o.names.size(); ++i) {
    const auto& call = parser.calls()[i];
    require(call.name == o.names[i] && call.arguments == o.arguments[i]);
    o.complete.push_back(call.complete);
    if (call.complete) {
      require(nlohmann::json::parse(call.arguments, nullptr, false).is_object());
      if (json_format) require(scanners[i].done());
    }
  }
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  static constexpr ToolFormat kFormats[] = {ToolFormat::kLlama3, ToolFormat::kHermes,
                                            ToolFormat::kMistral, ToolFormat::kGemma};
  const ToolFormat format = kFormats[data[0] % 4];
  const std::string_view output(reinterpret_cast<const char*>(data + 2), size - 2);
  const Outcome whole = run(format, {output});
  std::mt19937 rng(data[1]);
  std::vector<std::string_view> pieces;
  for (std::size_t at = 0; at < output.size();) {
    const std::size_t n = std::min<std::size_t>(1 + rng() % 5, output.size() - at);
    pieces.push_back(output.substr(at, n));
    at += n;
  }
  const Outcome split = run(format, pieces);
  require(split.content == whole.content && split.names == whole.names &&
          split.arguments == whole.arguments && split.complete == whole.complete);
  return 0;
}
