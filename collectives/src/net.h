// TCP helpers for the rendezvous, the control mesh and the TCP transport.
// Every socket is non-blocking and every wait takes a Deadline; errors name
// the address or peer.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "octet/base/deadline.h"
#include "octet/base/host_port.h"  // HostPort, ParseHostPort
#include "octet/base/status.h"

namespace octet::collectives {

// An owned file descriptor, closed on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(Fd&& o) noexcept : fd_(o.Release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = o.Release();
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void Reset();

 private:
  int fd_ = -1;
};

// A resolved socket address.
struct SockAddr {
  sockaddr_storage storage{};
  socklen_t len = 0;
  int family() const { return storage.ss_family; }
  uint16_t port() const;
  void set_port(uint16_t port);
  std::string ToString() const;  // "1.2.3.4:5", "[::1]:5"
  std::string HostString() const;  // "1.2.3.4", "::1"
};

Result<SockAddr> Resolve(const HostPort& hp);
// A numeric address (as printed by HostString) with a port.
Result<SockAddr> ParseNumeric(const std::string& host, uint16_t port);

// Binds and listens (SO_REUSEADDR); port 0 picks a free one.
Result<Fd> Listen(const SockAddr& addr, int backlog = 64);
Result<SockAddr> LocalAddress(int fd);
Result<SockAddr> PeerAddress(int fd);

// Connects with a deadline. Refused/unreachable connections are retried
// every few milliseconds until the deadline when `retry` is set (the listener
// may not exist yet).
Result<Fd> ConnectTo(const SockAddr& addr, Deadline deadline, bool retry);
// Accepts one connection (or DeadlineExceeded).
Result<Fd> Accept(int listen_fd, Deadline deadline);

void SetNonBlocking(int fd);
void SetNoDelay(int fd);

// Whole-buffer transfers with a deadline; `who` names the other side in errors
// ("rank 2", "rendezvous 10.0.0.1:29500"). A closed connection is Unavailable.
Status SendAll(int fd, const void* data, size_t bytes, Deadline deadline, std::string_view who);
Status RecvAll(int fd, void* data, size_t bytes, Deadline deadline, std::string_view who);

// This host's identity for "are these ranks on one machine": hostname plus
// the kernel boot id.
std::string HostIdentity();

}  // namespace octet::collectives
