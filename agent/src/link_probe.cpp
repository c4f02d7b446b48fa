#include "octet/agent/link_probe.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "octet/agent/cluster_token.h"
#include "octet/base/log.h"

namespace octet::agent {
namespace {

constexpr size_t kNonceBytes = 16;
constexpr size_t kMacBytes = 32;
constexpr uint64_t kMaxBulkBytes = 1ull << 30;
constexpr int kServerIdleMs = 10'000;
constexpr size_t kMaxConnections = 8;

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

void RawHmac(const std::string& key, const uint8_t* data, size_t n, uint8_t out[kMacBytes]) {
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), data, n, out, &len);
}

// Full-length non-blocking I/O with a deadline.
Status WriteAll(int fd, const void* data, size_t n, Deadline d) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno != EAGAIN && errno != EINTR) return UnavailableError(Errno("send"));
    pollfd pfd{fd, POLLOUT, 0};
    if (::poll(&pfd, 1, d.poll_timeout_ms()) == 0 || d.expired()) {
      return DeadlineExceededError("link probe: send timed out");
    }
  }
  return Status::Ok();
}

Status ReadAll(int fd, void* data, size_t n, Deadline d) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return UnavailableError("link probe: connection closed by peer");
    if (errno != EAGAIN && errno != EINTR) return UnavailableError(Errno("recv"));
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, d.poll_timeout_ms()) == 0 || d.expired()) {
      return DeadlineExceededError("link probe: receive timed out");
    }
  }
  return Status::Ok();
}

// Reads and discards n bytes.
Status Drain(int fd, uint64_t n, Deadline d) {
  std::vector<char> buf(1 << 20);
  while (n > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, buf.size()));
    const ssize_t r = ::recv(fd, buf.data(), chunk, 0);
    if (r > 0) {
      n -= static_cast<uint64_t>(r);
      continue;
    }
    if (r == 0) return UnavailableError("link probe: connection closed during bulk transfer");
    if (errno != EAGAIN && errno != EINTR) return UnavailableError(Errno("recv"));
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, d.poll_timeout_ms()) == 0 || d.expired()) {
      return DeadlineExceededError("link probe: bulk receive timed out");
    }
  }
  return Status::Ok();
}

void SetNoDelay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

Result<int> ConnectTcp(const std::string& host, uint16_t port, Deadline deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (int e = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); e != 0) {
    return UnavailableError("cannot resolve '" + host + "': " + ::gai_strerror(e));
  }
  Status last = UnavailableError("no address for '" + host + "'");
  for (addrinfo* a = res; a; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd pfd{fd, POLLOUT, 0};
      rc = ::poll(&pfd, 1, deadline.poll_timeout_ms()) == 1 ? 0 : -1;
      if (rc == 0) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
          errno = err;
          rc = -1;
        }
      } else {
        errno = ETIMEDOUT;
      }
    }
    if (rc == 0) {
      ::freeaddrinfo(res);
      SetNoDelay(fd);
      return fd;
    }
    last = UnavailableError(Errno("connect to " + JoinHostPort(host, port)));
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return last;
}

Result<std::unique_ptr<ProbeServer>> ProbeServer::Start(const std::string& host, uint16_t port,
                                                        std::string token) {
  std::unique_ptr<ProbeServer> s(new ProbeServer);
  s->token_ = std::move(token);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const char* node = host.empty() || host == "*" ? nullptr : host.c_str();
  if (int e = ::getaddrinfo(node, service.c_str(), &hints, &res); e != 0) {
    return InvalidArgumentError("probe server: cannot resolve '" + host +
                                "': " + ::gai_strerror(e));
  }
  s->listen_fd_ = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  const int one = 1;
  if (s->listen_fd_ >= 0) ::setsockopt(s->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (s->listen_fd_ < 0 || ::bind(s->listen_fd_, res->ai_addr, res->ai_addrlen) != 0 ||
      ::listen(s->listen_fd_, 16) != 0) {
    Status st = UnavailableError(Errno("probe server: listen on " + JoinHostPort(host, port)));
    ::freeaddrinfo(res);
    return st;
  }
  ::freeaddrinfo(res);
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  s->port_ = ntohs(bound.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                                              : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  if (::pipe2(s->stop_pipe_, O_CLOEXEC) != 0) return UnavailableError(Errno("pipe"));
  ProbeServer* self = s.get();
  s->accept_thread_ = std::thread([self] { self->AcceptLoop(); });
  return s;
}

ProbeServer::~ProbeServer() {
  stopping_ = true;
  if (accept_thread_.joinable()) {
    const char c = 1;
    (void)!::write(stop_pipe_[1], &c, 1);
    accept_thread_.join();
  }
  std::vector<Connection> connections;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : conn_fds_) ::shutdown(fd, SHUT_RDWR);
    connections.swap(connections_);
  }
  for (auto& c : connections) c.thread.join();
  for (int fd : {listen_fd_, stop_pipe_[0], stop_pipe_[1]}) {
    if (fd >= 0) ::close(fd);
  }
}

void ProbeServer::AcceptLoop() {
  for (;;) {
    pollfd fds[2] = {{stop_pipe_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) return;
    if (fds[0].revents) return;
    if (!(fds[1].revents & POLLIN)) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> lock(mu_);
    JoinFinishedLocked();
    if (conn_fds_.size() >= kMaxConnections) {
      ::close(fd);
      continue;
    }
    SetNoDelay(fd);
    conn_fds_.push_back(fd);
    Connection c;
    c.done = std::make_unique<std::atomic<bool>>(false);
    std::atomic<bool>* done = c.done.get();
    c.thread = std::thread([this, fd, done] { Serve(fd, done); });
    connections_.push_back(std::move(c));
  }
}

void ProbeServer::JoinFinishedLocked() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (it->done->load()) {
      it->thread.join();
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

void ProbeServer::Serve(int fd, std::atomic<bool>* done) {
  auto finish = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    conn_fds_.erase(std::remove(conn_fds_.begin(), conn_fds_.end(), fd), conn_fds_.end());
    ::close(fd);
    *done = true;  // the next accept (or shutdown) joins this thread
  };
  uint8_t nonce[kNonceBytes];
  uint8_t expected[kMacBytes];
  uint8_t presented[kMacBytes];
  Deadline d = Deadline::AfterMs(kServerIdleMs);
  if (!FillRandom(nonce, sizeof nonce).ok() || !WriteAll(fd, nonce, sizeof nonce, d).ok() ||
      !ReadAll(fd, presented, sizeof presented, d).ok()) {
    finish();
    return;
  }
  RawHmac(token_, nonce, sizeof nonce, expected);
  if (!ConstantTimeEquals(std::string_view(reinterpret_cast<char*>(expected), kMacBytes),
                          std::string_view(reinterpret_cast<char*>(presented), kMacBytes))) {
    OCTET_LOG(WARNING) << "link probe: rejected a connection with a wrong token proof";
    finish();
    return;
  }
  const char ok = 'K';
  if (!WriteAll(fd, &ok, 1, d).ok()) {
    finish();
    return;
  }
  while (!stopping_) {
    d = Deadline::AfterMs(kServerIdleMs);
    char cmd = 0;
    if (!ReadAll(fd, &cmd, 1, d).ok()) break;
    if (cmd == 'P') {
      char ping[9] = {'P'};
      if (!ReadAll(fd, ping + 1, 8, d).ok() || !WriteAll(fd, ping, 9, d).ok()) break;
    } else if (cmd == 'B') {
      uint64_t n = 0;
      if (!ReadAll(fd, &n, sizeof n, d).ok() || n > kMaxBulkBytes) break;
      if (!Drain(fd, n, Deadline::AfterMs(60'000)).ok()) break;
      const char done = 'D';
      if (!WriteAll(fd, &done, 1, d).ok()) break;
    } else {
      break;  // 'Q' or anything unknown ends the session
    }
  }
  finish();
}

Result<LinkProbeResult> RunLinkProbe(const std::string& host, uint16_t port,
                                     const std::string& token, uint64_t bytes, uint32_t round_trips,
                                     Deadline deadline) {
  if (bytes > kMaxBulkBytes) return InvalidArgumentError("link probe: at most 1 GiB per transfer");
  const std::string where = JoinHostPort(host, port);
  OCTET_ASSIGN_OR_RETURN(int fd, ConnectTcp(host, port, deadline));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  auto ctx = [&](const Status& s) { return s.WithContext("link probe to " + where); };

  uint8_t nonce[kNonceBytes];
  if (Status s = ReadAll(fd, nonce, sizeof nonce, deadline); !s.ok()) return ctx(s);
  uint8_t mac[kMacBytes];
  RawHmac(token, nonce, sizeof nonce, mac);
  if (Status s = WriteAll(fd, mac, sizeof mac, deadline); !s.ok()) return ctx(s);
  char ok = 0;
  if (Status s = ReadAll(fd, &ok, 1, deadline); !s.ok() || ok != 'K') {
    return UnauthenticatedError("link probe to " + where + ": the peer refused the cluster token");
  }

  LinkProbeResult result;
  std::vector<double> rtts;
  rtts.reserve(round_trips);
  for (uint32_t i = 0; i < round_trips; ++i) {
    char ping[9] = {'P'};
    std::memcpy(ping + 1, &i, sizeof i);
    char pong[9];
    const int64_t t0 = NowNs();
    if (Status s = WriteAll(fd, ping, sizeof ping, deadline); !s.ok()) return ctx(s);
    if (Status s = ReadAll(fd, pong, sizeof pong, deadline); !s.ok()) return ctx(s);
    rtts.push_back(static_cast<double>(NowNs() - t0) / 1e3);
    if (std::memcmp(ping, pong, sizeof ping) != 0) {
      return DataLossError("link probe to " + where + ": echo mismatch");
    }
  }
  if (!rtts.empty()) {
    std::sort(rtts.begin(), rtts.end());
    auto pct = [&](double q) {
      const size_t idx = static_cast<size_t>(q * static_cast<double>(rtts.size() - 1) + 0.5);
      return rtts[std::min(idx, rtts.size() - 1)];
    };
    result.rtt_us_p50 = pct(0.50);
    result.rtt_us_p99 = pct(0.99);
  }
  result.round_trips = round_trips;

  if (bytes > 0) {
    std::vector<char> chunk(1 << 20, 'x');
    char header[9] = {'B'};
    std::memcpy(header + 1, &bytes, sizeof bytes);
    const int64_t t0 = NowNs();
    if (Status s = WriteAll(fd, header, sizeof header, deadline); !s.ok()) return ctx(s);
    uint64_t left = bytes;
    while (left > 0) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(left, chunk.size()));
      if (Status s = WriteAll(fd, chunk.data(), n, deadline); !s.ok()) return ctx(s);
      left -= n;
    }
    char done = 0;
    if (Status s = ReadAll(fd, &done, 1, deadline); !s.ok()) return ctx(s);
    const double secs = static_cast<double>(NowNs() - t0) / 1e9;
    result.bytes = bytes;
    result.throughput_gbps = secs > 0 ? static_cast<double>(bytes) * 8.0 / secs / 1e9 : 0;
  }
  const char quit = 'Q';
  WriteAll(fd, &quit, 1, deadline).IgnoreError();
  return result;
}

}  // namespace octet::agent
