// The event loop: accept, read, parse, flush, close, deadlines; and the
// hand-off of a request to a worker whose response comes back through the
// loop (ReplyChannel), so that only the loop thread ever touches a socket.
#include "octet/base/http/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>

#include "octet/base/deadline.h"
#include "octet/base/http/listener.h"
#include "octet/base/log.h"

namespace octet::http {

// A worker's response on its way to the client. The worker appends bytes to
// `pending` and pokes the loop; the loop moves them to the connection and
// reports its own backlog back, so a worker blocks (bounded) while the client
// does not read.
struct ReplyChannel {
  Mutex mu;
  std::condition_variable cv;
  std::string pending GUARDED_BY(mu);       // bytes for the loop to take
  size_t loop_backlog GUARDED_BY(mu) = 0;   // bytes the loop holds unsent
  bool finished GUARDED_BY(mu) = false;     // the whole response is in `pending` (or was taken)
  bool close_after GUARDED_BY(mu) = false;  // close the connection after this response
  bool client_gone GUARDED_BY(mu) = false;  // the connection closed
};

namespace {

// Bytes read ahead of the request being served (pipelined requests).
constexpr size_t kMaxReadAhead = 64 * 1024;

std::string DefaultErrorBody(int status, const std::string& message) {
  std::string escaped;
  for (char ch : message) {
    if (ch == '"' || ch == '\\') {
      escaped += '\\';
      escaped += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      escaped += ' ';
    } else {
      escaped += ch;
    }
  }
  return "{\"error\":{\"message\":\"" + escaped +
         "\",\"type\":\"invalid_request_error\",\"code\":" + std::to_string(status) + "}}";
}

}  // namespace

// ---- Responder (worker threads) ------------------------------------------------

void Responder::Post(std::string bytes, bool finished, bool close) {
  {
    MutexLock lock(channel_->mu);
    channel_->pending += bytes;
    channel_->finished = channel_->finished || finished;
    channel_->close_after = channel_->close_after || close;
  }
  server_->Notify(conn_id_);
}

bool Responder::client_gone() const {
  MutexLock lock(channel_->mu);
  return channel_->client_gone;
}

void Responder::Send(int status, const Headers& headers, std::string_view body) {
  if (ended_ || streaming_) return;
  ended_ = true;
  const bool close = close_after_ || !keep_alive_;
  std::string bytes = ResponseHead(status, headers, BodyFraming::kLength, body.size(), close);
  if (!head_only_) bytes.append(body);
  Post(std::move(bytes), true, close);
}

bool Responder::BeginStream(int status, const Headers& headers) {
  if (ended_ || streaming_) return false;
  streaming_ = true;
  // A streamed body to an HTTP/1.0 client is delimited by closing the connection.
  const bool close = close_after_ || !keep_alive_ || !http11_;
  close_after_ = close;
  Post(ResponseHead(status, headers, http11_ ? BodyFraming::kChunked : BodyFraming::kClose, 0,
                    close),
       false, close);
  return !client_gone();
}

bool Responder::Write(std::string_view data) {
  if (!streaming_ || ended_) return false;
  if (data.empty() || head_only_) return !client_gone();
  {
    ReplyChannel& ch = *channel_;
    MutexLock lock(ch.mu);
    const auto limit = std::chrono::milliseconds(server_->options_.write_timeout_ms);
    const bool room = lock.WaitFor(ch.cv, limit, [&]() REQUIRES(ch.mu) {
      return ch.client_gone || ch.pending.size() + ch.loop_backlog < Server::kHighWater;
    });
    if (!room || ch.client_gone) return false;
  }
  Post(http11_ ? ChunkFrame(data) : std::string(data), false, false);
  return true;
}

void Responder::End(bool complete) {
  if (ended_) return;
  ended_ = true;
  if (!streaming_) {  // nothing was sent: an empty 500 rather than a hung client
    Post(ResponseHead(500, {}, BodyFraming::kLength, 0, true), true, true);
    return;
  }
  if (complete && http11_ && !head_only_) {
    Post(std::string(kLastChunk), true, close_after_);
  } else {
    Post(std::string(), true, close_after_ || !complete);
  }
}

// ---- Server: start, stop ---------------------------------------------------------

Server::Server(ServerOptions options, Handler* handler)
    : options_(std::move(options)), handler_(handler) {
  options_.max_head_bytes = std::max<size_t>(options_.max_head_bytes, 1024);
  if (!options_.error_body) options_.error_body = DefaultErrorBody;
  workers_.set_max_threads(std::max<size_t>(options_.max_workers, 1));
}

Server::~Server() { Stop(); }

Status Server::Start(const std::string& host, int port) {
  if (started_) return FailedPreconditionError(options_.name + ": already started");
  // A client that disconnects must cost a failed write, not the process.
  std::signal(SIGPIPE, SIG_IGN);
  OCTET_ASSIGN_OR_RETURN(ListenSocket ls, Listen(options_.name, host, port));
  listen_fd_ = ls.fd;
  port_ = ls.port;
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    const std::string why = std::strerror(errno);
    ::close(listen_fd_);
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
    listen_fd_ = epoll_fd_ = wake_fd_ = -1;
    return UnavailableError(options_.name + ": cannot create its event loop: " + why);
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenToken;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.u64 = kWakeToken;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  started_ = true;
  loop_thread_ = std::thread([this] {
    const std::string thread_name = (options_.name + "-loop").substr(0, 15);
    ::pthread_setname_np(::pthread_self(), thread_name.c_str());  // for top/perf
    Loop();
  });
  return Status();
}

void Server::Stop() {
  if (!started_ || stopped_) return;
  stopped_ = true;
  stopping_.store(true);
  Wake();
  if (loop_thread_.joinable()) loop_thread_.join();
  // Workers see their clients gone (CloseNow) and finish.
  workers_.Shutdown();
  ::close(listen_fd_);
  ::close(epoll_fd_);
  ::close(wake_fd_);
}

void Server::Stop(int64_t drain_ms) {
  if (!started_ || stopped_) return;
  if (drain_ms > 0) {
    drain_until_ns_.store(NowNs() + drain_ms * 1'000'000);
    Wake();
    // The loop ends once the last connection has closed, or at the deadline.
    if (loop_thread_.joinable()) loop_thread_.join();
  }
  Stop();
}

void Server::Wake() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

void Server::Notify(uint64_t conn_id) {
  {
    MutexLock lock(notify_mu_);
    notified_.push_back(conn_id);
  }
  Wake();
}

// ---- The loop ----------------------------------------------------------------------

void Server::Loop() {
  std::vector<epoll_event> events(256);
  next_scan_ns_ = NowNs() + 1'000'000'000;
  while (!stopping_.load(std::memory_order_relaxed)) {
    int64_t wake_ns = next_scan_ns_;
    if (const int64_t until = drain_until_ns_.load(std::memory_order_relaxed); until != 0) {
      if (Drain() || NowNs() >= until) break;
      wake_ns = std::min(wake_ns, until);
    }
    const int64_t wait_ns = std::max<int64_t>(wake_ns - NowNs(), 0);
    const int timeout_ms =
        static_cast<int>(std::min<int64_t>((wait_ns + 999'999) / 1'000'000, 1000));
    const int n =
        ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), timeout_ms);
    if (n < 0 && errno != EINTR) {
      OCTET_LOG(ERROR) << options_.name << ": epoll_wait failed: " << std::strerror(errno);
      break;
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t token = events[i].data.u64;
      const uint32_t ev = events[i].events;
      if (token == kListenToken) {
        if (!draining_) Accept();
      } else if (token == kWakeToken) {
        uint64_t count;
        [[maybe_unused]] ssize_t r = ::read(wake_fd_, &count, sizeof count);
        TakeWorkerNews();
      } else if (auto it = conns_.find(token); it != conns_.end()) {
        OnClientEvent(it->second.get(), ev);
      } else if (auto w = watched_.find(token); w != watched_.end()) {
        Connection* c = w->second.conn;
        if (!c->dead_) handler_->OnWatched(c, token, ev);
        if (!c->dead_) Arm(c);
      }
    }
    const int64_t now = NowNs();
    if (now >= next_scan_ns_) ScanDeadlines(now);
    handler_->AfterEvents();
    graveyard_.clear();
  }
  // Stopping: every connection closes; the handler cancels their work.
  std::vector<Connection*> all;
  for (auto& [id, c] : conns_) all.push_back(c.get());
  for (Connection* c : all) CloseNow(c);
  handler_->AfterEvents();
  graveyard_.clear();
}

bool Server::Drain() {
  if (!draining_) {
    draining_ = true;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
  }
  std::vector<Connection*> idle;
  for (auto& [id, c] : conns_) {
    if (c->state_ == Connection::State::kHead && c->in_.empty() && !c->reply_ && c->unsent() == 0) {
      idle.push_back(c.get());
    }
  }
  for (Connection* c : idle) CloseNow(c);
  handler_->AfterEvents();
  graveyard_.clear();
  return conns_.empty();
}

void Server::SetEvents(int fd, uint64_t token, uint32_t* current, uint32_t wanted) {
  if (*current == wanted) return;
  epoll_event ev{};
  ev.events = wanted;
  ev.data.u64 = token;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev);
  *current = wanted;
}

// Reading: while a request head or body is expected, or (bounded) ahead of
// the request being served, which also notices a client that hangs up.
// Writing: while bytes are queued.
void Server::UpdateEvents(Connection* c) {
  uint32_t wanted = EPOLLRDHUP;
  if (c->state_ != Connection::State::kClosing && c->in_.size() < ReadLimit(c)) wanted |= EPOLLIN;
  if (c->unsent() > 0) wanted |= EPOLLOUT;
  SetEvents(c->fd_, c->id_, &c->events_, wanted);
}

size_t Server::ReadLimit(const Connection* c) const {
  const uint64_t body =
      c->state_ == Connection::State::kBody && !c->req_.chunked ? c->req_.content_length : 0;
  return options_.max_head_bytes + kMaxReadAhead + static_cast<size_t>(body);
}

void Server::Accept() {
  while (true) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        OCTET_LOG(WARNING) << options_.name << ": accept failed: " << std::strerror(errno);
      }
      return;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto c = std::make_unique<Connection>();
    c->fd_ = fd;
    c->id_ = next_token_++;
    char host[INET6_ADDRSTRLEN] = {0};
    if (addr.ss_family == AF_INET)
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr, host, sizeof host);
    else if (addr.ss_family == AF_INET6)
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr, host, sizeof host);
    c->peer_ = host;
    c->idle_since_ns_ = NowNs();
    c->events_ = EPOLLIN | EPOLLRDHUP;
    epoll_event ev{};
    ev.events = c->events_;
    ev.data.u64 = c->id_;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    Arm(c.get());
    conns_.emplace(c->id_, std::move(c));
  }
}

void Server::OnClientEvent(Connection* c, uint32_t events) {
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) ReadClient(c, events);
  if (c->dead_) return;
  if (events & EPOLLOUT) Flush(c);
}

void Server::ReadClient(Connection* c, uint32_t events) {
  char buf[16 * 1024];
  bool eof = false;
  while (c->in_.size() < ReadLimit(c)) {
    const ssize_t n = ::recv(c->fd_, buf, sizeof buf, 0);
    if (n > 0) {
      if (c->state_ == Connection::State::kHead && c->in_.empty()) c->head_start_ns_ = NowNs();
      c->in_.append(buf, static_cast<size_t>(n));
      if (c->state_ == Connection::State::kBody && c->chunked_) break;  // decode as it comes
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    eof = true;  // closed (0) or reset
    break;
  }
  // The peer hung up, though unread bytes (beyond the read limit) may remain.
  if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) eof = true;
  if (eof) {
    // A client that hangs up mid-request or mid-response is gone; one that
    // half-closes after a complete request is not supported (curl and the
    // SDKs do not).
    CloseNow(c);
    return;
  }
  if (c->state_ == Connection::State::kHead || c->state_ == Connection::State::kBody)
    ProcessInput(c);
  if (c->dead_) return;
  UpdateEvents(c);
  Arm(c);
}

// ---- Requests ------------------------------------------------------------------------

void Server::Refuse(Connection* c, int status, const std::string& message) {
  handler_->OnRefused(c, status);
  if (c->dead_) return;
  RespondError(c, status, message, true);
}

void Server::ProcessInput(Connection* c) {
  if (c->processing_) return;
  c->processing_ = true;
  ProcessRequests(c);
  c->processing_ = false;
}

void Server::ProcessRequests(Connection* c) {
  while (!c->dead_) {
    if (c->state_ == Connection::State::kHead) {
      if (c->in_.empty()) return;
      const size_t from = c->head_scan_ > 3 ? c->head_scan_ - 3 : 0;
      const size_t end = c->in_.find("\r\n\r\n", from);
      // 431 once the head (complete or not yet) is past the limit.
      const size_t head_bytes = end == std::string::npos ? c->in_.size() : end + 4;
      if (head_bytes > options_.max_head_bytes) {
        Refuse(c, 431,
               "request headers are larger than " + std::to_string(options_.max_head_bytes) +
                   " bytes");
        return;
      }
      if (end == std::string::npos) {
        c->head_scan_ = c->in_.size();
        return;
      }
      const uint64_t max_body = handler_->MaxBodyBytes();
      ParseError err;
      c->req_ = Request();
      if (!ParseRequestHead(std::string_view(c->in_).substr(0, end), max_body, &c->req_, &err)) {
        Refuse(c, err.status, err.message);
        return;
      }
      c->req_.peer = c->peer_;
      c->in_.erase(0, end + 4);
      c->head_scan_ = 0;
      c->state_ = Connection::State::kBody;
      c->body_start_ns_ = NowNs();
      if (c->req_.chunked) c->chunked_ = std::make_unique<ChunkedDecoder>(max_body);
      if (!handler_->OnHead(c)) {
        // Answered without the body: the unread body must not be taken for
        // the next request.
        if (!c->dead_ && c->state_ != Connection::State::kClosing) Finish(c, true);
        return;
      }
      if (c->dead_) return;
      const bool body_missing = c->req_.chunked || c->in_.size() < c->req_.content_length;
      if (c->req_.expect_continue && body_missing &&
          (c->req_.chunked || c->req_.content_length > 0)) {
        c->out_ += "HTTP/1.1 100 Continue\r\n\r\n";
        Flush(c);
        if (c->dead_) return;
      }
    }
    if (c->state_ == Connection::State::kBody) {
      if (!ReadBody(c)) return;
      c->state_ = Connection::State::kBusy;
      handler_->OnRequest(c);
      continue;  // answered at once: the next pipelined request may follow
    }
    return;  // kBusy / kClosing: the next request waits
  }
}

bool Server::ReadBody(Connection* c) {
  if (!c->chunked_) {
    if (c->in_.size() < c->req_.content_length) return false;
    c->req_.body = c->in_.substr(0, c->req_.content_length);
    c->in_.erase(0, c->req_.content_length);
    return true;
  }
  size_t consumed = 0;
  const ChunkedDecoder::State st = c->chunked_->Feed(c->in_, &consumed, &c->req_.body);
  c->in_.erase(0, consumed);
  if (st == ChunkedDecoder::State::kError) {
    const ParseError err = c->chunked_->error();
    c->chunked_.reset();
    Refuse(c, err.status, err.message);
    return false;
  }
  if (st == ChunkedDecoder::State::kNeedMore) return false;
  c->chunked_.reset();
  return true;
}

void Server::Respond(Connection* c, int status, const Headers& headers, std::string_view body,
                     bool close) {
  if (c->dead_) return;
  close = close || !c->req_.keep_alive;
  c->out_ += ResponseHead(status, headers, BodyFraming::kLength, body.size(), close);
  if (c->req_.method != "HEAD") c->out_.append(body);
  Finish(c, close);
}

void Server::RespondError(Connection* c, int status, const std::string& message, bool close) {
  Respond(c, status, {{"Content-Type", options_.error_content_type}},
          options_.error_body(status, message), close);
}

void Server::Write(Connection* c, std::string_view bytes) {
  if (c->dead_) return;
  c->out_.append(bytes);
  Flush(c);
}

void Server::Finish(Connection* c, bool close) {
  if (c->dead_) return;
  c->reply_.reset();
  c->head_scan_ = 0;
  c->chunked_.reset();
  if (close || !c->req_.keep_alive || draining_) {
    c->state_ = Connection::State::kClosing;
  } else {
    c->state_ = Connection::State::kHead;
    c->req_ = Request();
    c->idle_since_ns_ = NowNs();
    c->head_start_ns_ = c->in_.empty() ? 0 : NowNs();
  }
  Flush(c);
  // A pipelined request already read is taken up now (from inside
  // ProcessInput, its loop does that).
  if (!c->dead_ && c->state_ == Connection::State::kHead && !c->in_.empty() && !c->processing_) {
    ProcessInput(c);
    if (!c->dead_) {
      UpdateEvents(c);
      Arm(c);
    }
  }
}

void Server::HandToWorker(Connection* c, std::function<void(Request&, Responder&)> work) {
  auto channel = std::make_shared<ReplyChannel>();
  c->reply_ = channel;
  const bool head_only = c->req_.method == "HEAD";
  auto responder = std::shared_ptr<Responder>(
      new Responder(this, c->id_, channel, c->req_.http11, c->req_.keep_alive, head_only));
  auto req = std::make_shared<Request>(std::move(c->req_));
  // The loop still needs the framing facts of the request it is answering.
  c->req_ = Request();
  c->req_.method = req->method;
  c->req_.http11 = req->http11;
  c->req_.keep_alive = req->keep_alive;
  workers_.Submit([work = std::move(work), req, responder] {
    work(*req, *responder);
    responder->End(true);  // a response not ended by `work` ends here
  });
}

void Server::TakeWorkerNews() {
  std::vector<uint64_t> ids;
  {
    MutexLock lock(notify_mu_);
    ids.swap(notified_);
  }
  for (uint64_t id : ids) {
    auto it = conns_.find(id);
    if (it == conns_.end()) continue;  // closed; CloseNow told the worker
    Connection* c = it->second.get();
    if (!c->reply_) continue;  // already finished
    std::string bytes;
    bool finished, close_after;
    {
      MutexLock lock(c->reply_->mu);
      bytes.swap(c->reply_->pending);
      finished = c->reply_->finished;
      close_after = c->reply_->close_after;
    }
    c->out_ += bytes;
    if (finished) {
      Finish(c, close_after);
    } else {
      Flush(c);
    }
  }
}

// ---- Output, closing --------------------------------------------------------------------

void Server::Flush(Connection* c) {
  if (c->dead_) return;
  // write_timeout_ms counts from the last progress, or from when a wait began.
  if (!(c->events_ & EPOLLOUT)) c->write_progress_ns_ = NowNs();
  while (c->unsent() > 0) {
    const ssize_t n = ::send(c->fd_, c->out_.data() + c->out_off_, c->unsent(), MSG_NOSIGNAL);
    if (n > 0) {
      c->out_off_ += static_cast<size_t>(n);
      c->write_progress_ns_ = NowNs();
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    CloseNow(c);  // the client is gone
    return;
  }
  if (c->unsent() == 0) {
    c->out_.clear();
    c->out_off_ = 0;
  } else if (c->out_off_ > (1u << 16) && c->out_off_ * 2 > c->out_.size()) {
    c->out_.erase(0, c->out_off_);
    c->out_off_ = 0;
  }
  handler_->OnFlushed(c);
  if (c->dead_) return;
  if (c->reply_) {
    MutexLock lock(c->reply_->mu);
    c->reply_->loop_backlog = c->unsent();
    c->reply_->cv.notify_all();
  }
  if (c->state_ == Connection::State::kClosing && c->unsent() == 0) {
    CloseNow(c);
    return;
  }
  UpdateEvents(c);
  Arm(c);
}

void Server::Close(Connection* c) { CloseNow(c); }

void Server::CloseNow(Connection* c) {
  if (c->dead_) return;
  c->dead_ = true;
  handler_->OnClose(c);
  if (c->reply_) {
    MutexLock lock(c->reply_->mu);
    c->reply_->client_gone = true;
    c->reply_->cv.notify_all();
  }
  for (auto it = watched_.begin(); it != watched_.end();) {
    if (it->second.conn == c) {
      if (it->second.events) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->second.fd, nullptr);
      it = watched_.erase(it);
    } else {
      ++it;
    }
  }
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd_, nullptr);
  ::close(c->fd_);
  auto it = conns_.find(c->id_);
  if (it != conns_.end()) {
    graveyard_.push_back(std::move(it->second));
    conns_.erase(it);
  }
}

// ---- Watched descriptors -------------------------------------------------------------------

uint64_t Server::Watch(Connection* c, int fd, uint32_t events) {
  const uint64_t token = next_token_++;
  watched_[token] = Watched{c, fd, 0};
  SetWatchEvents(token, fd, events);
  return token;
}

void Server::SetWatchEvents(uint64_t token, int fd, uint32_t events) {
  auto it = watched_.find(token);
  if (it == watched_.end()) return;
  Watched& w = it->second;
  if (w.events == events && w.fd == fd) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = token;
  if (events == 0) {
    if (w.events) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, w.fd, nullptr);
  } else if (w.events == 0 || w.fd != fd) {
    if (w.events && w.fd != fd) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, w.fd, nullptr);
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  } else {
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev);
  }
  w.fd = fd;
  w.events = events;
}

void Server::Unwatch(uint64_t token, int fd) {
  auto it = watched_.find(token);
  if (it == watched_.end()) return;
  if (it->second.events) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  watched_.erase(it);
}

// ---- Deadlines --------------------------------------------------------------------------------

void Server::Arm(const Connection* c) {
  const int64_t d = DeadlineOf(c);
  if (d > 0 && d < next_scan_ns_) next_scan_ns_ = d;
}

int64_t Server::DeadlineOf(const Connection* c) const {
  int64_t d = 0;
  auto take = [&d](int64_t x) {
    if (x > 0 && (d == 0 || x < d)) d = x;
  };
  switch (c->state_) {
    case Connection::State::kHead:
      if (c->in_.empty())
        take(c->idle_since_ns_ + options_.keep_alive_timeout_ms * 1'000'000);
      else
        take(c->head_start_ns_ + options_.head_timeout_ms * 1'000'000);
      break;
    case Connection::State::kBody:
      take(c->body_start_ns_ + options_.body_timeout_ms * 1'000'000);
      break;
    default:
      break;
  }
  if (c->unsent() > 0) take(c->write_progress_ns_ + options_.write_timeout_ms * 1'000'000);
  take(handler_->ConnectionDeadline(c));
  return d;
}

void Server::ScanDeadlines(int64_t now) {
  next_scan_ns_ = now + 1'000'000'000;  // at least once a second
  std::vector<Connection*> due;
  for (auto& [id, c] : conns_) {
    const int64_t d = DeadlineOf(c.get());
    if (d > 0 && d <= now)
      due.push_back(c.get());
    else if (d > 0 && d < next_scan_ns_)
      next_scan_ns_ = d;
  }
  for (Connection* c : due) {
    if (c->dead_) continue;
    if (c->unsent() > 0 && now >= c->write_progress_ns_ + options_.write_timeout_ms * 1'000'000) {
      CloseNow(c);  // the client does not read: give up on it (its work is cancelled)
      continue;
    }
    if (c->state_ == Connection::State::kHead) {
      if (c->in_.empty()) {
        CloseNow(c);  // an idle keep-alive connection
      } else if (now >= c->head_start_ns_ + options_.head_timeout_ms * 1'000'000) {
        Refuse(c, 408,
               "the request headers did not arrive within " +
                   std::to_string(options_.head_timeout_ms) + " ms");
      }
      continue;
    }
    if (c->state_ == Connection::State::kBody) {
      if (now >= c->body_start_ns_ + options_.body_timeout_ms * 1'000'000)
        Refuse(c, 408,
               "the request body did not arrive within " +
                   std::to_string(options_.body_timeout_ms) + " ms");
      continue;
    }
    const int64_t own = handler_->ConnectionDeadline(c);
    if (own > 0 && own <= now) handler_->OnConnectionDeadline(c, now);
    if (!c->dead_) Arm(c);
  }
}

}  // namespace octet::http
