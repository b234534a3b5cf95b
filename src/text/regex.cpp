#include "text/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace cellm::text {

struct Regex::Impl {
  std::string pattern;
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() { pcre2_code_free(code); }
};

namespace {

// Match data sized for one pair of offsets, reused by each thread.
struct ThreadMatchData {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  ThreadMatchData() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~ThreadMatchData() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

ThreadMatchData& thread_match_data() {
  thread_local ThreadMatchData tmd;
  return tmd;
}

}  // namespace

Result<Regex> Regex::create(std::string_view pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return invalid_argument("regex pattern '{}' does not compile at offset {}: {}", pattern, offset,
                            reinterpret_cast<const char*>(message));
  }
  auto impl = std::make_shared<Impl>();
  impl->pattern = std::string(pattern);
  impl->code = code;
  impl->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return Regex(std::move(impl));
}

const std::string& Regex::pattern() const {
  return impl_->pattern;
}

void Regex::find_all(std::string_view s,
                     std::vector<std::pair<std::size_t, std::size_t>>& out) const {
  ThreadMatchData& tmd = thread_match_data();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  std::size_t pos = 0;
  while (pos < s.size()) {
    const int rc =
        impl_->jit ? pcre2_jit_match(impl_->code, subject, s.size(), pos, 0, tmd.data, tmd.context)
                   : pcre2_match(impl_->code, subject, s.size(), pos, PCRE2_NO_UTF_CHECK, tmd.data,
                                 tmd.context);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) {
      out.emplace_back(pos, s.size());
      return;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(tmd.data);
    const std::size_t begin = ov[0], end = ov[1];
    if (end > begin) {
      out.emplace_back(begin, end);
      pos = end;
    } else {
      // Step over one whole character so the next search starts on a boundary.
      pos = begin + 1;
      while (pos < s.size() && (static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
}

}  // namespace cellm::text
