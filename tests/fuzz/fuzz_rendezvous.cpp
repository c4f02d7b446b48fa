// The collectives' rendezvous and control-mesh wire messages
// (collectives/src/bootstrap.cpp, wire.h), as a joining rank meets them from a
// rank 0 that is broken or hostile: the fuzzer plays rank 0 of a world of two
// on loopback. Rank 1 (Bootstrap::Connect in a thread) says hello; the input's
// bytes are rank 0's whole answer (the roster or an abort, then control frames:
// blobs, aborts naming any rank, wait queries and answers), after which rank 0
// closes its side. Rank 1 must come back with a communicator or an error
// within its deadline, see the control traffic through CheckPeers and an
// all-gather, and name a failed peer only by a rank that exists — never
// crash, hang or read out of bounds.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "bootstrap.h"
#include "octet/base/deadline.h"

namespace {

using octet::collectives::Bootstrap;

int Listener(uint16_t* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) std::abort();
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 8) != 0)
    std::abort();
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

// Waits up to `ms` for `fd` to be readable (libFuzzer's timer signals
// interrupt poll: EINTR waits on).
bool WaitReadable(int fd, int ms) {
  const octet::Deadline deadline = octet::Deadline::AfterMs(ms);
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(deadline.poll_timeout_ms()));
    if (r == 1) return true;
    if (r == 0 || errno != EINTR || deadline.expired()) return false;
  }
}

// Reads rank 1's hello frame (16-byte header, then its payload).
bool ReadHello(int fd) {
  char header[16];
  size_t got = 0;
  while (got < sizeof header) {
    if (!WaitReadable(fd, 5000)) return false;
    const ssize_t n = ::recv(fd, header + got, sizeof header - got, 0);
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  uint64_t length = 0;
  std::memcpy(&length, header + 8, 8);
  std::string payload(length, '\0');
  got = 0;
  while (got < length) {
    if (!WaitReadable(fd, 5000)) return false;
    const ssize_t n = ::recv(fd, payload.data() + got, length - got, 0);
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static uint16_t port = 0;
  static const int listener = Listener(&port);

  std::thread rank1([] {
    Bootstrap::Options o;
    o.connect_timeout_ms = 2000;
    auto b = Bootstrap::Connect("127.0.0.1:" + std::to_string(port), 2, 1, o);
    if (!b.ok()) {
      if (b.status().message().empty()) std::abort();
      return;
    }
    if ((*b)->size() != 2 || (*b)->roster().size() != 2) std::abort();
    for (int i = 0; i < 3; ++i) {
      const octet::collectives::PeerFailure f = (*b)->CheckPeers();
      if (f.rank < -1 || f.rank >= 2) std::abort();     // blames a rank that does not exist
      if (f.rank != -1 && f.status.ok()) std::abort();  // a failure that reads as success
      (void)(*b)->Describe(f.rank);
    }
    auto all = (*b)->AllGather("mine", octet::Deadline::AfterMs(2000));
    if (all.ok() && all->size() != 2) std::abort();
    (void)(*b)->AskWaitingOn(0, octet::Deadline::AfterMs(200));
  });

  if (!WaitReadable(listener, 5000)) std::abort();  // rank 1 never connected
  const int conn = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  if (conn < 0) std::abort();
  if (ReadHello(conn)) {
    size_t sent = 0;
    while (sent < size) {
      const ssize_t n = ::send(conn, data + sent, size - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
  }
  // Close rank 0's side for writing, then read until rank 1 has closed (it
  // must, within its deadlines), so that no reset discards what was sent.
  ::shutdown(conn, SHUT_WR);
  char sink[4096];
  for (;;) {
    if (!WaitReadable(conn, 10000)) std::abort();  // rank 1 hangs
    if (::recv(conn, sink, sizeof sink, 0) <= 0) break;
  }
  ::close(conn);
  rank1.join();
  return 0;
}
