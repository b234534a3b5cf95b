// The listening socket's options and the reason a bind failed. cpp-httplib's
// default options set SO_REUSEPORT, which lets a second server bind a port
// that is already serving and silently take part of its connections; we set
// SO_REUSEADDR only (a restart may reuse a port whose old connections linger
// in TIME_WAIT, but never one with a live listener). And TCP_NODELAY, which
// the connections inherit: a stream is a run of small writes (one event a
// token), and with Nagle's algorithm every write after the first waited for
// the client's delayed acknowledgement (40 ms on Linux), which clients saw
// as TTFT and inter-token gaps of 40-90 ms on an idle loopback server.
//
// Thread-safety: pure functions over sockets they own.
#pragma once

#include <string_view>

#include "cellm/status.h"

namespace cellm::server {

// Applied to the listening socket before bind().
void set_listen_socket_options(int fd);

// Why listening on host:port fails, found by binding a probe socket with the
// same options: InvalidArgument naming host:port with what to do (another
// process listens there, the port needs privileges, the address is not this
// machine's, the name does not resolve). Ok when the probe binds after all.
Status diagnose_listen_failure(std::string_view host, int port);

}  // namespace cellm::server
