// Replays fuzz inputs without libFuzzer: every file under the directories or
// files given on the command line, plus deterministic mutations of each
// (truncations, bit flips, byte insertions), go through
// LLVMFuzzerTestOneInput. A crash or sanitizer report fails the test.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

void run(const std::vector<std::uint8_t>& bytes) {
  LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
}

void run_with_mutations(const std::vector<std::uint8_t>& seed, std::mt19937_64& rng) {
  run(seed);
  for (std::size_t cut = 0; cut < seed.size(); cut += 1 + seed.size() / 64) {
    run(std::vector<std::uint8_t>(seed.begin(), seed.begin() + static_cast<std::ptrdiff_t>(cut)));
  }
  if (seed.empty()) return;
  for (int i = 0; i < 256; ++i) {
    std::vector<std::uint8_t> m = seed;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = rng() % m.size();
      switch (rng() % 3) {
        case 0: m[at] ^= static_cast<std::uint8_t>(1u << (rng() % 8)); break;
        case 1: m[at] = static_cast<std::uint8_t>(rng()); break;
        default:
          m.insert(m.begin() + static_cast<std::ptrdiff_t>(at), static_cast<std::uint8_t>(rng()));
          break;
      }
    }
    run(m);
  }
}

std::vector<std::uint8_t> read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

int main(int argc, char** argv) {
  std::mt19937_64 rng(20261130);
  std::size_t seeds = 0;
  run_with_mutations({}, rng);
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path root(argv[i]);
    if (std::filesystem::is_directory(root)) {
      for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
        if (entry.is_regular_file()) {
          run_with_mutations(read_file(entry.path()), rng);
          ++seeds;
        }
      }
    } else if (std::filesystem::is_regular_file(root)) {
      run_with_mutations(read_file(root), rng);
      ++seeds;
    }
  }
  std::printf("replayed %zu seed inputs with mutations\n", seeds);
  return 0;
}
