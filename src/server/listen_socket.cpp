#include "server/listen_socket.h"

#include <cerrno>
#include <cstring>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string>
#include <sys/socket.h>
#include <unistd.h>

namespace cellm::server {

void set_listen_socket_options(int fd) {
  const int yes = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  // Accepted connections inherit it (Linux).
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
}

Status diagnose_listen_failure(std::string_view host, int port) {
  const std::string h(host);
  const std::string p = std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(h.c_str(), p.c_str(), &hints, &found); rc != 0) {
    return invalid_argument("cannot listen on {}:{}: the host does not resolve ({}): pass --host "
                            "with an address of this machine, e.g. 127.0.0.1 or 0.0.0.0",
                            host, port, ::gai_strerror(rc));
  }
  int err = 0;
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    set_listen_socket_options(fd);
    const bool bound = ::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 1) == 0;
    err = bound ? 0 : errno;
    ::close(fd);
    if (bound) break;
  }
  ::freeaddrinfo(found);
  switch (err) {
    case 0: return Status::ok();
    case EADDRINUSE:
      return invalid_argument(
          "cannot listen on {}:{}: another process is listening there: stop it or pass --port N "
          "(0 picks a free port)",
          host, port);
    case EACCES:
      return invalid_argument(
          "cannot listen on {}:{}: permission denied (ports below 1024 need privileges): pass "
          "--port N with N above 1023 (0 picks a free port)",
          host, port);
    case EADDRNOTAVAIL:
      return invalid_argument(
          "cannot listen on {}:{}: the address is not one of this machine's: pass --host "
          "127.0.0.1 (this machine only) or 0.0.0.0 (every interface)",
          host, port);
    default:
      return invalid_argument("cannot listen on {}:{}: {}", host, port, std::strerror(err));
  }
}

}  // namespace cellm::server
