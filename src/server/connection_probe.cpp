#include "server/connection_probe.h"

#include <arpa/inet.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <netinet/in.h>
#include <poll.h>
#include <sstream>
#include <unistd.h>

namespace cellm::server {
namespace {

// The kernel's text form of an address in /proc/net/tcp{,6}: each 32-bit
// word of the address as stored (network order bytes read as a native word)
// in %08X, then ':' and the port in %04X.
bool proc_net_form(const std::string& addr, int port, std::string* out) {
  unsigned char bytes[16] = {};
  std::size_t n = 0;
  if (inet_pton(AF_INET, addr.c_str(), bytes) == 1) {
    n = 4;
  } else if (inet_pton(AF_INET6, addr.c_str(), bytes) == 1) {
    n = 16;
  } else {
    return false;
  }
  char buf[64] = {};
  std::size_t at = 0;
  for (std::size_t i = 0; i < n; i += 4) {
    std::uint32_t word = 0;
    std::memcpy(&word, bytes + i, sizeof(word));
    at += static_cast<std::size_t>(std::snprintf(buf + at, sizeof(buf) - at, "%08X", word));
  }
  std::snprintf(buf + at, sizeof(buf) - at, ":%04X", static_cast<unsigned>(port));
  *out = buf;
  return true;
}

// The inode of the TCP socket with this address pair, from /proc/net/tcp
// (IPv4) or tcp6; 0 when none is listed.
unsigned long socket_inode(const std::string& local, const std::string& remote, bool v6) {
  std::ifstream table(v6 ? "/proc/net/tcp6" : "/proc/net/tcp");
  std::string line;
  std::getline(table, line);  // the header
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string slot, local_field, remote_field, state, queues, timer, retransmits, uid, timeout;
    unsigned long inode = 0;
    if (!(fields >> slot >> local_field >> remote_field >> state >> queues >> timer >>
          retransmits >> uid >> timeout >> inode)) {
      continue;
    }
    if (local_field == local && remote_field == remote) return inode;
  }
  return 0;
}

}  // namespace

ConnectionProbe::ConnectionProbe(const std::string& local_addr, int local_port,
                                 const std::string& remote_addr, int remote_port) {
  if (local_port <= 0 || remote_port <= 0) return;
  // Found without touching any descriptor but the one it finds: the other
  // connections' sockets belong to other httplib threads, which may close
  // them at any moment (an fstat or getsockname on them would race that
  // close, and could even land on a reused number). The kernel's socket
  // table names the inode; /proc/self/fd's links name the descriptor.
  std::string local, remote;
  if (!proc_net_form(local_addr, local_port, &local) ||
      !proc_net_form(remote_addr, remote_port, &remote)) {
    return;
  }
  const bool v6 = local.size() > 13;  // 32 hex digits and a port, not 8
  const unsigned long inode = socket_inode(local, remote, v6);
  if (inode == 0) return;
  const std::string target = "socket:[" + std::to_string(inode) + "]";
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    char link[64] = {};
    const std::string path = std::string("/proc/self/fd/") + entry->d_name;
    const ssize_t len = readlink(path.c_str(), link, sizeof(link) - 1);
    if (len > 0 && target.compare(0, std::string::npos, link, static_cast<std::size_t>(len)) == 0) {
      fd_ = std::atoi(entry->d_name);
      break;
    }
  }
  closedir(dir);
}

bool ConnectionProbe::closed() const {
  if (fd_ < 0) return false;
  pollfd p{};
  p.fd = fd_;
  p.events = POLLRDHUP;
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace cellm::server
