#include "hardened_http.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace octet::engine {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Threads are started when a task finds none idle (up to max) and exit after
// a while without work (down to min).
class GrowingPool : public httplib::TaskQueue {
 public:
  GrowingPool(int min_threads, int max_threads)
      : min_(std::max(1, min_threads)), max_(std::max(min_, max_threads)) {
    std::lock_guard<std::mutex> lock(mu_);
    for (int i = 0; i < min_; ++i) SpawnLocked();
  }
  ~GrowingPool() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    tasks_.push_back(std::move(fn));
    if (idle_ < static_cast<int>(tasks_.size()) && threads_ < max_) SpawnLocked();
    cv_.notify_one();
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_ && threads_ == 0) return;
      stopping_ = true;
    }
    cv_.notify_all();
    std::unique_lock<std::mutex> lock(mu_);
    // Every wait of a worker has a deadline (the server's timeouts), so this ends.
    exited_.wait(lock, [this] { return threads_ == 0; });
  }

 private:
  void SpawnLocked() {
    ++threads_;
    std::thread([this] { Work(); }).detach();
  }

  void Work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      ++idle_;
      const bool woke = cv_.wait_for(lock, std::chrono::seconds(30),
                                     [this] { return stopping_ || !tasks_.empty(); });
      --idle_;
      if (!tasks_.empty()) {
        auto fn = std::move(tasks_.front());
        tasks_.pop_front();
        lock.unlock();
        fn();
        lock.lock();
        continue;
      }
      if (stopping_ || (!woke && threads_ > min_)) break;
    }
    --threads_;
    exited_.notify_all();
  }

  const int min_, max_;
  std::mutex mu_;
  std::condition_variable cv_, exited_;
  std::deque<std::function<void()>> tasks_;
  int threads_ = 0;
  int idle_ = 0;
  bool stopping_ = false;
};

thread_local RequestContext t_request;
thread_local int64_t* t_read_deadline = nullptr;  // the connection's, while it runs here
thread_local const HardenedLimits* t_limits = nullptr;

// One connection's socket with a read buffer that lives as long as the
// connection (pipelined requests stay in it).
class ConnStream : public httplib::Stream {
 public:
  ConnStream(int fd, const HardenedLimits& l, std::function<bool()> running)
      : fd_(fd), limits_(l), running_(std::move(running)) {}

  bool is_readable() const override {
    return pos_ < buf_.size() || Poll(POLLIN, limits_.idle_read_ms) > 0;
  }
  bool is_writable() const override { return Poll(POLLOUT, limits_.write_timeout_ms) > 0; }

  ssize_t read(char* ptr, size_t size) override {
    if (pos_ >= buf_.size()) {
      if (!Fill()) return -1;
    }
    const size_t n = std::min(size, buf_.size() - pos_);
    std::memcpy(ptr, buf_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (Poll(POLLOUT, limits_.write_timeout_ms) <= 0) return -1;
    for (;;) {
      const ssize_t n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      return n;
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) Describe(addr, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) Describe(addr, ip, port);
  }
  socket_t socket() const override { return fd_; }

  bool buffered() const { return pos_ < buf_.size(); }
  int64_t deadline_ms = 0;  // reads fail once this passes (0: none)

  // Waits up to `ms` for the next request's first byte; false on timeout,
  // close or when `running` turns false.
  bool WaitForRequest(int ms, const std::function<bool()>& running) {
    if (buffered()) return true;
    const int64_t end = NowMs() + ms;
    while (running()) {
      const int64_t left = end - NowMs();
      if (left <= 0) return false;
      const int r = Poll(POLLIN, static_cast<int>(std::min<int64_t>(left, 200)));
      if (r < 0) return false;
      if (r > 0) return true;
    }
    return false;
  }

 private:
  int Poll(short events, int timeout_ms) const {
    pollfd p{fd_, events, 0};
    for (;;) {
      const int r = ::poll(&p, 1, timeout_ms);
      if (r < 0 && errno == EINTR) continue;
      if (r > 0 && (p.revents & (POLLERR | POLLNVAL))) return -1;
      return r;
    }
  }

  bool Fill() {
    // Waits in slices so that a server stopping does not wait out a slow client.
    const int64_t idle_end = NowMs() + limits_.idle_read_ms;
    for (;;) {
      int64_t end = idle_end;
      if (deadline_ms > 0) end = std::min(end, deadline_ms);
      const int64_t left = end - NowMs();
      if (left <= 0 || !running_()) return false;
      const int r = Poll(POLLIN, static_cast<int>(std::min<int64_t>(left, 200)));
      if (r < 0) return false;
      if (r > 0) break;
    }
    buf_.resize(16384);
    pos_ = 0;
    for (;;) {
      const ssize_t n = ::recv(fd_, buf_.data(), buf_.size(), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        buf_.clear();
        return false;
      }
      buf_.resize(static_cast<size_t>(n));
      return true;
    }
  }

  static void Describe(const sockaddr_storage& addr, std::string& ip, int& port) {
    char host[INET6_ADDRSTRLEN] = {0};
    if (addr.ss_family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
      ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
      port = ntohs(a->sin_port);
    } else if (addr.ss_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
      ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
      port = ntohs(a->sin6_port);
    }
    ip = host;
  }

  int fd_;
  const HardenedLimits& limits_;
  std::function<bool()> running_;
  std::string buf_;
  size_t pos_ = 0;
};

}  // namespace

RequestContext& CurrentRequest() { return t_request; }

HardenedServer::HardenedServer(HardenedLimits limits) : limits_(limits) {
  const int lo = limits_.min_threads, hi = limits_.max_threads;
  new_task_queue = [lo, hi] { return new GrowingPool(lo, hi); };
  set_keep_alive_timeout(limits_.keep_alive_ms / 1000);
  set_read_timeout(limits_.idle_read_ms / 1000, (limits_.idle_read_ms % 1000) * 1000);
  set_write_timeout(limits_.write_timeout_ms / 1000, (limits_.write_timeout_ms % 1000) * 1000);
  // The library's default adds SO_REUSEPORT: a second server on the port
  // would start and take half the connections.
  set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
}

void HardenedServer::HeadDone() {
  if (t_read_deadline && t_limits) *t_read_deadline = NowMs() + t_limits->body_timeout_ms;
}

Status HardenedServer::Bind(const std::string& host, int port, int* bound) {
  int p = 0;
  if (port == 0) {
    p = bind_to_any_port(host);
  } else if (bind_to_port(host, port)) {
    p = port;
  }
  if (p <= 0) {
    // Say why: try the same bind once more to learn errno.
    std::string why = "not an address of this machine?";
    addrinfo hints{}, *ai = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &ai) == 0 && ai) {
      const int fd = ::socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
      if (fd >= 0) {
        int yes = 1;
        ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
        if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
          why = errno == EADDRINUSE ? "the port is in use (another server listens there)"
                                    : std::strerror(errno);
        }
        ::close(fd);
      }
      ::freeaddrinfo(ai);
    }
    return UnavailableError("cannot listen on " + host + ":" + std::to_string(port) + ": " + why);
  }
  // The library listens with a backlog of 5; listen() again raises it.
  const socket_t s = svr_sock_;
  if (s != INVALID_SOCKET) ::listen(s, SOMAXCONN);
  *bound = p;
  return Status::Ok();
}

bool HardenedServer::process_and_close_socket(socket_t sock) {
  auto running = [this] { return svr_sock_ != INVALID_SOCKET; };
  ConnStream strm(sock, limits_, running);
  t_read_deadline = &strm.deadline_ms;
  t_limits = &limits_;
  bool ok = true;
  for (size_t count = 0; count < limits_.max_requests_per_connection; ++count) {
    const int wait = count == 0 ? limits_.head_timeout_ms : limits_.keep_alive_ms;
    strm.deadline_ms = 0;
    if (!strm.WaitForRequest(wait, running)) break;
    strm.deadline_ms = NowMs() + limits_.head_timeout_ms;
    t_request = RequestContext();
    bool closed = false;
    const bool last = count + 1 == limits_.max_requests_per_connection || !running();
    ok = process_request(strm, last, closed, nullptr);
    if (!ok || closed || last || t_request.close_after_reply) break;
  }
  t_read_deadline = nullptr;
  t_limits = nullptr;
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

}  // namespace octet::engine
