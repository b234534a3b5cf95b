// Test harness for the HTTP server: a Server on 127.0.0.1 (any free port)
// serving a FakeService on its own thread, JSON helpers over httplib's
// client, and RawHttp, a socket-level client that reads a streamed response
// incrementally and can hang up in the middle of it.
//
// Thread-safety: test-thread only (the server runs on its own thread).
#pragma once

#include <arpa/inet.h>
#include <memory>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "fake_service.h"
#include "server/http_server.h"

namespace cellm::server::testing {

struct JsonReply {
  int status = 0;
  nlohmann::json body;
  std::string raw;
};

class TestServer {
 public:
  explicit TestServer(ServerOptions options = {}, FakeService::Knobs knobs = {}, bool ready = true)
      : service_(std::make_shared<FakeService>(std::move(knobs))) {
    options.host = "127.0.0.1";
    options.port = 0;
    if (options.drain_timeout == ServerOptions{}.drain_timeout) {
      options.drain_timeout = std::chrono::milliseconds(2000);
    }
    server_ = std::make_unique<Server>(std::move(options));
    const Status s = server_->bind();
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    if (ready) server_->set_service(service_);
    thread_ = std::thread([this] { serve_status_ = server_->serve(); });
  }
  ~TestServer() { stop(); }

  void stop() {
    if (thread_.joinable()) {
      server_->stop();
      thread_.join();
    }
  }
  void make_ready() { server_->set_service(service_); }

  FakeService& service() { return *service_; }
  Server& server() { return *server_; }
  int port() const { return server_->port(); }
  const Status& serve_status() const { return serve_status_; }

  httplib::Client client() const {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(30, 0);
    return c;
  }
  JsonReply post(const std::string& path, const std::string& body) const {
    auto c = client();
    auto res = c.Post(path.c_str(), body, "application/json");
    return to_reply(res);
  }
  JsonReply post(const std::string& path, const nlohmann::json& body) const {
    return post(path, body.dump());
  }
  JsonReply get(const std::string& path) const {
    auto c = client();
    return to_reply(c.Get(path.c_str()));
  }

 private:
  static JsonReply to_reply(const httplib::Result& res) {
    JsonReply r;
    if (!res) {
      ADD_FAILURE() << "HTTP request failed: " << httplib::to_string(res.error());
      return r;
    }
    r.status = res->status;
    r.raw = res->body;
    r.body = nlohmann::json::parse(res->body, nullptr, false);
    return r;
  }

  std::shared_ptr<FakeService> service_;
  std::unique_ptr<Server> server_;
  std::thread thread_;
  Status serve_status_;
};

// A bare HTTP/1.1 client over one socket.
class RawHttp {
 public:
  explicit RawHttp(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~RawHttp() { close(); }

  bool connected() const { return connected_; }
  void post(const std::string& path, const std::string& body) {
    const std::string req = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" +
                            "Content-Type: application/json\r\nConnection: close\r\n" +
                            "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    ASSERT_EQ(::send(fd_, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  }
  // Reads once; false at EOF or timeout.
  bool read_some() {
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    raw_.append(buf, static_cast<std::size_t>(n));
    return true;
  }
  // Reads until `needle` appears in the decoded body (or EOF).
  bool read_until(const std::string& needle) {
    while (body().find(needle) == std::string::npos) {
      if (!read_some()) return body().find(needle) != std::string::npos;
    }
    return true;
  }
  void read_all() {
    while (read_some()) {
    }
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  int status() const {
    if (raw_.size() < 12) return 0;
    return std::stoi(raw_.substr(9, 3));
  }
  std::string headers() const { return raw_.substr(0, raw_.find("\r\n\r\n")); }
  // The body so far, with chunked transfer coding removed when present.
  std::string body() const {
    const std::size_t start = raw_.find("\r\n\r\n");
    if (start == std::string::npos) return {};
    std::string rest = raw_.substr(start + 4);
    std::string h = headers();
    for (char& ch : h) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (h.find("transfer-encoding: chunked") == std::string::npos) return rest;
    std::string out;
    std::size_t pos = 0;
    while (true) {
      const std::size_t eol = rest.find("\r\n", pos);
      if (eol == std::string::npos) break;
      const std::size_t size = std::stoul(rest.substr(pos, eol - pos), nullptr, 16);
      if (size == 0 || eol + 2 + size > rest.size()) break;
      out += rest.substr(eol + 2, size);
      pos = eol + 2 + size + 2;
    }
    return out;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  std::string raw_;
};

// Splits an SSE body into its "data: " payloads; *well_formed is false when
// any block is not exactly one data line followed by a blank line.
inline std::vector<std::string> sse_payloads(const std::string& body, bool* well_formed) {
  std::vector<std::string> out;
  *well_formed = true;
  std::size_t pos = 0;
  while (pos < body.size()) {
    const std::size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) {
      *well_formed = false;
      break;
    }
    const std::string block = body.substr(pos, end - pos);
    if (block.rfind("data: ", 0) != 0 || block.find('\n') != std::string::npos)
      *well_formed = false;
    out.push_back(block.size() >= 6 ? block.substr(6) : block);
    pos = end + 2;
  }
  return out;
}

}  // namespace cellm::server::testing
