// Fuzz target: arbitrary bytes as an EBNF grammar (ebnf.h). A compiled
// grammar is run over the input itself and a few fixed texts. Nothing may
// crash, hang or read out of bounds; a refusal must say where ("line L,
// column C") unless it is about the whole grammar (size, no root rule).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "grammar/ebnf.h"
#include "grammar/matcher.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto grammar = cellm::grammar::compile_ebnf(text);
  if (!grammar.ok()) {
    const std::string_view m = grammar.status().message();
    if (m.find("line ") == std::string::npos && m.find("bytes") == std::string::npos &&
        m.find("'root'") == std::string::npos && m.find("automaton") == std::string::npos) {
      std::abort();  // an error that does not say where
    }
    return 0;
  }
  cellm::grammar::Matcher::matches(*grammar, text);
  for (std::string_view sample : {"", "a", "yes", "(x)", "[1,2]", "\xc3\xa9", "a\nb"}) {
    cellm::grammar::Matcher::matches(*grammar, sample);
  }
  return 0;
}
