// ConnectionProbe: tells whether the client of an HTTP request has hung up,
// without writing to it. cpp-httplib does not expose the connection's socket,
// so the probe finds it once by its address pair (local and remote address and
// port are unique among open TCP connections): the kernel's socket table
// (/proc/net/tcp, tcp6) gives the socket's inode and /proc/self/fd the
// descriptor linking to it, so no other thread's socket is ever touched.
// It then polls it for a peer shutdown. This lets a disconnect cancel a generation even while nothing is
// being written (prefill, queueing, non-streaming requests).
//
// Thread-safety: closed() may be called from any thread while the request's
// handler runs (httplib keeps the socket open until then). Linux only; where
// the socket cannot be found closed() always answers false.
#pragma once

#include <string>

namespace cellm::server {

class ConnectionProbe {
 public:
  ConnectionProbe() = default;
  ConnectionProbe(const std::string& local_addr, int local_port, const std::string& remote_addr,
                  int remote_port);

  bool found() const { return fd_ >= 0; }
  // True once the peer has closed or reset the connection.
  bool closed() const;

 private:
  int fd_ = -1;  // borrowed from httplib, never closed here
};

}  // namespace cellm::server
