#include "server/access_control.h"

#include <algorithm>
#include <arpa/inet.h>
#include <cctype>
#include <fstream>

namespace cellm::server {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// RFC 9110 token characters: what a header name may contain.
bool is_token(std::string_view s) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [](char ch) {
    const auto u = static_cast<unsigned char>(ch);
    return std::isalnum(u) || std::string_view("!#$%&'*+-.^_`|~").find(ch) != std::string_view::npos;
  });
}

}  // namespace

AccessControl::AccessControl(std::vector<std::string> keys, std::vector<std::string> origins)
    : keys_(std::move(keys)), origins_(std::move(origins)) {
  any_origin_ = std::find(origins_.begin(), origins_.end(), "*") != origins_.end();
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  const std::size_t n = std::max(a.size(), b.size());
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (std::size_t i = 0; i < n; ++i) {
    const auto x = static_cast<unsigned char>(i < a.size() ? a[i] : 0);
    const auto y = static_cast<unsigned char>(i < b.size() ? b[i] : 0);
    diff |= static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
}

AccessControl::KeyCheck AccessControl::check_authorization(std::string_view header) const {
  if (keys_.empty()) return KeyCheck::kOk;
  header = trim(header);
  if (header.empty()) return KeyCheck::kMissing;
  const std::size_t space = header.find(' ');
  if (space == std::string_view::npos || !iequals(header.substr(0, space), "bearer")) {
    return KeyCheck::kInvalid;
  }
  const std::string_view presented = trim(header.substr(space + 1));
  bool match = false;
  for (const std::string& key : keys_) match |= constant_time_equal(presented, key);
  return match ? KeyCheck::kOk : KeyCheck::kInvalid;
}

AccessControl::KeyCheck AccessControl::check_request(std::string_view authorization,
                                                     std::string_view x_api_key) const {
  if (keys_.empty()) return KeyCheck::kOk;
  if (!trim(authorization).empty()) return check_authorization(authorization);
  const std::string_view presented = trim(x_api_key);
  if (presented.empty()) return KeyCheck::kMissing;
  bool match = false;
  for (const std::string& key : keys_) match |= constant_time_equal(presented, key);
  return match ? KeyCheck::kOk : KeyCheck::kInvalid;
}

std::string AccessControl::allowed_origin(std::string_view origin) const {
  if (origins_.empty() || origin.empty()) return {};
  if (any_origin_) return "*";
  for (const std::string& o : origins_) {
    if (iequals(o, origin)) return std::string(origin);
  }
  return {};
}

Status validate_api_key(std::string_view key) {
  if (key.empty()) return invalid_argument("an API key must not be empty");
  for (const char ch : key) {
    const auto u = static_cast<unsigned char>(ch);
    if (u <= 0x20 || u >= 0x7f) {
      return invalid_argument(
          "an API key must be printable ASCII without spaces (it is sent in the Authorization "
          "header); found byte 0x{:02x}",
          u);
    }
  }
  return Status::ok();
}

Result<std::vector<std::string>> read_api_key_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) {
    return not_found("cannot read the API key file {}: check the path and its permissions",
                     path.string());
  }
  std::vector<std::string> keys;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const std::string_view key = trim(line);
    if (key.empty() || key.front() == '#') continue;
    if (Status s = validate_api_key(key); !s.is_ok()) {
      return invalid_argument("{} line {}: {}", path.string(), number, s.message());
    }
    keys.emplace_back(key);
  }
  if (in.bad()) return not_found("reading the API key file {} failed", path.string());
  if (keys.empty()) {
    return invalid_argument(
        "the API key file {} holds no key: write one key per line (blank lines and lines "
        "starting with # are skipped)",
        path.string());
  }
  return keys;
}

Result<std::string> normalize_cors_origin(std::string_view origin) {
  if (origin == "*") return std::string("*");
  std::string_view o = origin;
  if (!o.empty() && o.back() == '/') o.remove_suffix(1);
  const std::size_t sep = o.find("://");
  const bool scheme_ok = sep != std::string_view::npos &&
                         (iequals(o.substr(0, sep), "http") || iequals(o.substr(0, sep), "https"));
  const std::string_view rest = sep == std::string_view::npos ? o : o.substr(sep + 3);
  const bool host_ok = !rest.empty() && rest.find_first_of("/?#@ \t") == std::string_view::npos;
  if (!scheme_ok || !host_ok) {
    return invalid_argument(
        "--cors '{}' is not an origin: give scheme://host[:port] as the browser sends it (e.g. "
        "http://localhost:3000), or * for any origin",
        origin);
  }
  return std::string(o);
}

bool is_loopback_host(std::string_view host) {
  if (iequals(host, "localhost")) return true;
  std::string h(host);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  in_addr v4{};
  if (::inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, h.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

std::string cors_allow_headers(std::string_view requested) {
  std::vector<std::string> names = {"Authorization", "Content-Type"};
  std::size_t pos = 0;
  while (pos <= requested.size()) {
    std::size_t comma = requested.find(',', pos);
    if (comma == std::string_view::npos) comma = requested.size();
    const std::string_view name = trim(requested.substr(pos, comma - pos));
    if (is_token(name) &&
        std::none_of(names.begin(), names.end(), [&](const std::string& n) { return iequals(n, name); })) {
      names.emplace_back(name);
    }
    pos = comma + 1;
  }
  std::string out;
  for (const std::string& n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

}  // namespace cellm::server
