// The gateway's internals, shared by its files and by nothing else: one
// proxied request (Exchange), a worker's reply on its way through the loop
// (WorkerReply), a streaming completion relayed by the loop (LoopStream), a
// client connection (ClientConn), the thread pools (TaskThreads) and
// Gateway::Impl. Impl's members are defined by responsibility:
//   gateway.cpp         start, stop; admission; the retry decisions both stream paths share
//   gateway_loop.cpp    the epoll event loop: accept, read, flush, close, deadlines
//   gateway_conn.cpp    a connection's request state machine: parse, dispatch, simple answers
//   gateway_worker.cpp  the worker-thread path: completions through httplib::Client, replies
//   gateway_admin.cpp   /v1/route, /v1/models, /health, /v1/router/policy, /v1/router/instances
//   gateway_stream.cpp  streaming completions relayed by the loop (LoopStream's state machine)
// Threads: see gateway.cpp's file comment; what each field is guarded by is
// written beside it.
#pragma once

#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "http_request.h"
#include "octet/base/log.h"
#include "octet/router/gateway.h"
#include "router_core.h"
#include "sse_token_counter.h"
#include "upstream_conn.h"

namespace octet::router {

using nlohmann::json;

constexpr size_t kMaxErrorBodyBytes = 1u << 20;
inline std::string Dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

inline std::string OpenAiError(const std::string& message, const std::string& type, int code) {
  return Dump(json{{"error", {{"message", message}, {"type", type}, {"code", code}}}});
}

inline std::string SseError(const std::string& message) {
  return "data: " + OpenAiError(message, "upstream_error", 502) + "\n\n";
}

// Bytes a client may have queued and unsent before the gateway stops reading
// its upstream (loop streams) or blocks its worker's writes.
constexpr size_t kClientHighWater = 256 * 1024;
// Bytes read ahead of the request being served (pipelined requests).
constexpr size_t kMaxReadAhead = 64 * 1024;
// Upstream exchanges run on these threads. Threads are started on demand and
// kept for reuse (a stream costs a thread handoff, not a thread creation).
// Threads started on demand, at most max_threads (more tasks wait in the
// queue), and kept for reuse: a task costs a thread hand-off, not a creation.
class TaskThreads {
 public:
  explicit TaskThreads(size_t max_threads = static_cast<size_t>(-1)) : max_threads_(max_threads) {}
  ~TaskThreads() { Shutdown(); }
  void set_max_threads(size_t n) { max_threads_ = std::max<size_t>(n, 1); }
  void Submit(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(fn));
    if (idle_ >= static_cast<int>(tasks_.size()) || threads_.size() >= max_threads_) {
      cv_.notify_one();
    } else {
      threads_.emplace_back([this] { Work(); });
    }
  }
  // Runs what is queued, then joins every thread.
  void Shutdown() {
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutdown_ = true;
      threads.swap(threads_);
    }
    cv_.notify_all();
    for (auto& t : threads) t.join();
  }

 private:
  void Work() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      ++idle_;
      cv_.wait(lock, [this] { return !tasks_.empty() || shutdown_; });
      --idle_;
      if (tasks_.empty()) return;  // shutting down
      std::function<void()> fn = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }
  size_t max_threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;  // guarded by mu_
  std::vector<std::thread> threads_;         // guarded by mu_
  int idle_ = 0;                             // threads waiting for a task; guarded by mu_
  bool shutdown_ = false;                    // guarded by mu_
};
// A worker's response on its way to the client through the loop. The worker
// appends bytes to `pending` and pokes the loop; the loop moves them to the
// connection and reports its own backlog back, so a worker blocks (bounded)
// while the client does not read.
struct WorkerReply {
  std::mutex mu;
  std::condition_variable cv;
  std::string pending;        // bytes for the loop to take; guarded by mu
  size_t loop_backlog = 0;    // bytes the loop holds unsent; guarded by mu
  bool finished = false;      // the whole response is in `pending` (or was taken); guarded by mu
  bool close_after = false;   // close the connection after this response; guarded by mu
  bool client_gone = false;   // the connection closed; guarded by mu
};

// One proxied request. For a worker stream it is shared by the worker thread
// (handler, then content provider), the upstream thread, and the response's
// releaser; a loop stream (LoopStream) uses only its request fields.
//
// Worker-stream hand-off: the handler returns as soon as the upstream has
// answered 2xx headers, so our headers go out while the model is still
// prefilling. The provider then publishes its DataSink and blocks; the
// upstream thread writes every body chunk through it. Bytes that arrive
// before the sink is published wait in `pending`. Nothing is retried once a
// body byte has been forwarded.
struct Exchange {
  RoutedRequest rr;
  json body;                  // the client's request (model rewritten per pool)
  std::string original_body;  // sent as-is when the pool does not rename the model
  std::string path;
  httplib::Headers forward_headers;
  bool stream = false;
  int64_t start_ns = 0;
  int64_t keepalive_ms = 0;

  std::mutex mu;  // guards the state below
  std::condition_variable cv;
  bool headers_ready = false;         // status and content type are decided (2xx, or final)
  bool upstream_done = false;         // the upstream thread has finished
  bool cancelled = false;             // the client left or the gateway stops
  bool failed_after_headers = false;  // ended badly after our headers went out
  int status = 0;
  std::string content_type;
  std::string error_message;  // for the SSE error event when failed_after_headers
  std::string unary_body;     // non-streaming: the whole response
  httplib::Client* active_client = nullptr;

  std::mutex sink_mu;  // guards the sink, pending bytes and everything written to the client
  httplib::DataSink* sink = nullptr;  // set while the provider runs
  std::deque<std::string> pending;
  bool body_started = false;  // a body byte was forwarded (or queued for the client)
  bool wrote_any = false;
  char tail[2] = {'\n', '\n'};  // last two bytes written, to find SSE event boundaries

  // Final figures (written by the upstream thread before upstream_done).
  uint64_t tokens = 0;
  bool error = false;
};

// A streaming completion relayed by the event loop (plain-http pools).
struct LoopStream {
  std::shared_ptr<Exchange> ex;  // request fields, the routed request, final figures
  enum class Phase { kConnecting, kSending, kHead, kErrorBody, kBody } phase = Phase::kConnecting;
  std::unique_ptr<UpstreamConn> up;
  uint64_t up_token = 0;     // the upstream socket's epoll token (0: none registered)
  uint32_t up_events = 0;    // its epoll interest
  bool reused = false;       // `up` came from the idle keep-alive list
  std::string request;       // the upstream request bytes
  size_t sent = 0;
  int64_t phase_start_ns = 0;
  int64_t last_upstream_ns = 0;  // last upstream byte (or the head)
  int64_t last_client_write_ns = 0;
  bool headers_sent = false;  // our response head went out (the upstream answered 2xx)
  bool body_started = false;  // a body byte went out: nothing can be retried
  bool paused = false;        // not reading the upstream: the client's backlog is full
  bool sse = false;
  bool wrote_any = false;
  char tail[2] = {'\n', '\n'};
  std::string error_body;  // a non-2xx answer's body (bounded)
  int up_status = 0;
  std::string up_content_type;
  SseTokenCounter counter;
  std::string piece;  // scratch for body reads
};

// A client connection, owned by the loop thread.
struct ClientConn {
  uint64_t token = 0;
  int fd = -1;
  std::string peer;  // the client's address
  enum class State {
    kHead,     // reading a request head (idle when `in` is empty)
    kBody,     // reading the body of `req`
    kBusy,     // `req` is being answered (a loop stream or a worker)
    kClosing,  // flushing the last response, then closing
  } state = State::kHead;
  std::string in;  // received, not yet consumed
  size_t head_scan = 0;
  size_t head_len = 0;  // kBody: bytes of the head (incl. the blank line) at the front of `in`
  HttpRequest req;
  std::string out;  // to send: [out_off, out.size())
  size_t out_off = 0;
  uint32_t events = 0;          // epoll interest
  int64_t idle_since_ns = 0;    // kHead, nothing received yet
  int64_t head_start_ns = 0;    // kHead: first byte of this head
  int64_t body_start_ns = 0;    // kBody
  int64_t write_progress_ns = 0;
  bool dead = false;
  std::unique_ptr<LoopStream> stream;
  std::shared_ptr<WorkerReply> reply;
  std::string request_id;  // of `req`: the client's X-Request-Id or ours (sent back, forwarded)
  size_t unsent() const { return out.size() - out_off; }
};
inline std::string RequestIdHeader(const std::string& id) {
  return id.empty() ? std::string() : "x-request-id: " + id + "\r\n";
}

// The reason phrase of an HTTP status (gateway_conn.cpp).
const char* ReasonPhrase(int status);
// The request body for `spec`'s pool: the client's, with the model renamed
// when the pool names one (gateway.cpp).
std::string UpstreamBody(const Exchange& ex, const PoolSpec& spec);

struct Gateway::Impl {
  Router* router = nullptr;
  RouterCore* core = nullptr;
  GatewayOptions options;
  TaskThreads workers;          // handlers that block (see the file comment)
  TaskThreads upstream_threads; // httplib::Client exchanges of worker streams
  int port = 0;
  int listen_fd = -1;
  int epoll_fd = -1;
  int wake_fd = -1;  // eventfd: workers' replies, Stop()
  std::thread loop_thread;

  std::mutex active_mu;
  std::set<std::shared_ptr<Exchange>> active;  // worker streams in progress; guarded by active_mu
  std::atomic<bool> stopping{false};
  bool stopped = false;

  // Loop thread only.
  static constexpr uint64_t kListenToken = 1, kWakeToken = 2;
  uint64_t next_token = 16;
  std::unordered_map<uint64_t, std::unique_ptr<ClientConn>> conns;  // by client token
  std::unordered_map<uint64_t, ClientConn*> upstream_owner;         // by upstream token
  std::vector<std::unique_ptr<ClientConn>> graveyard;  // closed this iteration
  std::vector<std::unique_ptr<LoopStream>> dead_streams;  // ended this iteration
  int64_t next_scan_ns = 0;

  std::mutex notify_mu;
  std::vector<uint64_t> notified;  // client tokens with worker news; guarded by notify_mu

  void Register(const std::shared_ptr<Exchange>& ex) {
    std::lock_guard<std::mutex> lock(active_mu);
    active.insert(ex);
  }
  void Unregister(const std::shared_ptr<Exchange>& ex) {
    std::lock_guard<std::mutex> lock(active_mu);
    active.erase(ex);
  }

  static void Cancel(Exchange& ex) {
    std::lock_guard<std::mutex> lock(ex.mu);
    ex.cancelled = true;
    if (ex.active_client) ex.active_client->stop();
    ex.cv.notify_all();
  }
  // Waits for the upstream thread to finish (it does promptly once cancelled:
  // every upstream read has a timeout).
  static void AwaitUpstream(Exchange& ex) {
    std::unique_lock<std::mutex> lock(ex.mu);
    const auto& t = ex.rr.pool->spec->timeouts;
    const auto limit =
        std::chrono::milliseconds(t.connect_ms + std::max(t.first_token_ms, t.idle_ms) + 10000);
    if (!ex.cv.wait_for(lock, limit, [&] { return ex.upstream_done; })) {
      OCTET_LOG(ERROR) << "upstream exchange did not finish in time; leaving it to its timeouts";
    }
  }

  // ---- Shared by both stream paths.
  // Admits a completion request: parses, routes, fills `ex`. On refusal,
  // returns false with the answer in *status / *body / *retry_after.
  bool Admit(const HttpRequest& req, const std::string& peer, Exchange* ex, int* status,
             std::string* body);
  // After an upstream's non-2xx answer: true when the request moved on
  // (escalated or retried on another replica); false: pass the answer on.
  bool MoveOnAfterStatus(RoutedRequest& rr, ReplicaState* replica, const PoolSpec& spec,
                         int status);
  // After a transport failure before any body byte: true when retried elsewhere.
  bool MoveOnAfterTransportFailure(RoutedRequest& rr, ReplicaState* replica,
                                   const std::string& what);
  // Records an upstream failure after tokens reached the client; returns the
  // message of the SSE error event that ends the stream.
  std::string MidStreamFailure(ReplicaState* replica, const PoolRuntime& pool,
                               const std::string& what);

  // ---- Worker-side handlers (httplib types; run on `workers`).
  void RunCompletion(const std::shared_ptr<Exchange>& ex, const httplib::Request& req,
                     httplib::Response& res);
  void HandleRoute(const httplib::Request& req, httplib::Response& res);
  void HandleModels(httplib::Response& res);
  void HandleHealth(httplib::Response& res);
  void HandlePolicy(const httplib::Request& req, httplib::Response& res);
  void HandleInstances(const httplib::Request& req, httplib::Response& res);
  bool AdminAllowed(const httplib::Request& req) const;
  void RunUpstream(const std::shared_ptr<Exchange>& ex);
  bool Deliver(Exchange& ex, const char* data, size_t n);
  static bool WriteLocked(Exchange& ex, std::string_view data);
  void Finish(Exchange& ex);
  // Runs a handler's response out through `reply` (headers, body or content provider).
  void SendWorkerResponse(httplib::Response& res, bool head_only, bool http11, bool keep_alive,
                          uint64_t token, const std::shared_ptr<WorkerReply>& reply);
  void PostReply(uint64_t token, const std::shared_ptr<WorkerReply>& reply, std::string bytes,
                 bool finished, bool close_after);

  // ---- Loop thread.
  void Loop();
  void Wake();
  void Accept();
  void OnClientEvent(ClientConn* c, uint32_t events);
  void ReadClient(ClientConn* c, uint32_t events);
  size_t ReadLimit(const ClientConn* c) const {
    return options.max_header_bytes + kMaxReadAhead + c->head_len + c->req.content_length;
  }
  void ProcessInput(ClientConn* c);
  void Dispatch(ClientConn* c);
  void SubmitWorker(ClientConn* c, std::function<void(httplib::Request&, httplib::Response&)> fn);
  void TakeWorkerNews();
  void WriteSimple(ClientConn* c, int status, const std::string& content_type,
                   const std::string& body, const std::string& extra_headers, bool close);
  void ResponseDone(ClientConn* c, bool close);
  void Flush(ClientConn* c);
  void SetEvents(int fd, uint64_t token, uint32_t* current, uint32_t wanted);
  void UpdateClientEvents(ClientConn* c);
  void CloseConn(ClientConn* c);
  void ScanDeadlines(int64_t now);
  int64_t DeadlineOf(const ClientConn* c) const;
  void Arm(const ClientConn* c) {
    const int64_t d = DeadlineOf(c);
    if (d > 0 && d < next_scan_ns) next_scan_ns = d;
  }

  // Loop streams.
  void StartStream(ClientConn* c, std::shared_ptr<Exchange> ex);
  void StartAttempt(ClientConn* c, bool fresh_connection);
  void OnUpstreamEvent(ClientConn* c, uint32_t events);
  void PumpUpstream(ClientConn* c);
  void OnUpstreamHead(ClientConn* c);
  void DecideOnErrorBody(ClientConn* c);
  void PumpBody(ClientConn* c);
  void UpstreamTransportFailure(ClientConn* c, const Status& st);
  void BodyFailure(ClientConn* c, std::string what);  // by value: it may be the upstream's error()
  void StreamAnswer(ClientConn* c, int status, const std::string& content_type,
                    const std::string& body, const std::string& message);
  void StreamWrite(ClientConn* c, std::string_view data);
  void EndStream(ClientConn* c);
  void DropUpstream(LoopStream& s, bool reuse);
  void CancelStream(ClientConn* c);
  void OnStreamDeadline(ClientConn* c, int64_t now);
  int64_t StreamDeadline(const LoopStream& s) const;
};

}  // namespace octet::router
