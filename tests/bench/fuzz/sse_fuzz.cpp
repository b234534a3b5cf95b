// Fuzzes SseParser and the completion-chunk reader with arbitrary bytes. The
// first byte picks where the body is cut into two pieces; the events must not
// depend on the cut (a differential check), no event may exceed the line
// bound, and reading each event's JSON must not crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "bench/http_client.h"
#include "bench/sse.h"

namespace {

constexpr std::size_t kMaxLine = 4096;

std::vector<std::string> events_of(std::string_view body, std::size_t cut, bool* ok) {
  cellm::bench::SseParser parser(kMaxLine);
  std::vector<std::string> out;
  auto sink = [&](std::string_view d) {
    if (d.size() > kMaxLine) std::abort();
    out.emplace_back(d);
    return true;
  };
  *ok = parser.feed(body.substr(0, cut), sink) && parser.feed(body.substr(cut), sink);
  if (*ok != !parser.failed()) std::abort();
  parser.finish();
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::size_t cut = body.empty() ? 0 : data[0] % (body.size() + 1);
  bool whole_ok = false;
  bool split_ok = false;
  const auto whole = events_of(body, body.size(), &whole_ok);
  const auto split = events_of(body, cut, &split_ok);
  // A failure (an over-long line) may come at a different event, but what
  // both delivered before it must agree.
  if (whole_ok && split_ok && whole != split) std::abort();
  for (std::size_t i = 0; i < std::min(whole.size(), split.size()); ++i) {
    if (whole[i] != split[i]) std::abort();
  }
  for (const std::string& e : whole) (void)cellm::bench::interpret_event(e);
  return 0;
}
