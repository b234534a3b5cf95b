// Fuzz target: arbitrary bytes as a JSON schema. Whatever parses as JSON is
// compiled; a compiled grammar is run over the input itself and over a few
// fixed texts. Nothing may crash, hang or read out of bounds.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto schema = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return 0;
  auto grammar = cellm::grammar::compile_json_schema(schema);
  if (!grammar.ok()) return 0;
  cellm::grammar::Matcher::matches(*grammar, text);
  for (std::string_view sample : {"{}", "{\"a\": 1}", "[1, \"x\", null]", "\"s\"", "true", "1.5"}) {
    cellm::grammar::Matcher::matches(*grammar, sample);
  }
  return 0;
}
