// Fuzz entry for the GGUF reader: any bytes must parse or be refused; for an
// accepted file every tensor's bytes are touched and small ones dequantized.
#include <cstddef>
#include <cstdint>

#include "format/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace cellm;
  auto file = format::MappedFile::from_bytes({data, size}, "fuzz.gguf");
  auto parsed = format::GgufFile::parse(file);
  if (!parsed.ok()) return 0;
  volatile std::uint8_t sink = 0;
  for (const auto& t : parsed->tensors()) {
    for (std::uint8_t b : parsed->tensor_bytes(t)) sink = static_cast<std::uint8_t>(sink ^ b);
    if (t.numel() <= (1u << 16)) {
      auto f = parsed->dequantize(t, DType::kF32);
      (void)f;
      auto h = parsed->dequantize(t, DType::kBF16);
      (void)h;
    }
  }
  for (const auto& [key, value] : parsed->metadata()) (void)value.summary();
  return 0;
}
