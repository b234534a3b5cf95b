// Fuzz entry for the safetensors reader: any bytes must parse or be refused,
// and every tensor of an accepted file must be readable in full.
#include <cstddef>
#include <cstdint>

#include "format/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace cellm;
  auto file = format::MappedFile::from_bytes({data, size}, "fuzz.safetensors");
  auto parsed = format::SafetensorsFile::parse(file);
  if (!parsed.ok()) return 0;
  volatile std::uint8_t sink = 0;
  for (const auto& e : parsed->entries()) {
    auto t = parsed->tensor(e.name);
    if (!t.ok()) continue;
    const auto* p = static_cast<const std::uint8_t*>(t->data());
    for (std::size_t i = 0; i < t->nbytes(); ++i) sink = static_cast<std::uint8_t>(sink ^ p[i]);
  }
  return 0;
}
