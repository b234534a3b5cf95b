#include "text/unicode_nfc.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "core/utf8.h"

namespace cellm::text {
namespace {

struct NfcDecomp {
  char32_t cp;
  char32_t first;
  char32_t second;
  int composes;
};
struct NfcCccRange {
  char32_t first;
  char32_t last;
  int ccc;
};

#include "text/nfc_tables.inc"

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr char32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

int ccc_of(char32_t cp) {
  if (cp < 0x300) return 0;
  auto it = std::upper_bound(std::begin(kNfcCcc), std::end(kNfcCcc), cp,
                             [](char32_t c, const NfcCccRange& r) { return c < r.first; });
  if (it == std::begin(kNfcCcc)) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

const NfcDecomp* decomp_of(char32_t cp) {
  auto it = std::lower_bound(std::begin(kNfcDecomp), std::end(kNfcDecomp), cp,
                             [](const NfcDecomp& d, char32_t c) { return d.cp < c; });
  return it != std::end(kNfcDecomp) && it->cp == cp ? &*it : nullptr;
}

const std::unordered_map<std::uint64_t, char32_t>& composition_map() {
  static const auto* map = [] {
    auto* m = new std::unordered_map<std::uint64_t, char32_t>();
    for (const auto& d : kNfcDecomp) {
      if (d.composes) m->emplace((static_cast<std::uint64_t>(d.first) << 32) | d.second, d.cp);
    }
    return m;
  }();
  return *map;
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const NfcDecomp* d = decomp_of(cp);
  if (d == nullptr) {
    out.push_back(cp);
    return;
  }
  decompose(d->first, out);
  if (d->second != 0) decompose(d->second, out);
}

bool compose_pair(char32_t a, char32_t b, char32_t* out) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    *out = kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
    return true;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    *out = a + (b - kTBase);
    return true;
  }
  const auto& map = composition_map();
  auto it = map.find((static_cast<std::uint64_t>(a) << 32) | b);
  if (it == map.end()) return false;
  *out = it->second;
  return true;
}

}  // namespace

std::string nfc_normalize(std::string_view s) {
  // Below U+0300 every character is already in NFC and no combining mark
  // exists, so most text (ASCII, Latin-1) returns untouched.
  std::vector<char32_t> cps;
  cps.reserve(s.size());
  bool needs_work = false;
  for (std::size_t i = 0; i < s.size();) {
    char32_t cp;
    std::size_t n = utf8::decode(s, i, &cp);
    if (n == 0) {
      cp = utf8::kReplacementChar;
      n = utf8::invalid_span(s, i);
    }
    if (cp >= 0x300) needs_work = true;
    cps.push_back(cp);
    i += n;
  }
  if (!needs_work) return std::string(s);

  std::vector<char32_t> d;
  d.reserve(cps.size() + 8);
  for (char32_t cp : cps) decompose(cp, d);
  // Canonical ordering: stable sort each run of non-starters by class.
  for (std::size_t i = 0; i < d.size();) {
    if (ccc_of(d[i]) == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < d.size() && ccc_of(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + static_cast<std::ptrdiff_t>(i),
                     d.begin() + static_cast<std::ptrdiff_t>(j),
                     [](char32_t a, char32_t b) { return ccc_of(a) < ccc_of(b); });
    i = j;
  }
  // Canonical composition.
  std::vector<char32_t> out;
  out.reserve(d.size());
  std::ptrdiff_t starter = -1;
  int last_ccc = -1;
  for (char32_t cp : d) {
    const int cc = ccc_of(cp);
    if (starter >= 0) {
      const bool blocked = last_ccc != -1 && (last_ccc == 0 || last_ccc >= cc);
      char32_t composed;
      if (!blocked && compose_pair(out[static_cast<std::size_t>(starter)], cp, &composed)) {
        out[static_cast<std::size_t>(starter)] = composed;
        continue;
      }
    }
    if (cc == 0) {
      starter = static_cast<std::ptrdiff_t>(out.size());
      last_ccc = -1;
    } else {
      last_ccc = cc;
    }
    out.push_back(cp);
  }
  std::string result;
  result.reserve(s.size());
  for (char32_t cp : out) utf8::append(result, cp);
  return result;
}

}  // namespace cellm::text
