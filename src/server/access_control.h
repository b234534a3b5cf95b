// Who may call the server: bearer API keys (compared in constant time) and the
// browser origins allowed by CORS. Pure logic, no HTTP types, so the rules are
// unit-tested apart from the routes; http_server.cpp applies them.
//
// Thread-safety: an AccessControl is immutable after construction and may be
// read from any thread; the free functions are pure (read_api_key_file reads
// the filesystem only).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "cellm/status.h"

namespace cellm::server {

class AccessControl {
 public:
  AccessControl() = default;
  // `keys`: accepted bearer keys (none: no key needed). `origins`: exact
  // origins ("https://app.example:8443") or "*" (none: no CORS headers).
  AccessControl(std::vector<std::string> keys, std::vector<std::string> origins);

  bool requires_key() const { return !keys_.empty(); }
  bool cors_enabled() const { return !origins_.empty(); }

  enum class KeyCheck { kOk, kMissing, kInvalid };
  // Checks an Authorization header value ("Bearer <key>", scheme in any
  // case). Every configured key is compared in full, whatever matches, so the
  // time taken says nothing about the keys.
  KeyCheck check_authorization(std::string_view header) const;
  // A request's credentials: its Authorization header when it sends one,
  // else its x-api-key header (how Anthropic clients send the key, bare).
  KeyCheck check_request(std::string_view authorization, std::string_view x_api_key) const;

  // The Access-Control-Allow-Origin value for a request's Origin: "*" when
  // any origin is allowed, the origin itself when it is listed, empty when
  // CORS is off or the origin is not listed.
  std::string allowed_origin(std::string_view origin) const;

 private:
  std::vector<std::string> keys_;
  std::vector<std::string> origins_;
  bool any_origin_ = false;
};

// True when a and b are equal; the time depends on their lengths only.
bool constant_time_equal(std::string_view a, std::string_view b);

// A key given on the command line or in a file: non-empty, printable ASCII
// without spaces (it travels in an HTTP header). InvalidArgument saying why.
Status validate_api_key(std::string_view key);
// One key per line; surrounding whitespace is trimmed, blank lines and lines
// starting with '#' are skipped. An unreadable file, an invalid key or a file
// without keys is an InvalidArgument/NotFound naming the path.
Result<std::vector<std::string>> read_api_key_file(const std::filesystem::path& path);

// "*" or scheme://host[:port] (http or https, no path); a trailing '/' is
// dropped. InvalidArgument with an example otherwise.
Result<std::string> normalize_cors_origin(std::string_view origin);

// Whether listening on `host` keeps the server on this machine: "localhost",
// 127.0.0.0/8 and ::1. Anything else (0.0.0.0, a LAN address, a name) is
// reachable from elsewhere.
bool is_loopback_host(std::string_view host);

// The Access-Control-Allow-Headers value for a preflight: the headers the
// browser asked for (when they are plain header names) plus Authorization and
// Content-Type.
std::string cors_allow_headers(std::string_view requested);

}  // namespace cellm::server
