// The gateway's event loop: one thread, epoll, non-blocking sockets. It
// accepts connections, reads requests into them and flushes their output,
// closes them, enforces every connection's deadlines (idle keep-alive, head,
// body, write progress, and a loop stream's own), and wakes on the eventfd for
// workers' replies and Stop(). What a connection does with its bytes is
// gateway_conn.cpp; loop streams are gateway_stream.cpp.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "gateway_impl.h"
#include "octet/base/deadline.h"
#include "octet/base/log.h"

namespace octet::router {

void Gateway::Impl::Wake() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd, &one, sizeof one);
}

void Gateway::Impl::SetEvents(int fd, uint64_t token, uint32_t* current, uint32_t wanted) {
  if (*current == wanted) return;
  epoll_event ev{};
  ev.events = wanted;
  ev.data.u64 = token;
  ::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, fd, &ev);
  *current = wanted;
}

// Reading: while a request head or body is expected, or (bounded) ahead of
// the request being served, which also notices a client that hangs up.
// Writing: while bytes are queued.
void Gateway::Impl::UpdateClientEvents(ClientConn* c) {
  uint32_t wanted = EPOLLRDHUP;
  if (c->state != ClientConn::State::kClosing && c->in.size() < ReadLimit(c)) wanted |= EPOLLIN;
  if (c->unsent() > 0) wanted |= EPOLLOUT;
  SetEvents(c->fd, c->token, &c->events, wanted);
}

void Gateway::Impl::Accept() {
  while (true) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        OCTET_LOG(WARNING) << "gateway: accept failed: " << std::strerror(errno);
      }
      return;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto c = std::make_unique<ClientConn>();
    c->fd = fd;
    c->token = next_token++;
    char host[INET6_ADDRSTRLEN] = {0};
    if (addr.ss_family == AF_INET)
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr, host, sizeof host);
    else if (addr.ss_family == AF_INET6)
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr, host, sizeof host);
    c->peer = host;
    c->idle_since_ns = NowNs();
    c->events = EPOLLIN | EPOLLRDHUP;
    epoll_event ev{};
    ev.events = c->events;
    ev.data.u64 = c->token;
    ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
    Arm(c.get());
    conns.emplace(c->token, std::move(c));
  }
}

void Gateway::Impl::CloseConn(ClientConn* c) {
  if (c->dead) return;
  c->dead = true;
  if (c->stream) CancelStream(c);
  if (c->reply) {
    std::lock_guard<std::mutex> lock(c->reply->mu);
    c->reply->client_gone = true;
    c->reply->cv.notify_all();
  }
  ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c->fd, nullptr);
  ::close(c->fd);
  auto it = conns.find(c->token);
  if (it != conns.end()) {
    graveyard.push_back(std::move(it->second));
    conns.erase(it);
  }
}

void Gateway::Impl::Flush(ClientConn* c) {
  if (c->dead) return;
  // write_timeout_ms counts from the last progress, or from when a wait began.
  if (!(c->events & EPOLLOUT)) c->write_progress_ns = NowNs();
  while (c->unsent() > 0) {
    const ssize_t n = ::send(c->fd, c->out.data() + c->out_off, c->unsent(), MSG_NOSIGNAL);
    if (n > 0) {
      c->out_off += static_cast<size_t>(n);
      c->write_progress_ns = NowNs();
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    CloseConn(c);  // the client is gone
    return;
  }
  if (c->unsent() == 0) {
    c->out.clear();
    c->out_off = 0;
  } else if (c->out_off > (1u << 16) && c->out_off * 2 > c->out.size()) {
    c->out.erase(0, c->out_off);
    c->out_off = 0;
  }
  if (c->stream && c->stream->paused && c->unsent() < kClientHighWater / 2) {
    LoopStream& s = *c->stream;
    s.paused = false;
    s.up_events = EPOLLIN | EPOLLRDHUP;
    epoll_event ev{};
    ev.events = s.up_events;
    ev.data.u64 = s.up_token;
    ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, s.up->fd(), &ev);
    PumpUpstream(c);
    if (c->dead) return;
  }
  if (c->reply) {
    std::lock_guard<std::mutex> lock(c->reply->mu);
    c->reply->loop_backlog = c->unsent();
    c->reply->cv.notify_all();
  }
  if (c->state == ClientConn::State::kClosing && c->unsent() == 0) {
    CloseConn(c);
    return;
  }
  UpdateClientEvents(c);
  Arm(c);
}

void Gateway::Impl::OnClientEvent(ClientConn* c, uint32_t events) {
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) ReadClient(c, events);
  if (c->dead) return;
  if (events & EPOLLOUT) Flush(c);
}

void Gateway::Impl::ReadClient(ClientConn* c, uint32_t events) {
  char buf[16 * 1024];
  bool eof = false;
  while (c->in.size() < ReadLimit(c)) {
    const ssize_t n = ::recv(c->fd, buf, sizeof buf, 0);
    if (n > 0) {
      if (c->state == ClientConn::State::kHead && c->in.empty()) c->head_start_ns = NowNs();
      c->in.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    eof = true;  // closed (0) or reset
    break;
  }
  // The peer hung up, though unread bytes (beyond the read limit) remain.
  if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) eof = true;
  if (eof) {
    // A client that hangs up mid-request or mid-response is gone: its stream
    // (if any) is cancelled upstream. One that half-closes after a complete
    // request is not supported (rare; curl and the SDKs do not).
    CloseConn(c);
    return;
  }
  if (c->state == ClientConn::State::kHead || c->state == ClientConn::State::kBody) ProcessInput(c);
  if (c->dead) return;
  UpdateClientEvents(c);
  Arm(c);
}

int64_t Gateway::Impl::DeadlineOf(const ClientConn* c) const {
  int64_t d = 0;
  auto take = [&d](int64_t x) {
    if (x > 0 && (d == 0 || x < d)) d = x;
  };
  switch (c->state) {
    case ClientConn::State::kHead:
      if (c->in.empty())
        take(c->idle_since_ns + options.keep_alive_timeout_ms * 1000000);
      else
        take(c->head_start_ns + options.header_timeout_ms * 1000000);
      break;
    case ClientConn::State::kBody:
      take(c->body_start_ns + options.body_timeout_ms * 1000000);
      break;
    default:
      break;
  }
  if (c->unsent() > 0) take(c->write_progress_ns + options.write_timeout_ms * 1000000);
  if (c->stream) take(StreamDeadline(*c->stream));
  return d;
}

void Gateway::Impl::ScanDeadlines(int64_t now) {
  next_scan_ns = now + 1000000000;  // at least once a second
  std::vector<ClientConn*> due;
  for (auto& [token, c] : conns) {
    const int64_t d = DeadlineOf(c.get());
    if (d > 0 && d <= now)
      due.push_back(c.get());
    else if (d > 0 && d < next_scan_ns)
      next_scan_ns = d;
  }
  for (ClientConn* c : due) {
    if (c->dead) continue;
    if (c->unsent() > 0 && now >= c->write_progress_ns + options.write_timeout_ms * 1000000) {
      // The client does not read: give up on it (its stream is cancelled).
      CloseConn(c);
      continue;
    }
    // A request that did not arrive in time: 408, then close.
    auto request_timeout = [&](const char* part, int64_t limit_ms) {
      WriteSimple(c, 408, "application/json",
                  OpenAiError(std::string("the request ") + part + " did not arrive within " +
                                  std::to_string(limit_ms) + " ms",
                              "invalid_request_error", 408),
                  "", true);
    };
    if (c->state == ClientConn::State::kHead) {
      if (c->in.empty()) {
        CloseConn(c);  // idle keep-alive connection
      } else {
        request_timeout("headers", options.header_timeout_ms);
      }
      continue;
    }
    if (c->state == ClientConn::State::kBody) {
      request_timeout("body", options.body_timeout_ms);
      continue;
    }
    if (c->stream) OnStreamDeadline(c, now);
    if (!c->dead) Arm(c);
  }
}

void Gateway::Impl::Loop() {
  std::vector<epoll_event> events(256);
  next_scan_ns = NowNs() + 1000000000;
  while (!stopping.load(std::memory_order_relaxed)) {
    const int64_t now0 = NowNs();
    const int64_t wait_ns = std::max<int64_t>(next_scan_ns - now0, 0);
    const int timeout_ms = static_cast<int>(std::min<int64_t>((wait_ns + 999999) / 1000000, 1000));
    const int n = ::epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), timeout_ms);
    if (n < 0 && errno != EINTR) {
      OCTET_LOG(ERROR) << "gateway: epoll_wait failed: " << std::strerror(errno);
      break;
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t token = events[i].data.u64;
      const uint32_t ev = events[i].events;
      if (token == kListenToken) {
        Accept();
      } else if (token == kWakeToken) {
        uint64_t count;
        [[maybe_unused]] ssize_t r = ::read(wake_fd, &count, sizeof count);
        TakeWorkerNews();
      } else if (auto it = conns.find(token); it != conns.end()) {
        OnClientEvent(it->second.get(), ev);
      } else if (auto up = upstream_owner.find(token); up != upstream_owner.end()) {
        OnUpstreamEvent(up->second, ev);
      }
    }
    const int64_t now = NowNs();
    if (now >= next_scan_ns) ScanDeadlines(now);
    graveyard.clear();
    dead_streams.clear();
  }
  // Stopping: every connection closes; streams are cancelled upstream.
  std::vector<ClientConn*> all;
  for (auto& [token, c] : conns) all.push_back(c.get());
  for (ClientConn* c : all) CloseConn(c);
  graveyard.clear();
  dead_streams.clear();
}

}  // namespace octet::router
