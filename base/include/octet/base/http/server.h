// An HTTP/1.1 server core for clients that cannot be trusted: one event-loop
// thread (epoll, non-blocking sockets) owns every connection; a bounded pool
// of worker threads runs what blocks. What each request means is the
// Handler's business; this class owns the protocol and its limits:
//
//   - request heads parsed by ParseRequestHead (request.h), bodies framed by
//     Content-Length or chunked; keep-alive and pipelined requests answered in
//     order (the next request is read only after the current answer is queued);
//   - limits: a head above max_head_bytes is answered 431, a body above the
//     handler's MaxBodyBytes() 413 before any of it is read; then the
//     connection closes;
//   - deadlines on every wait: the head (from its first byte), the body, an
//     idle keep-alive connection, and a client that reads nothing for
//     write_timeout_ms; a late head or body gets 408 and the connection closes;
//   - back-pressure: a worker's writes block (up to write_timeout_ms) while the
//     client has more than kHighWater bytes unsent;
//   - the listening socket of listener.h (no SO_REUSEPORT, SOMAXCONN).
//
// Threads: Handler callbacks and every Server method taking a Connection run
// on the loop thread; a Responder is used from one worker thread; Start and
// Stop from the owner's thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "octet/base/http/request.h"
#include "octet/base/http/response.h"
#include "octet/base/status.h"
#include "octet/base/task_threads.h"
#include "octet/base/thread_annotations.h"

namespace octet::http {

struct ServerOptions {
  std::string name = "http";              // in log lines, errors and the loop thread's name
  size_t max_head_bytes = 64 * 1024;      // request line + headers; more: 431
  int64_t head_timeout_ms = 10'000;       // first byte of a request -> end of its head; then 408
  int64_t body_timeout_ms = 60'000;       // end of the head -> end of the body; then 408
  int64_t keep_alive_timeout_ms = 5'000;  // an idle connection is closed after this
  int64_t write_timeout_ms = 30'000;      // a client that reads nothing this long is dropped
  size_t max_workers = 256;               // worker threads; more hand-offs wait in the queue
  // The body (and its content type) of the server's own answers: 400, 408,
  // 413, 417, 431, 501, 505. Default: {"error": {"message", "type", "code"}}.
  std::function<std::string(int status, const std::string& message)> error_body;
  std::string error_content_type = "application/json";
};

class Server;
struct ReplyChannel;

// One client connection. Owned by the server, used on the loop thread only;
// valid until Handler::OnClose returns.
class Connection {
 public:
  // Per-connection state a handler keeps (a proxied stream, an id). The
  // server destroys it with the connection.
  struct Extension {
    virtual ~Extension() = default;
  };

  uint64_t id() const { return id_; }
  const std::string& peer() const { return peer_; }
  // The request being answered (complete once OnRequest is called).
  Request& request() { return req_; }
  const Request& request() const { return req_; }
  // Bytes queued for the client and not yet sent.
  size_t unsent() const { return out_.size() - out_off_; }
  bool closed() const { return dead_; }
  std::unique_ptr<Extension> ext;

 private:
  friend class Server;
  enum class State {
    kHead,     // reading a request head (idle when `in_` is empty)
    kBody,     // reading the body of `req_`
    kBusy,     // `req_` is being answered
    kClosing,  // flushing the last response, then closing
  };
  uint64_t id_ = 0;
  int fd_ = -1;
  std::string peer_;
  State state_ = State::kHead;
  Request req_;
  std::string in_;  // received, not yet consumed (the head is removed once parsed)
  size_t head_scan_ = 0;
  std::unique_ptr<ChunkedDecoder> chunked_;  // kBody of a chunked request
  std::string out_;                          // to send: [out_off_, out_.size())
  size_t out_off_ = 0;
  uint32_t events_ = 0;  // epoll interest
  int64_t idle_since_ns_ = 0;
  int64_t head_start_ns_ = 0;
  int64_t body_start_ns_ = 0;
  int64_t write_progress_ns_ = 0;
  bool dead_ = false;
  bool processing_ = false;              // inside ProcessInput (Finish does not re-enter it)
  std::shared_ptr<ReplyChannel> reply_;  // a worker's response in progress
};

// What a worker thread answers through; from one thread at a time. Every
// call after the client has gone is a no-op that returns false.
class Responder {
 public:
  // The whole response: `body` framed by Content-Length (left out for HEAD).
  void Send(int status, const Headers& headers, std::string_view body);
  // A streamed response: the head now, then Write() each piece and End().
  // Chunked for HTTP/1.1 clients; for HTTP/1.0 the end of the connection
  // ends the body.
  bool BeginStream(int status, const Headers& headers);
  // Blocks while the client has more than Server::kHighWater bytes unsent, up
  // to write_timeout_ms; false when the client is gone or did not read.
  bool Write(std::string_view data);
  // Ends the stream; `complete` false: the body was cut short, the
  // connection closes so the client can tell.
  void End(bool complete);
  bool client_gone() const;
  // Close the connection after this response.
  void CloseAfter() { close_after_ = true; }

 private:
  friend class Server;
  Responder(Server* server, uint64_t conn_id, std::shared_ptr<ReplyChannel> channel, bool http11,
            bool keep_alive, bool head_only)
      : server_(server),
        conn_id_(conn_id),
        channel_(std::move(channel)),
        http11_(http11),
        keep_alive_(keep_alive),
        head_only_(head_only) {}
  void Post(std::string bytes, bool finished, bool close);
  Server* server_;
  uint64_t conn_id_;
  std::shared_ptr<ReplyChannel> channel_;
  bool http11_, keep_alive_, head_only_;
  bool close_after_ = false;
  bool streaming_ = false;
  bool ended_ = false;
};

// What the requests mean. Every callback runs on the loop thread and must not block.
class Handler {
 public:
  virtual ~Handler() = default;
  // The body limit for the next request (read per request: a policy may change it).
  virtual uint64_t MaxBodyBytes() = 0;
  // A head was parsed; its body is not read yet. Return false after answering
  // (e.g. 401): the connection then closes after the answer, the body unread.
  virtual bool OnHead(Connection* c) { return true; }
  // The request is complete (c->request().body holds the body). Answer with
  // Server::Respond, Server::Write + Server::Finish, or Server::HandToWorker.
  virtual void OnRequest(Connection* c) = 0;
  // The server refused a request with `status` (its own 4xx/5xx answers).
  virtual void OnRefused(Connection* c, int status) {}
  // The connection is closing (client gone, deadline, Stop): drop its work.
  virtual void OnClose(Connection* c) {}
  // Output to the client was flushed (unsent() may have dropped).
  virtual void OnFlushed(Connection* c) {}
  // A deadline of the handler's own for `c` (NowNs clock; 0: none), and what
  // to do when it passes.
  virtual int64_t ConnectionDeadline(const Connection* c) { return 0; }
  virtual void OnConnectionDeadline(Connection* c, int64_t now_ns) {}
  // Events on a file descriptor the handler watches for `c` (Server::Watch).
  virtual void OnWatched(Connection* c, uint64_t token, uint32_t events) {}
  // After each round of events (a safe place to free what callbacks retired).
  virtual void AfterEvents() {}
};

class Server {
 public:
  // Bytes a client may have queued and unsent before workers' writes block
  // (and before a handler should stop producing; see Connection::unsent).
  static constexpr size_t kHighWater = 256 * 1024;

  Server(ServerOptions options, Handler* handler);
  ~Server();  // Stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Listens on host:port (listener.h; 0: any free port) and starts the loop thread.
  Status Start(const std::string& host, int port);
  int port() const { return port_; }
  // Stops accepting, closes every connection (OnClose), waits for the
  // workers to finish what they run, joins every thread. Idempotent.
  void Stop();
  // Stop() after a drain of at most `drain_ms`: no new connections; the
  // requests being answered finish and their answers reach the clients, each
  // connection closing after its answer (an idle one at once). What is still
  // in progress at the deadline is cut as by Stop().
  void Stop(int64_t drain_ms);

  // ---- Loop thread only.
  // A whole response to c's request; closes after it when `close` or the client asked.
  void Respond(Connection* c, int status, const Headers& headers, std::string_view body,
               bool close = false);
  // An error answer in options.error_body's format.
  void RespondError(Connection* c, int status, const std::string& message, bool close = false);
  // Queues bytes of a response the handler frames itself (a relayed stream) and flushes.
  void Write(Connection* c, std::string_view bytes);
  // The response to c's request is wholly queued: then the next request (or close).
  void Finish(Connection* c, bool close);
  void Close(Connection* c);
  // Runs `work` on a worker thread with a Responder for c's request (the
  // request is moved into the closure's argument).
  void HandToWorker(Connection* c, std::function<void(Request&, Responder&)> work);
  // Watches another file descriptor on the loop for `c` (events: EPOLLIN...);
  // returns its token for OnWatched. SetWatchEvents with 0 stops watching it
  // for now (the token stays c's); Unwatch forgets it.
  uint64_t Watch(Connection* c, int fd, uint32_t events);
  void SetWatchEvents(uint64_t token, int fd, uint32_t events);
  void Unwatch(uint64_t token, int fd);

 private:
  friend class Responder;
  struct Watched {
    Connection* conn;
    int fd;
    uint32_t events;
  };

  void Loop();
  void Wake();
  void Accept();
  void OnClientEvent(Connection* c, uint32_t events);
  void ReadClient(Connection* c, uint32_t events);
  size_t ReadLimit(const Connection* c) const;
  void ProcessInput(Connection* c);
  void ProcessRequests(Connection* c);
  bool ReadBody(Connection* c);  // true: the body is complete
  void Refuse(Connection* c, int status, const std::string& message);
  void Flush(Connection* c);
  void UpdateEvents(Connection* c);
  void SetEvents(int fd, uint64_t token, uint32_t* current, uint32_t wanted);
  void CloseNow(Connection* c);
  // Draining (Stop(drain_ms)): stop accepting, close the idle connections;
  // true once none is left.
  bool Drain();
  void TakeWorkerNews();
  void ScanDeadlines(int64_t now);
  int64_t DeadlineOf(const Connection* c) const;
  void Arm(const Connection* c);
  void Notify(uint64_t conn_id);  // any thread

  ServerOptions options_;
  Handler* handler_;
  TaskThreads workers_;
  int port_ = 0;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: workers' replies, Stop()
  std::thread loop_thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> drain_until_ns_{0};  // Stop(drain_ms): the drain's deadline
  bool started_ = false, stopped_ = false;

  // Loop thread only.
  static constexpr uint64_t kListenToken = 1, kWakeToken = 2;
  uint64_t next_token_ = 16;
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> conns_;  // by id (= epoll token)
  std::unordered_map<uint64_t, Watched> watched_;                    // by token
  std::vector<std::unique_ptr<Connection>> graveyard_;               // closed this round
  int64_t next_scan_ns_ = 0;
  bool draining_ = false;  // no longer accepting; connections close after their answer

  Mutex notify_mu_;
  std::vector<uint64_t> notified_ GUARDED_BY(notify_mu_);  // connections with worker news
};

}  // namespace octet::http
