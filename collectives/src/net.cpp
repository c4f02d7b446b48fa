#include "net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

namespace octet::collectives {

namespace {
std::string Errno(int err) { return std::strerror(err); }
}  // namespace

void Fd::Reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

uint16_t SockAddr::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return 0;
}

void SockAddr::set_port(uint16_t port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(port);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(port);
}

std::string SockAddr::HostString() const {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (family() == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr, buf, sizeof buf);
  } else if (family() == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr, buf,
                sizeof buf);
  } else {
    return "?";
  }
  return buf;
}

std::string SockAddr::ToString() const { return HostPort{HostString(), port()}.ToString(); }

Result<SockAddr> Resolve(const HostPort& hp) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(hp.port);
  const int rc = ::getaddrinfo(hp.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return UnavailableError("cannot resolve '" + hp.host + "': " + ::gai_strerror(rc));
  }
  // Prefer IPv4: it is what RoCE v2 GIDs and most cluster networks use.
  const addrinfo* pick = res;
  for (const addrinfo* a = res; a; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      pick = a;
      break;
    }
  }
  SockAddr out;
  std::memcpy(&out.storage, pick->ai_addr, pick->ai_addrlen);
  out.len = pick->ai_addrlen;
  ::freeaddrinfo(res);
  return out;
}

Result<SockAddr> ParseNumeric(const std::string& host, uint16_t port) {
  SockAddr out;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out.storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out.storage);
  if (::inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    out.len = sizeof(sockaddr_in);
    return out;
  }
  out = SockAddr();
  if (::inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    out.len = sizeof(sockaddr_in6);
    return out;
  }
  return InvalidArgumentError("not a numeric address: '" + host + "'");
}

void SetNonBlocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

void SetNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

Result<Fd> Listen(const SockAddr& addr, int backlog) {
  Fd fd(::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return UnavailableError("socket: " + Errno(errno));
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.len) != 0) {
    return UnavailableError("cannot listen on " + addr.ToString() + ": " + Errno(errno));
  }
  if (::listen(fd.get(), backlog) != 0) {
    return UnavailableError("listen on " + addr.ToString() + ": " + Errno(errno));
  }
  return fd;
}

Result<SockAddr> LocalAddress(int fd) {
  SockAddr a;
  a.len = sizeof a.storage;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a.storage), &a.len) != 0) {
    return UnavailableError("getsockname: " + Errno(errno));
  }
  return a;
}

Result<SockAddr> PeerAddress(int fd) {
  SockAddr a;
  a.len = sizeof a.storage;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a.storage), &a.len) != 0) {
    return UnavailableError("getpeername: " + Errno(errno));
  }
  return a;
}

Result<Fd> ConnectTo(const SockAddr& addr, Deadline deadline, bool retry) {
  int last_err = 0;
  for (int attempt = 0;; ++attempt) {
    Fd fd(::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) return UnavailableError("socket: " + Errno(errno));
    int rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.len);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd.get(), POLLOUT, 0};
      int pr;
      do {
        pr = ::poll(&p, 1, deadline.poll_timeout_ms());
      } while (pr < 0 && errno == EINTR);
      if (pr == 0) {
        return DeadlineExceededError("connecting to " + addr.ToString() + " timed out");
      }
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc == 0) {
      SetNoDelay(fd.get());
      return fd;
    }
    last_err = errno;
    const bool transient = last_err == ECONNREFUSED || last_err == ENETUNREACH ||
                           last_err == EHOSTUNREACH || last_err == ETIMEDOUT ||
                           last_err == ECONNRESET || last_err == EAGAIN;
    if (!retry || !transient || deadline.expired()) break;
    // Back off a little more each time, up to 50 ms, never past the deadline.
    const auto pause = std::chrono::milliseconds(std::min(50, 2 + attempt * 2));
    std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(pause, deadline.remaining()));
  }
  return UnavailableError("cannot connect to " + addr.ToString() + ": " + Errno(last_err));
}

Result<Fd> Accept(int listen_fd, Deadline deadline) {
  for (;;) {
    Fd fd(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (fd.valid()) {
      SetNoDelay(fd.get());
      return fd;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
      return UnavailableError("accept: " + Errno(errno));
    }
    if (deadline.expired()) return DeadlineExceededError("no connection arrived in time");
    pollfd p{listen_fd, POLLIN, 0};
    ::poll(&p, 1, std::min(deadline.poll_timeout_ms(), 100));
  }
}

Status SendAll(int fd, const void* data, size_t bytes, Deadline deadline, std::string_view who) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (bytes > 0) {
    const ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (deadline.expired()) {
        return DeadlineExceededError("sending to " + std::string(who) + " timed out");
      }
      pollfd pf{fd, POLLOUT, 0};
      ::poll(&pf, 1, std::min(deadline.poll_timeout_ms(), 100));
      continue;
    }
    return UnavailableError("connection to " + std::string(who) + " lost: " + Errno(errno));
  }
  return Status::Ok();
}

Status RecvAll(int fd, void* data, size_t bytes, Deadline deadline, std::string_view who) {
  auto* p = static_cast<uint8_t*>(data);
  while (bytes > 0) {
    const ssize_t n = ::recv(fd, p, bytes, 0);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return UnavailableError(std::string(who) + " closed the connection");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (deadline.expired()) {
        return DeadlineExceededError(std::string(who) + " sent nothing in time");
      }
      pollfd pf{fd, POLLIN, 0};
      ::poll(&pf, 1, std::min(deadline.poll_timeout_ms(), 100));
      continue;
    }
    return UnavailableError("connection to " + std::string(who) + " lost: " + Errno(errno));
  }
  return Status::Ok();
}

std::string HostIdentity() {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  std::string boot_id;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, boot_id);
  return std::string(host) + "/" + boot_id;
}

}  // namespace octet::collectives
