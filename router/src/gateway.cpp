// The gateway's request path: parse -> RouterCore::Route (classify + pick
// replica) -> forward with retries -> pass the response through.
//
// One event-loop thread (epoll, non-blocking sockets) owns every client
// connection: it accepts, reads and parses HTTP/1.1 requests (keep-alive and
// pipelining, with limits on head and body size and a deadline on every
// wait), and writes every response. A streaming completion from a pool of
// plain-http replicas (the usual case) runs on the loop as a state machine
// (LoopStream): connect (or reuse an idle keep-alive UpstreamConn), send,
// read the upstream's head, retry on another replica / the fallback pool
// while no body byte has reached the client, then relay each upstream read to
// the client as it arrives. Back-pressure: while a client's unsent bytes
// exceed kClientHighWater the loop stops reading its upstream.
//
// Everything else (non-streaming completions, streams when a replica is
// https or options.direct_streaming is false, /metrics, /health, /v1/models,
// /v1/route, the admin endpoints) is handed to a bounded pool of worker
// threads running the httplib-typed handlers below; their response goes back
// through the loop (WorkerReply). A worker stream runs the blocking
// httplib::Client exchange on an upstream thread (RunUpstream) and writes its
// body through a DataSink that blocks while the client's backlog is full.
//
// Either way, retries (another replica, the fallback pool, escalation) happen
// as long as no body byte has reached the client.
#include "octet/router/gateway.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>

#include "http_request.h"
#include "octet/base/api_key.h"
#include "octet/base/deadline.h"
#include "octet/base/file_util.h"
#include "octet/base/log.h"
#include "octet/base/sse.h"
#include "octet/router/classifier.h"
#include "router_core.h"

namespace octet::router {
namespace {

using nlohmann::json;

constexpr size_t kMaxErrorBodyBytes = 1u << 20;

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string OpenAiError(const std::string& message, const std::string& type, int code) {
  return Dump(json{{"error", {{"message", message}, {"type", type}, {"code", code}}}});
}

// Counts completion tokens in an SSE body: usage.completion_tokens when the
// upstream reports it, else the number of events carrying non-empty content.
class SseTokenCounter {
 public:
  void Feed(std::string_view data) {
    // An oversized event is dropped by the reader (and not counted); the
    // relay itself goes on.
    (void)reader_.Feed(data, [this](const SseReader::Event& e) { Event(e.data); });
  }
  uint64_t tokens() const { return usage_ >= 0 ? static_cast<uint64_t>(usage_) : events_; }

 private:
  static bool NonEmptyString(std::string_view s, std::string_view key) {
    size_t p = s.find(key);
    while (p != std::string_view::npos) {
      size_t k = p + key.size();
      while (k < s.size() && (s[k] == ' ' || s[k] == ':')) ++k;
      if (k + 1 < s.size() && s[k] == '"' && s[k + 1] != '"') return true;
      p = s.find(key, p + 1);
    }
    return false;
  }
  void Event(std::string_view payload) {
    if (payload == "[DONE]") return;
    if (payload.find("\"completion_tokens\"") != std::string_view::npos) {
      json j = json::parse(payload, nullptr, false);
      if (!j.is_discarded() && j.contains("usage") && j["usage"].is_object() &&
          j["usage"].value("completion_tokens", -1) >= 0) {
        usage_ = j["usage"]["completion_tokens"].get<int64_t>();
        return;
      }
    }
    if (NonEmptyString(payload, "\"content\"") || NonEmptyString(payload, "\"text\"")) ++events_;
  }
  SseReader reader_{size_t{1} << 20};
  uint64_t events_ = 0;
  int64_t usage_ = -1;
};

uint64_t UnaryTokens(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return 0;
  auto u = j.find("usage");
  if (u == j.end() || !u->is_object()) return 0;
  const int64_t t = u->value("completion_tokens", int64_t{0});
  return t > 0 ? static_cast<uint64_t>(t) : 0;
}

bool IEqualsAscii(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

bool IsLoopback(const std::string& addr) {
  return addr == "127.0.0.1" || addr == "::1" || addr.rfind("127.", 0) == 0 ||
         addr.rfind("::ffff:127.", 0) == 0;
}

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

const char* ReasonPhrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return status < 300 ? "OK" : status < 500 ? "Client Error" : "Server Error";
  }
}

// Bytes a client may have queued and unsent before the gateway stops reading
// its upstream (loop streams) or blocks its worker's writes.
constexpr size_t kClientHighWater = 256 * 1024;
// Bytes read ahead of the request being served (pipelined requests).
constexpr size_t kMaxReadAhead = 64 * 1024;

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

// The request's X-Request-Id when the client sent a printable one of at most
// 128 bytes; otherwise a new one, added to `req`'s headers (so that it is
// forwarded to the replica, which logs it too).
std::string AssignRequestId(HttpRequest* req) {
  const std::string given = req->Header("X-Request-Id");
  bool usable = !given.empty() && given.size() <= 128;
  for (unsigned char ch : given) usable = usable && ch > 0x20 && ch < 0x7f;
  if (usable) return given;
  static const uint64_t seed = std::random_device{}();
  static std::atomic<uint64_t> counter{0};
  char buf[40];
  std::snprintf(buf, sizeof buf, "req-%08llx%08llx",
                static_cast<unsigned long long>(seed & 0xffffffffu),
                static_cast<unsigned long long>(counter.fetch_add(1) + 1));
  for (auto it = req->headers.begin(); it != req->headers.end();) {
    it = AsciiIEquals(it->first, "X-Request-Id") ? req->headers.erase(it) : it + 1;
  }
  req->headers.emplace_back("X-Request-Id", buf);
  return buf;
}

std::string RequestIdHeader(const std::string& id) {
  return id.empty() ? std::string() : "x-request-id: " + id + "\r\n";
}

}  // namespace

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

namespace {

void SetDecisionHeaders(httplib::Response& res, const RouteDecision& d) {
  if (!d.route.empty()) res.set_header("X-Octet-Route", d.route);
  if (!d.pool.empty()) res.set_header("X-Octet-Pool", d.pool);
  if (!d.replica.empty()) res.set_header("X-Octet-Replica", d.replica);
}

std::string SseError(const std::string& message) {
  return "data: " + OpenAiError(message, "upstream_error", 502) + "\n\n";
}

// Marks the exchange as answered with `status` and a body of its own (an
// error, or an upstream error passed through). After our 2xx headers went out,
// it becomes an SSE error event instead.
void AnswerWith(Exchange& ex, int status, const std::string& content_type, std::string body,
                const std::string& message) {
  std::lock_guard<std::mutex> lock(ex.mu);
  ex.error = status >= 500 || ex.error;
  if (ex.headers_ready) {
    ex.failed_after_headers = true;
    ex.error = true;
    ex.error_message = message;
    return;
  }
  ex.status = status;
  ex.content_type = content_type;
  ex.unary_body = std::move(body);
  ex.headers_ready = true;
}

// The request body for `spec`'s pool: the client's, with the model renamed
// when the pool names one.
std::string UpstreamBody(const Exchange& ex, const PoolSpec& spec) {
  if (!spec.model.empty() && ex.body.value("model", std::string()) != spec.model) {
    json b = ex.body;
    b["model"] = spec.model;
    return Dump(b);
  }
  return ex.original_body;
}

// True when every replica the policy can send to speaks plain http (a loop
// stream's UpstreamConn has no TLS).
bool AllPlainHttp(const PolicyRuntime& snapshot) {
  for (const auto& pool : snapshot.pools)
    for (const auto& r : pool->replicas)
      if (r->parsed().scheme != "http") return false;
  return true;
}

}  // namespace
bool Gateway::Impl::WriteLocked(Exchange& ex, std::string_view data) {
  if (data.empty()) return true;
  if (!ex.sink->write(data.data(), data.size())) return false;
  if (!ex.wrote_any) {
    ex.wrote_any = true;
    ex.rr.pool->counters->ttft.Record(NowNs() - ex.start_ns);
  }
  if (data.size() >= 2) {
    ex.tail[0] = data[data.size() - 2];
    ex.tail[1] = data[data.size() - 1];
  } else {
    ex.tail[0] = ex.tail[1];
    ex.tail[1] = data[0];
  }
  return true;
}

// A body chunk from the upstream thread. False when the client is gone.
bool Gateway::Impl::Deliver(Exchange& ex, const char* data, size_t n) {
  std::lock_guard<std::mutex> lock(ex.sink_mu);
  ex.body_started = true;
  if (!ex.sink) {
    ex.pending.emplace_back(data, n);
    return true;
  }
  if (WriteLocked(ex, std::string_view(data, n))) return true;
  std::lock_guard<std::mutex> state(ex.mu);
  ex.cancelled = true;
  ex.cv.notify_all();
  return false;
}

void Gateway::Impl::RunUpstream(const std::shared_ptr<Exchange>& exp) {
  Exchange& ex = *exp;
  SseTokenCounter sse;
  // Marks the exchange as answered with `status` and a body of its own (an
  // error, or an upstream error passed through). After our 2xx headers went
  // out, it becomes an SSE error event instead.
  auto finish_with = [&](int status, const std::string& content_type, std::string body,
                         const std::string& message) {
    AnswerWith(ex, status, content_type, std::move(body), message);
  };

  while (true) {
    {
      std::lock_guard<std::mutex> lock(ex.mu);
      if (ex.cancelled) break;
    }
    ReplicaState* replica = ex.rr.lease.get();
    const PoolRuntime& pool = *ex.rr.pool;
    const PoolSpec& spec = *pool.spec;
    std::unique_ptr<httplib::Client> client = replica->AcquireClient(spec.timeouts);

    httplib::Request req;
    req.method = "POST";
    req.path = replica->parsed().prefix + ex.path;
    req.headers = ex.forward_headers;
    if (!replica->api_key().empty())
      req.headers.emplace("Authorization", "Bearer " + replica->api_key());
    req.headers.emplace("Content-Type", "application/json");
    req.body = UpstreamBody(ex, spec);

    int status = 0;
    bool buffering = false;  // non-2xx: collect the body, decide after
    std::string error_body, content_type, unary;
    req.response_handler = [&](const httplib::Response& r) {
      status = r.status;
      content_type = r.get_header_value("Content-Type");
      if (content_type.empty()) content_type = "application/json";
      buffering = !(status >= 200 && status < 300);
      if (!buffering && ex.stream) {
        // Our response starts now: the handler may send its headers.
        std::lock_guard<std::mutex> lock(ex.mu);
        if (!ex.headers_ready) {
          ex.status = status;
          ex.content_type = content_type;
          ex.headers_ready = true;
          ex.cv.notify_all();
        }
      }
      return true;
    };
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      if (buffering) {
        if (error_body.size() + n <= kMaxErrorBodyBytes) error_body.append(data, n);
        return true;
      }
      if (!ex.stream) {
        unary.append(data, n);
        return true;
      }
      sse.Feed(std::string_view(data, n));
      return Deliver(ex, data, n);
    };
    {
      std::lock_guard<std::mutex> lock(ex.mu);
      if (ex.cancelled) break;
      ex.active_client = client.get();
    }
    httplib::Response upstream_res;
    httplib::Error err = httplib::Error::Success;
    const bool ok = client->send(req, upstream_res, err);
    bool cancelled;
    {
      std::lock_guard<std::mutex> lock(ex.mu);
      ex.active_client = nullptr;
      cancelled = ex.cancelled;
    }
    if (cancelled) break;

    if (ok && !buffering) {  // a complete 2xx response
      core->ReportSuccess(replica, spec);
      replica->ReleaseClient(std::move(client));
      std::lock_guard<std::mutex> lock(ex.mu);
      if (ex.stream) {
        ex.tokens = sse.tokens();
      } else {
        ex.tokens = UnaryTokens(unary);
        ex.status = status;
        ex.content_type = content_type;
        ex.unary_body = std::move(unary);
        ex.headers_ready = true;
      }
      break;
    }
    if (ok) {  // a complete non-2xx response, held back so far
      replica->ReleaseClient(std::move(client));
      if (MoveOnAfterStatus(ex.rr, replica, spec, status)) continue;
      const std::string message = "upstream " + replica->url() + " answered " +
                                  std::to_string(status) + ": " + error_body.substr(0, 500);
      finish_with(status, content_type, std::move(error_body), message);
      break;
    }
    // Transport failure (connect, send, read, timeout).
    bool body_started;
    {
      std::lock_guard<std::mutex> lock(ex.sink_mu);
      body_started = ex.body_started;
    }
    const std::string what = httplib::to_string(err);
    if (body_started) {
      // Tokens already reached the client: end the stream with an error event.
      const std::string message = MidStreamFailure(replica, pool, what);
      std::lock_guard<std::mutex> lock(ex.mu);
      ex.failed_after_headers = true;
      ex.error = true;
      ex.error_message = message;
      ex.tokens = sse.tokens();
      break;
    }
    if (MoveOnAfterTransportFailure(ex.rr, replica, what)) continue;
    const bool timeout = err == httplib::Error::ConnectionTimeout || err == httplib::Error::Read;
    const std::string reason = "pool '" + spec.name + "' replica " + replica->url() + ": " + what;
    finish_with(timeout ? 504 : 502, "application/json",
                OpenAiError("upstream failed: " + reason, "upstream_error", timeout ? 504 : 502),
                "upstream failed: " + reason);
    break;
  }
  ex.rr.lease.Release();  // the upstream is done: its load drops now
  std::lock_guard<std::mutex> lock(ex.mu);
  ex.upstream_done = true;
  ex.cv.notify_all();
}

// ---- Retry and failure decisions shared by both stream paths ------------------

bool Gateway::Impl::MoveOnAfterStatus(RoutedRequest& rr, ReplicaState* replica,
                                      const PoolSpec& spec, int status) {
  bool escalate_status = false;
  if (rr.route) {
    const auto& codes = rr.route->escalate.on_status;
    escalate_status = std::find(codes.begin(), codes.end(), status) != codes.end();
  }
  if (escalate_status && core->Escalate(rr)) {
    core->ReportSuccess(replica, spec);
    return true;
  }
  const bool server_error = status >= 500;
  if (server_error || status == 429)
    return core->Retry(rr, server_error ? FailureKind::kStatus5xx : FailureKind::kStatus429);
  core->ReportSuccess(replica, spec);  // a 4xx is the client's problem, not the replica's
  return false;
}

bool Gateway::Impl::MoveOnAfterTransportFailure(RoutedRequest& rr, ReplicaState* replica,
                                                const std::string& what) {
  if (!core->Retry(rr, FailureKind::kConnect)) return false;
  OCTET_LOG(DEBUG) << "upstream " << replica->url() << ": " << what << "; retrying on "
                   << rr.decision.replica;
  return true;
}

std::string Gateway::Impl::MidStreamFailure(ReplicaState* replica, const PoolRuntime& pool,
                                            const std::string& what) {
  core->ReportFailure(replica, pool, FailureKind::kMidStream);
  OCTET_LOG(WARNING) << "upstream " << replica->url() << " failed mid-stream: " << what;
  return "the upstream failed mid-stream (" + what + ")";
}

bool Gateway::Impl::Admit(const HttpRequest& req, const std::string& peer, Exchange* ex,
                          int* status, std::string* body) {
  const int64_t t0 = NowNs();
  core->CountRequest();
  auto snapshot = core->Snapshot();
  const GatewaySpec& gw = snapshot->policy->gateway;
  if (static_cast<int64_t>(req.body.size()) > gw.max_body_bytes) {
    core->CountBadRequest();
    *status = 413;
    *body = OpenAiError("request body is larger than gateway.max_body_bytes",
                        "invalid_request_error", 413);
    return false;
  }
  ex->body = json::parse(req.body, nullptr, false);
  if (ex->body.is_discarded() || !ex->body.is_object()) {
    core->CountBadRequest();
    *status = 400;
    *body = OpenAiError("the request body is not a JSON object", "invalid_request_error", 400);
    return false;
  }
  const RequestFeatures features = ExtractFeatures(ex->body);
  const HeaderLookup headers = [&req](std::string_view name) { return req.Header(name); };
  auto routed = core->Route(ex->body, features, headers);
  core->RecordOverhead(NowNs() - t0);
  if (!routed.ok()) {
    const bool busy = routed.status().code() == StatusCode::kResourceExhausted;
    *status = busy ? 429 : 503;
    *body = OpenAiError(routed.status().message(), busy ? "rate_limit_error" : "unavailable",
                        *status);
    return false;
  }
  ex->rr = std::move(*routed);
  ex->original_body = req.body;
  ex->path = req.path;
  ex->stream = features.stream;
  ex->start_ns = t0;
  ex->keepalive_ms = gw.stream_keepalive_ms;
  for (const char* h : {"Accept", "X-Request-Id", "Traceparent"})
    if (req.HasHeader(h)) ex->forward_headers.emplace(h, req.Header(h));
  const std::string& session_header = snapshot->policy->stickiness.header;
  if (!session_header.empty() && req.HasHeader(session_header))
    ex->forward_headers.emplace(session_header, req.Header(session_header));
  ex->forward_headers.emplace("X-Forwarded-For", peer);
  return true;
}

void Gateway::Impl::Finish(Exchange& ex) {
  PoolCounters& c = *ex.rr.pool->counters;
  c.tokens.fetch_add(ex.tokens, std::memory_order_relaxed);
  if (ex.error) c.errors.fetch_add(1, std::memory_order_relaxed);
  c.duration.Record(NowNs() - ex.start_ns);
}

// A completion that is not relayed by the loop: non-streaming, or a stream
// through an upstream thread (https pools, or options.direct_streaming off).
// `ex` is admitted (Admit).
void Gateway::Impl::RunCompletion(const std::shared_ptr<Exchange>& ex, const httplib::Request&,
                                  httplib::Response& res) {
  const int64_t t0 = ex->start_ns;
  auto snapshot = ex->rr.runtime;
  if (!ex->stream) {
    RunUpstream(ex);
    ex->rr.pool->counters->ttft.Record(NowNs() - t0);
    Finish(*ex);
    res.status = ex->status;
    SetDecisionHeaders(res, ex->rr.decision);
    res.set_content(ex->unary_body, ex->content_type);
    return;
  }

  // Streaming through an upstream thread (https replicas): it runs the exchange
  // (retries included); this thread waits until the response status is decided
  // and then hands over to the content provider.
  Register(ex);
  upstream_threads.Submit([this, ex] { RunUpstream(ex); });
  const TimeoutSpec& t = ex->rr.pool->spec->timeouts;
  const int attempts =
      2 + ex->rr.pool->spec->retries.attempts + static_cast<int>(snapshot->pools.size());
  const Deadline deadline = Deadline::AfterMs((t.connect_ms + t.first_token_ms) * attempts);
  bool timed_out = false;
  {
    std::unique_lock<std::mutex> lock(ex->mu);
    timed_out = !ex->cv.wait_until(lock, deadline.at(),
                                   [&] { return ex->headers_ready || ex->upstream_done; });
  }
  if (timed_out || stopping.load()) {
    Cancel(*ex);
    AwaitUpstream(*ex);
    Unregister(ex);
    Finish(*ex);
    res.status = stopping.load() ? 503 : 504;
    SetDecisionHeaders(res, ex->rr.decision);
    res.set_content(OpenAiError(stopping.load() ? "the router is shutting down"
                                                : "no response from the upstream in time",
                                "upstream_error", res.status),
                    "application/json");
    return;
  }
  bool done;
  {
    std::lock_guard<std::mutex> lock(ex->mu);
    done = ex->upstream_done;
    res.status = ex->status;
  }
  SetDecisionHeaders(res, ex->rr.decision);
  if (done) {
    // The whole exchange is over already (an error, or a very short stream).
    Unregister(ex);
    ex->rr.pool->counters->ttft.Record(NowNs() - t0);
    Finish(*ex);
    std::string body = ex->unary_body;
    for (auto& ch : ex->pending) body += ch;
    if (ex->failed_after_headers) body += SseError(ex->error_message);
    res.set_content(body, ex->content_type);
    return;
  }
  const bool sse = ex->content_type.find("text/event-stream") != std::string::npos;
  if (sse) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
  }
  res.set_chunked_content_provider(
      ex->content_type,
      [this, ex, sse](size_t, httplib::DataSink& sink) {
        // Flush what came before, then let the upstream thread write directly.
        auto unpublish = [&] {
          std::lock_guard<std::mutex> lock(ex->sink_mu);
          ex->sink = nullptr;
        };
        {
          std::lock_guard<std::mutex> lock(ex->sink_mu);
          ex->sink = &sink;
          while (!ex->pending.empty()) {
            const bool ok = WriteLocked(*ex, ex->pending.front());
            ex->pending.pop_front();
            if (!ok) {
              ex->sink = nullptr;
              Cancel(*ex);
              return false;
            }
          }
        }
        const auto keepalive =
            std::chrono::milliseconds(ex->keepalive_ms > 0 ? ex->keepalive_ms : 1000);
        std::unique_lock<std::mutex> lock(ex->mu);
        while (true) {
          if (ex->cancelled || stopping.load()) {
            lock.unlock();
            unpublish();
            Cancel(*ex);
            return false;
          }
          if (ex->upstream_done) {
            const bool failed = ex->failed_after_headers;
            const std::string message = ex->error_message;
            lock.unlock();
            std::lock_guard<std::mutex> sl(ex->sink_mu);
            if (failed && sse) {
              if (ex->tail[0] != '\n' || ex->tail[1] != '\n') WriteLocked(*ex, "\n\n");
              WriteLocked(*ex, SseError(message));
            }
            ex->sink = nullptr;
            sink.done();
            return true;
          }
          const bool woke = ex->cv.wait_for(lock, keepalive, [&] {
            return ex->upstream_done || ex->cancelled || stopping.load();
          });
          if (!woke && sse && ex->keepalive_ms > 0) {
            // An SSE comment between events: clients ignore it, and writing it
            // is how a departed client is noticed while the model prefills.
            lock.unlock();
            bool ok = true;
            {
              std::lock_guard<std::mutex> sl(ex->sink_mu);
              if (ex->tail[0] == '\n' && ex->tail[1] == '\n')
                ok = WriteLocked(*ex, ": keepalive\n\n");
            }
            if (!ok) {
              unpublish();
              Cancel(*ex);
              return false;
            }
            lock.lock();
          }
        }
      },
      [this, ex](bool success) {
        {
          std::lock_guard<std::mutex> lock(ex->sink_mu);
          ex->sink = nullptr;  // the sink dies with this response
        }
        if (!success) {  // the client did not get the whole response: it left (or we stop)
          ex->rr.pool->counters->cancelled.fetch_add(1, std::memory_order_relaxed);
          Cancel(*ex);
        }
        AwaitUpstream(*ex);
        Unregister(ex);
        Finish(*ex);
      });
}
void Gateway::Impl::HandleRoute(const httplib::Request& req, httplib::Response& res) {
  json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    res.status = 400;
    res.set_content(
        OpenAiError("the request body is not a JSON object", "invalid_request_error", 400),
        "application/json");
    return;
  }
  const HeaderLookup headers = [&req](std::string_view name) {
    return req.get_header_value(std::string(name));
  };
  auto d = router->Classify(body, headers);
  if (!d.ok()) {
    res.status = 503;
    res.set_content(OpenAiError(d.status().message(), "unavailable", 503), "application/json");
    return;
  }
  res.set_content(Dump(d->ToJson()), "application/json");
}

void Gateway::Impl::HandleModels(httplib::Response& res) {
  auto snap = core->Snapshot();
  json data = json::array();
  std::set<std::string> seen;
  auto add = [&](const std::string& id, const std::string& owner) {
    if (id.empty() || !seen.insert(id).second) return;
    data.push_back({{"id", id}, {"object", "model"}, {"created", 0}, {"owned_by", owner}});
  };
  add(snap->policy->gateway.model_name, "octet-router");
  for (const auto& p : snap->policy->pools)
    add(p.model.empty() ? p.name : p.model, "octet-router/" + p.name);
  res.set_content(Dump(json{{"object", "list"}, {"data", data}}), "application/json");
}

void Gateway::Impl::HandleHealth(httplib::Response& res) {
  const RouterStats s = router->Stats();
  bool any = false;
  json pools = json::array();
  for (const auto& p : s.pools) {
    any = any || p.healthy_replicas > 0;
    pools.push_back({{"pool", p.pool},
                     {"healthy_replicas", p.healthy_replicas},
                     {"total_replicas", p.total_replicas}});
  }
  res.status = any ? 200 : 503;
  res.set_content(Dump(json{{"status", any ? "ok" : "unavailable"}, {"pools", pools}}),
                  "application/json");
}

bool Gateway::Impl::AdminAllowed(const httplib::Request& req) const {
  if (IsLoopback(req.remote_addr)) return true;
  return !options.admin_token.empty() &&
         req.get_header_value("Authorization") == "Bearer " + options.admin_token;
}

// GET: {"instances": {NAME: [URL, ...]}}; POST the same shape to replace the
// endpoints of the instances named (`instance:` pools; octet deploy does it).
void Gateway::Impl::HandleInstances(const httplib::Request& req, httplib::Response& res) {
  if (!AdminAllowed(req)) {
    res.status = 403;
    res.set_content(
        OpenAiError("instance changes are allowed from loopback or with the admin token",
                    "permission_error", 403),
        "application/json");
    return;
  }
  if (req.method == "POST") {
    const json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    std::map<std::string, std::vector<std::string>> endpoints;
    std::string bad;
    if (!body.is_object() || !body.contains("instances") || !body["instances"].is_object()) {
      bad = "the body must be {\"instances\": {\"NAME\": [\"http://HOST:PORT\", ...]}}";
    } else {
      for (const auto& [name, urls] : body["instances"].items()) {
        if (!urls.is_array()) {
          bad = "instance '" + name + "': a list of URLs expected";
          break;
        }
        for (const auto& u : urls) {
          if (!u.is_string()) {
            bad = "instance '" + name + "': every URL must be a string";
            break;
          }
          endpoints[name].push_back(u.get<std::string>());
        }
        endpoints[name];  // an empty list clears the instance
      }
    }
    Status s = bad.empty() ? router->SetInstanceEndpoints(endpoints) : InvalidArgumentError(bad);
    if (!s.ok()) {
      res.status = 400;
      res.set_content(OpenAiError(s.message(), "invalid_request_error", 400), "application/json");
      return;
    }
  }
  json out = json::object();
  for (const auto& [name, urls] : router->InstanceEndpoints()) out[name] = urls;
  res.set_content(Dump(json{{"instances", out}}), "application/json");
}

void Gateway::Impl::HandlePolicy(const httplib::Request& req, httplib::Response& res) {
  if (!AdminAllowed(req)) {
    res.status = 403;
    res.set_content(OpenAiError("policy changes are allowed from loopback or with the admin token",
                                "permission_error", 403),
                    "application/json");
    return;
  }
  if (req.method == "GET") {
    auto p = router->policy();
    res.set_content(p ? p->source_text : "", "application/yaml");
    return;
  }
  const std::string apply_param = req.get_param_value("apply");
  const bool apply = apply_param.empty() || apply_param == "true" || apply_param == "1";
  auto current = router->policy();
  // Relative weights paths resolve against the running policy's folder.
  PolicyParseOptions opts;
  if (current) opts.base_dir = DirName(current->source_file);
  const std::string name = current ? current->source_file : "policy.yaml";
  PolicyParseResult r = router->ApplyPolicyYaml(req.body, name, apply, opts);
  json errors = json::array();
  for (const auto& e : r.errors) errors.push_back(e.ToString());
  res.status = r.ok() ? 200 : 422;
  res.set_content(Dump(json{{"valid", r.ok()},
                            {"applied", r.ok() && apply},
                            {"errors", errors},
                            {"policy_generation", router->policy_generation()}}),
                  "application/json");
}

// ---- Worker responses ---------------------------------------------------------

void Gateway::Impl::PostReply(uint64_t token, const std::shared_ptr<WorkerReply>& reply,
                              std::string bytes, bool finished, bool close_after) {
  {
    std::lock_guard<std::mutex> lock(reply->mu);
    reply->pending += bytes;
    reply->finished = reply->finished || finished;
    reply->close_after = reply->close_after || close_after;
  }
  {
    std::lock_guard<std::mutex> lock(notify_mu);
    notified.push_back(token);
  }
  Wake();
}

void Gateway::Impl::SendWorkerResponse(httplib::Response& res, bool head_only, bool http11,
                                       bool keep_alive, uint64_t token,
                                       const std::shared_ptr<WorkerReply>& reply) {
  const bool provider = static_cast<bool>(res.content_provider_);
  // A streamed body to an HTTP/1.0 client is delimited by closing the connection.
  const bool chunked = provider && http11;
  const bool close_after = !keep_alive || (provider && !http11);
  if (res.status == -1) res.status = 200;  // httplib: a handler that did not set it
  if (res.status <= 0) res.status = 500;
  std::string head = "HTTP/1.1 " + std::to_string(res.status) + " " + ReasonPhrase(res.status) +
                     "\r\n";
  for (const auto& [name, value] : res.headers) {
    if (IEqualsAscii(name, "Content-Length") || IEqualsAscii(name, "Transfer-Encoding") ||
        IEqualsAscii(name, "Connection"))
      continue;
    head += name + ": " + value + "\r\n";
  }
  if (chunked) {
    head += "Transfer-Encoding: chunked\r\n";
  } else if (!provider) {
    head += "Content-Length: " + std::to_string(res.body.size()) + "\r\n";
  }
  if (close_after) head += "Connection: close\r\n";
  head += "\r\n";
  if (!provider) {
    if (!head_only) head += res.body;
    PostReply(token, reply, std::move(head), true, close_after);
    return;
  }
  PostReply(token, reply, std::move(head), false, close_after);
  // Run the content provider with a sink that writes through the loop and
  // blocks (bounded by write_timeout_ms) while the client's backlog is full.
  bool done = false, failed = false;
  httplib::DataSink sink;
  sink.write = [&](const char* data, size_t n) -> bool {
    if (n == 0) return true;
    std::string bytes;
    if (chunked) {
      char size[32];
      std::snprintf(size, sizeof size, "%zx\r\n", n);
      bytes.reserve(n + 16);
      bytes += size;
      bytes.append(data, n);
      bytes += "\r\n";
    } else {
      bytes.assign(data, n);
    }
    {
      std::unique_lock<std::mutex> lock(reply->mu);
      const auto limit = std::chrono::milliseconds(options.write_timeout_ms);
      const bool room = reply->cv.wait_for(lock, limit, [&] {
        return reply->client_gone ||
               reply->pending.size() + reply->loop_backlog < kClientHighWater;
      });
      if (!room || reply->client_gone) {
        failed = true;
        return false;
      }
    }
    PostReply(token, reply, std::move(bytes), false, false);
    return true;
  };
  sink.is_writable = [&] {
    std::lock_guard<std::mutex> lock(reply->mu);
    return !reply->client_gone;
  };
  sink.done = [&] { done = true; };
  size_t offset = 0;
  while (!done && !failed) {
    if (!res.content_provider_(offset, 0, sink)) {
      failed = true;
      break;
    }
  }
  res.content_provider_success_ = done && !failed;
  if (res.content_provider_success_) {
    PostReply(token, reply, chunked ? "0\r\n\r\n" : "", true, close_after);
  } else {
    PostReply(token, reply, "", true, true);  // the body is incomplete: the connection ends
  }
  // ~Response runs the provider's releaser with content_provider_success_.
}


// ---- The event loop ------------------------------------------------------------

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

void Gateway::Impl::ProcessInput(ClientConn* c) {
  while (!c->dead) {
    if (c->state == ClientConn::State::kHead) {
      if (c->in.empty()) return;
      const size_t from = c->head_scan > 3 ? c->head_scan - 3 : 0;
      const size_t end = c->in.find("\r\n\r\n", from);
      // 431 once the head (complete or not yet) is past the limit.
      const size_t head_bytes = end == std::string::npos ? c->in.size() : end + 4;
      if (head_bytes > options.max_header_bytes) {
        WriteSimple(c, 431, "application/json",
                    OpenAiError("request headers are larger than " +
                                    std::to_string(options.max_header_bytes) + " bytes",
                                "invalid_request_error", 431),
                    "", true);
        return;
      }
      if (end == std::string::npos) {
        c->head_scan = c->in.size();
        return;
      }
      auto snap = core->Snapshot();
      const uint64_t max_body =
          snap ? static_cast<uint64_t>(snap->policy->gateway.max_body_bytes) : (16u << 20);
      HeadParseError err;
      c->req = HttpRequest();
      if (!ParseRequestHead(std::string_view(c->in).substr(0, end), max_body, &c->req, &err)) {
        if (err.status == 413) core->CountBadRequest();
        WriteSimple(c, err.status, "application/json",
                    OpenAiError(err.message, "invalid_request_error", err.status), "", true);
        return;
      }
      c->head_len = end + 4;
      c->head_scan = 0;
      c->request_id = AssignRequestId(&c->req);
      c->state = ClientConn::State::kBody;
      c->body_start_ns = NowNs();
      if (c->req.expect_continue && c->req.content_length > 0 &&
          c->in.size() < c->head_len + c->req.content_length) {
        c->out += "HTTP/1.1 100 Continue\r\n\r\n";
        Flush(c);
        if (c->dead) return;
      }
    }
    if (c->state == ClientConn::State::kBody) {
      if (c->in.size() < c->head_len + c->req.content_length) return;
      c->req.body = c->in.substr(c->head_len, c->req.content_length);
      c->in.erase(0, c->head_len + c->req.content_length);
      c->head_len = 0;
      c->state = ClientConn::State::kBusy;
      Dispatch(c);
      continue;  // answered at once: the next pipelined request may follow
    }
    return;  // kBusy / kClosing: the next request waits
  }
}

void Gateway::Impl::WriteSimple(ClientConn* c, int status, const std::string& content_type,
                                const std::string& body, const std::string& extra_headers,
                                bool close) {
  close = close || !c->req.keep_alive;
  std::string& o = c->out;
  o += "HTTP/1.1 " + std::to_string(status) + " " + ReasonPhrase(status) + "\r\n";
  if (!content_type.empty()) o += "Content-Type: " + content_type + "\r\n";
  o += RequestIdHeader(c->request_id);
  o += extra_headers;
  o += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  if (close) o += "Connection: close\r\n";
  o += "\r\n";
  if (c->req.method != "HEAD") o += body;
  ResponseDone(c, close);
}

// The response to c->req is wholly queued: send it, then read the next
// request (or close).
void Gateway::Impl::ResponseDone(ClientConn* c, bool close) {
  c->reply.reset();
  c->request_id.clear();
  if (c->stream) dead_streams.push_back(std::move(c->stream));
  c->head_len = 0;
  c->head_scan = 0;
  if (close) {
    c->state = ClientConn::State::kClosing;
  } else {
    c->state = ClientConn::State::kHead;
    c->req = HttpRequest();
    c->idle_since_ns = NowNs();
    c->head_start_ns = c->in.empty() ? 0 : NowNs();
  }
  Flush(c);
}

void Gateway::Impl::Dispatch(ClientConn* c) {
  const HttpRequest& req = c->req;
  const bool post = req.method == "POST";
  const bool get = req.method == "GET" || req.method == "HEAD";
  if (!options.api_key.empty() && (req.path != "/health" || options.api_key_health)) {
    const std::string auth = req.Header("Authorization");
    const bool admin_path = req.path.rfind("/v1/router/", 0) == 0;
    if (!BearerMatches(auth, options.api_key) &&
        !(admin_path && !options.admin_token.empty() && BearerMatches(auth, options.admin_token))) {
      WriteSimple(c, 401, "application/json",
                  Dump(json{{"error",
                             {{"message", auth.empty() ? "You didn't provide an API key "
                                                         "(Authorization: Bearer KEY)."
                                                       : "Incorrect API key provided."},
                              {"type", "invalid_request_error"},
                              {"param", nullptr},
                              {"code", "invalid_api_key"}}}}),
                  "WWW-Authenticate: Bearer\r\n", false);
      return;
    }
  }
  if (req.path.rfind("/v1/", 0) == 0 && req.path.rfind("/v1/router/", 0) != 0) {
    OCTET_LOG(INFO) << "http " << req.method << " " << req.path << " request_id=" << c->request_id
                    << " from " << c->peer;
  }
  if (post && (req.path == "/v1/chat/completions" || req.path == "/v1/completions")) {
    auto ex = std::make_shared<Exchange>();
    int status = 0;
    std::string body;
    if (!Admit(req, c->peer, ex.get(), &status, &body)) {
      WriteSimple(c, status, "application/json", body, status == 429 ? "Retry-After: 1\r\n" : "",
                  false);
      return;
    }
    if (ex->stream && options.direct_streaming && AllPlainHttp(*ex->rr.runtime)) {
      StartStream(c, std::move(ex));
      return;
    }
    SubmitWorker(c, [this, ex](httplib::Request& hreq, httplib::Response& res) {
      RunCompletion(ex, hreq, res);
    });
    return;
  }
  using Handler = std::function<void(httplib::Request&, httplib::Response&)>;
  Handler handler;
  if (post && req.path == "/v1/route") {
    handler = [this](httplib::Request& q, httplib::Response& r) { HandleRoute(q, r); };
  } else if (get && req.path == "/v1/models") {
    handler = [this](httplib::Request&, httplib::Response& r) { HandleModels(r); };
  } else if (get && req.path == "/health") {
    handler = [this](httplib::Request&, httplib::Response& r) { HandleHealth(r); };
  } else if (get && req.path == "/metrics") {
    handler = [this](httplib::Request&, httplib::Response& r) {
      r.set_content(router->MetricsText(), "text/plain; version=0.0.4");
    };
  } else if (get && req.path == "/v1/router/stats") {
    handler = [this](httplib::Request&, httplib::Response& r) {
      r.set_content(Dump(router->Stats().ToJson()), "application/json");
    };
  } else if ((get || post) && req.path == "/v1/router/policy") {
    handler = [this](httplib::Request& q, httplib::Response& r) { HandlePolicy(q, r); };
  } else if ((get || post) && req.path == "/v1/router/instances") {
    handler = [this](httplib::Request& q, httplib::Response& r) { HandleInstances(q, r); };
  }
  if (!handler) {
    WriteSimple(c, 404, "application/json",
                OpenAiError("no such endpoint: " + req.method + " " + req.path,
                            "invalid_request_error", 404),
                "", false);
    return;
  }
  SubmitWorker(c, std::move(handler));
}

void Gateway::Impl::SubmitWorker(
    ClientConn* c, std::function<void(httplib::Request&, httplib::Response&)> fn) {
  auto reply = std::make_shared<WorkerReply>();
  c->reply = reply;
  auto hreq = std::make_shared<httplib::Request>();
  hreq->method = c->req.method;
  hreq->path = c->req.path;
  hreq->version = c->req.http11 ? "HTTP/1.1" : "HTTP/1.0";
  for (const auto& [name, value] : c->req.headers) hreq->headers.emplace(name, value);
  hreq->body = std::move(c->req.body);
  hreq->remote_addr = c->peer;
  if (!c->req.query.empty()) {
    for (const char* key : {"apply"}) {
      const std::string v = QueryParam(c->req.query, key);
      if (!v.empty()) hreq->params.emplace(key, v);
    }
  }
  const bool http11 = c->req.http11, keep_alive = c->req.keep_alive;
  const bool head_only = c->req.method == "HEAD";
  const uint64_t token = c->token;
  workers.Submit([this, fn = std::move(fn), hreq, reply, http11, keep_alive, head_only, token,
                  request_id = c->request_id] {
    httplib::Response res;
    try {
      fn(*hreq, res);
    } catch (const std::exception& e) {
      OCTET_LOG(ERROR) << "gateway handler failed: " << e.what();
      res = httplib::Response();
      res.status = 500;
      res.set_content(OpenAiError(std::string("internal router error: ") + e.what(),
                                  "internal_error", 500),
                      "application/json");
    }
    if (!request_id.empty()) {
      res.headers.erase("x-request-id");  // an upstream's copy: ours is the same id
      res.set_header("x-request-id", request_id);
    }
    SendWorkerResponse(res, head_only, http11, keep_alive, token, reply);
  });
}

void Gateway::Impl::TakeWorkerNews() {
  std::vector<uint64_t> tokens;
  {
    std::lock_guard<std::mutex> lock(notify_mu);
    tokens.swap(notified);
  }
  for (uint64_t token : tokens) {
    auto it = conns.find(token);
    if (it == conns.end()) continue;  // closed; CloseConn told the worker
    ClientConn* c = it->second.get();
    if (!c->reply) continue;  // already finished
    std::string bytes;
    bool finished, close_after;
    {
      std::lock_guard<std::mutex> lock(c->reply->mu);
      bytes.swap(c->reply->pending);
      finished = c->reply->finished;
      close_after = c->reply->close_after;
    }
    c->out += bytes;
    if (finished) {
      ResponseDone(c, close_after || !c->req.keep_alive);
    } else {
      Flush(c);
    }
    if (!c->dead && c->state == ClientConn::State::kHead) ProcessInput(c);
  }
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


// ---- Loop streams (plain-http pools) ---------------------------------------------
//
// The state machine of one streaming completion on the loop thread:
//   kConnecting -> kSending -> kHead -> kBody            (2xx: relay the body)
//                                   \-> kErrorBody        (non-2xx: read it, then
//                                        retry / escalate / pass it on)
// A transport failure before any body byte moves to another replica (a reused
// keep-alive connection first gets one fresh connection to the same replica).

void Gateway::Impl::StartStream(ClientConn* c, std::shared_ptr<Exchange> ex) {
  c->stream = std::make_unique<LoopStream>();
  c->stream->ex = std::move(ex);
  StartAttempt(c, false);
}

void Gateway::Impl::DropUpstream(LoopStream& s, bool reuse) {
  if (!s.up) return;
  if (s.up_token) {
    ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, s.up->fd(), nullptr);
    upstream_owner.erase(s.up_token);
    s.up_token = 0;
  }
  s.up_events = 0;
  if (reuse && s.up->reusable() && s.ex->rr.lease)
    s.ex->rr.lease->ReleaseConn(std::move(s.up));
  s.up.reset();  // an unfinished response: closing the connection cancels it upstream
}

void Gateway::Impl::StartAttempt(ClientConn* c, bool fresh_connection) {
  LoopStream& s = *c->stream;
  Exchange& ex = *s.ex;
  DropUpstream(s, false);
  if (stopping.load()) {
    StreamAnswer(c, 503, "application/json",
                 OpenAiError("the router is shutting down", "upstream_error", 503),
                 "the router is shutting down");
    return;
  }
  ReplicaState* replica = ex.rr.lease.get();
  const PoolSpec& spec = *ex.rr.pool->spec;
  const ReplicaUrl& url = replica->parsed();

  const std::string body = UpstreamBody(ex, spec);
  std::string& request = s.request;
  request.clear();
  request.reserve(body.size() + 512);
  const bool v6 = url.host.find(':') != std::string::npos;
  request += "POST " + url.prefix + ex.path + " HTTP/1.1\r\nHost: " +
             (v6 ? "[" + url.host + "]" : url.host) + ":" + std::to_string(url.port) + "\r\n";
  for (const auto& [name, value] : ex.forward_headers) request += name + ": " + value + "\r\n";
  if (!replica->api_key().empty()) request += "Authorization: Bearer " + replica->api_key() + "\r\n";
  request += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
             "\r\n\r\n";
  request += body;
  s.sent = 0;
  s.error_body.clear();

  s.up = fresh_connection ? nullptr : replica->AcquireConn();
  s.reused = s.up != nullptr;
  if (!s.up) {
    auto conn = UpstreamConn::StartConnect(url.host, url.port);
    if (!conn.ok()) {
      UpstreamTransportFailure(c, conn.status());
      return;
    }
    s.up = std::move(*conn);
  }
  s.phase = s.up->connecting() ? LoopStream::Phase::kConnecting : LoopStream::Phase::kSending;
  s.phase_start_ns = NowNs();
  s.up_token = next_token++;
  s.up_events = EPOLLOUT;
  upstream_owner[s.up_token] = c;
  epoll_event ev{};
  ev.events = s.up_events;
  ev.data.u64 = s.up_token;
  ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, s.up->fd(), &ev);
  if (s.phase == LoopStream::Phase::kSending) PumpUpstream(c);
  if (!c->dead) Arm(c);
}

void Gateway::Impl::OnUpstreamEvent(ClientConn* c, uint32_t events) {
  if (!c->stream || c->dead) return;
  LoopStream& s = *c->stream;
  if (s.phase == LoopStream::Phase::kConnecting) {
    if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return;
    Status st = s.up->FinishConnect();
    if (!st.ok()) {
      UpstreamTransportFailure(c, st);
      return;
    }
    s.phase = LoopStream::Phase::kSending;
    s.phase_start_ns = NowNs();
  }
  PumpUpstream(c);
  if (!c->dead) Arm(c);
}

// Advances the exchange with what the upstream socket allows now.
void Gateway::Impl::PumpUpstream(ClientConn* c) {
  LoopStream& s = *c->stream;
  if (s.phase == LoopStream::Phase::kSending) {
    Status st = s.up->SendNow(s.request, &s.sent);
    if (!st.ok()) {
      UpstreamTransportFailure(c, st);
      return;
    }
    if (s.sent < s.request.size()) return;  // EPOLLOUT again
    s.phase = LoopStream::Phase::kHead;
    s.phase_start_ns = NowNs();
    s.last_upstream_ns = s.phase_start_ns;
    SetEvents(s.up->fd(), s.up_token, &s.up_events, EPOLLIN | EPOLLRDHUP);
  }
  if (s.phase == LoopStream::Phase::kHead) {
    bool complete = false;
    Status st = s.up->ReadHeadNow(&complete);
    if (!st.ok()) {
      UpstreamTransportFailure(c, st);
      return;
    }
    if (!complete) return;
    OnUpstreamHead(c);
    return;
  }
  if (s.phase == LoopStream::Phase::kErrorBody) {
    while (true) {
      const auto r = s.up->ReadBodyNow(&s.error_body);
      if (r == UpstreamConn::ReadResult::kWouldBlock && s.error_body.size() <= kMaxErrorBodyBytes)
        return;  // more later
      if (r == UpstreamConn::ReadResult::kData && s.error_body.size() <= kMaxErrorBodyBytes)
        continue;
      if (s.error_body.size() > kMaxErrorBodyBytes) s.error_body.resize(kMaxErrorBodyBytes);
      DropUpstream(s, r == UpstreamConn::ReadResult::kDone);
      DecideOnErrorBody(c);
      return;
    }
  }
  if (s.phase == LoopStream::Phase::kBody) PumpBody(c);
}

void Gateway::Impl::OnUpstreamHead(ClientConn* c) {
  LoopStream& s = *c->stream;
  Exchange& ex = *s.ex;
  s.up_status = s.up->status();
  s.up_content_type = s.up->content_type();
  if (s.up_content_type.empty()) s.up_content_type = "application/json";
  s.last_upstream_ns = NowNs();
  if (s.up_status < 200 || s.up_status >= 300) {
    s.phase = LoopStream::Phase::kErrorBody;
    PumpUpstream(c);
    return;
  }
  s.phase = LoopStream::Phase::kBody;
  if (!s.headers_sent) {
    // Our response starts now, while the model may still be prefilling.
    s.headers_sent = true;
    s.sse = s.up_content_type.find("text/event-stream") != std::string::npos;
    const RouteDecision& d = ex.rr.decision;
    std::string& o = c->out;
    o += "HTTP/1.1 " + std::to_string(s.up_status) + " " + ReasonPhrase(s.up_status) + "\r\n";
    o += "Content-Type: " + s.up_content_type + "\r\n";
    o += RequestIdHeader(c->request_id);
    if (!d.route.empty()) o += "X-Octet-Route: " + d.route + "\r\n";
    if (!d.pool.empty()) o += "X-Octet-Pool: " + d.pool + "\r\n";
    if (!d.replica.empty()) o += "X-Octet-Replica: " + d.replica + "\r\n";
    if (s.sse) o += "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n";
    if (c->req.http11)
      o += "Transfer-Encoding: chunked\r\n";
    else
      o += "Connection: close\r\n";
    o += "\r\n";
    s.last_client_write_ns = NowNs();
    Flush(c);
    if (c->dead) return;
  }
  PumpBody(c);
}

// Relays what the upstream has sent: one read, one write to the client.
void Gateway::Impl::PumpBody(ClientConn* c) {
  LoopStream& s = *c->stream;
  while (!s.paused && s.up) {
    s.piece.clear();
    const auto r = s.up->ReadBodyNow(&s.piece);
    if (!s.piece.empty()) {
      s.last_upstream_ns = NowNs();
      s.counter.Feed(s.piece);
      s.body_started = true;
      StreamWrite(c, s.piece);
      if (c->dead) return;
      if (c->unsent() >= kClientHighWater) {
        // Back-pressure: leave the bytes in the upstream's socket until the client drains.
        s.paused = true;
        ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, s.up->fd(), nullptr);
        s.up_events = 0;
      }
    }
    switch (r) {
      case UpstreamConn::ReadResult::kData:
        return;  // epoll says when more arrives (level-triggered)
      case UpstreamConn::ReadResult::kWouldBlock:
        return;
      case UpstreamConn::ReadResult::kDone:
        core->ReportSuccess(s.ex->rr.lease.get(), *s.ex->rr.pool->spec);
        DropUpstream(s, true);
        EndStream(c);
        return;
      case UpstreamConn::ReadResult::kError:
        BodyFailure(c, s.up->error());
        return;
    }
  }
}

void Gateway::Impl::StreamWrite(ClientConn* c, std::string_view data) {
  LoopStream& s = *c->stream;
  if (data.empty()) return;
  if (c->req.http11) {
    char size[32];
    const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    c->out.append(size, static_cast<size_t>(n));
    c->out.append(data);
    c->out += "\r\n";
  } else {
    c->out.append(data);
  }
  if (!s.wrote_any) {
    s.wrote_any = true;
    s.ex->rr.pool->counters->ttft.Record(NowNs() - s.ex->start_ns);
  }
  if (data.size() >= 2) {
    s.tail[0] = data[data.size() - 2];
    s.tail[1] = data[data.size() - 1];
  } else {
    s.tail[0] = s.tail[1];
    s.tail[1] = data[0];
  }
  s.last_client_write_ns = NowNs();
  Flush(c);
}

// A transport failure before the body (connect, send, no head, broken head).
void Gateway::Impl::UpstreamTransportFailure(ClientConn* c, const Status& st) {
  LoopStream& s = *c->stream;
  Exchange& ex = *s.ex;
  const bool reused = s.reused;
  DropUpstream(s, false);
  // A reused keep-alive connection the server closed meanwhile gets one more
  // try on a fresh connection to the same replica (not the replica's fault).
  if (reused && st.code() != StatusCode::kDeadlineExceeded) {
    StartAttempt(c, true);
    return;
  }
  ReplicaState* replica = ex.rr.lease.get();
  const std::string what = st.message();
  if (MoveOnAfterTransportFailure(ex.rr, replica, what)) {
    StartAttempt(c, false);
    return;
  }
  const bool timeout = st.code() == StatusCode::kDeadlineExceeded;
  const std::string reason =
      "pool '" + ex.rr.pool->spec->name + "' replica " + replica->url() + ": " + what;
  StreamAnswer(c, timeout ? 504 : 502, "application/json",
               OpenAiError("upstream failed: " + reason, "upstream_error", timeout ? 504 : 502),
               "upstream failed: " + reason);
}

void Gateway::Impl::BodyFailure(ClientConn* c, std::string what) {
  LoopStream& s = *c->stream;
  Exchange& ex = *s.ex;
  DropUpstream(s, false);
  ReplicaState* replica = ex.rr.lease.get();
  if (s.body_started) {
    // Tokens already reached the client: end the stream with an error event.
    ex.failed_after_headers = true;
    ex.error = true;
    ex.error_message = MidStreamFailure(replica, *ex.rr.pool, what);
    EndStream(c);
    return;
  }
  // Nothing forwarded yet: another replica may still answer.
  if (MoveOnAfterTransportFailure(ex.rr, replica, what)) {
    StartAttempt(c, false);
    return;
  }
  const std::string reason =
      "pool '" + ex.rr.pool->spec->name + "' replica " + replica->url() + ": " + what;
  StreamAnswer(c, 502, "application/json",
               OpenAiError("upstream failed: " + reason, "upstream_error", 502),
               "upstream failed: " + reason);
}

void Gateway::Impl::DecideOnErrorBody(ClientConn* c) {
  LoopStream& s = *c->stream;
  Exchange& ex = *s.ex;
  ReplicaState* replica = ex.rr.lease.get();
  if (MoveOnAfterStatus(ex.rr, replica, *ex.rr.pool->spec, s.up_status)) {
    StartAttempt(c, false);
    return;
  }
  const std::string message = "upstream " + replica->url() + " answered " +
                              std::to_string(s.up_status) + ": " + s.error_body.substr(0, 500);
  StreamAnswer(c, s.up_status, s.up_content_type, s.error_body, message);
}

// The stream ends with an answer of its own (an error, or an upstream's
// non-2xx passed through): a whole response when our headers have not gone
// out, else an SSE error event.
void Gateway::Impl::StreamAnswer(ClientConn* c, int status, const std::string& content_type,
                                 const std::string& body, const std::string& message) {
  LoopStream& s = *c->stream;
  Exchange& ex = *s.ex;
  ex.error = ex.error || status >= 500;
  if (s.headers_sent) {
    ex.failed_after_headers = true;
    ex.error = true;
    ex.error_message = message;
    EndStream(c);
    return;
  }
  DropUpstream(s, false);
  ex.rr.lease.Release();
  ex.rr.pool->counters->ttft.Record(NowNs() - ex.start_ns);
  Finish(ex);
  const RouteDecision& d = ex.rr.decision;
  std::string extra;
  if (!d.route.empty()) extra += "X-Octet-Route: " + d.route + "\r\n";
  if (!d.pool.empty()) extra += "X-Octet-Pool: " + d.pool + "\r\n";
  if (!d.replica.empty()) extra += "X-Octet-Replica: " + d.replica + "\r\n";
  dead_streams.push_back(std::move(c->stream));  // `body` may live in it
  WriteSimple(c, status, content_type, body, extra, false);
}

// Ends a stream whose headers went out: the SSE error event when it failed,
// the last chunk, the metrics.
void Gateway::Impl::EndStream(ClientConn* c) {
  LoopStream& s = *c->stream;
  Exchange& ex = *s.ex;
  if (ex.failed_after_headers && s.sse) {
    if (s.tail[0] != '\n' || s.tail[1] != '\n') StreamWrite(c, "\n\n");
    if (c->dead) return;
    StreamWrite(c, SseError(ex.error_message));
    if (c->dead) return;
  }
  DropUpstream(s, false);
  ex.rr.lease.Release();  // the upstream is done: its load drops now
  ex.tokens = s.counter.tokens();
  Finish(ex);
  if (c->req.http11) c->out += "0\r\n\r\n";
  const bool close = !c->req.http11 || !c->req.keep_alive;
  ResponseDone(c, close);
  if (!c->dead && c->state == ClientConn::State::kHead) ProcessInput(c);
}

// The client left (or the gateway stops) during a stream: the upstream
// request is cancelled by closing its connection.
void Gateway::Impl::CancelStream(ClientConn* c) {
  dead_streams.push_back(std::move(c->stream));  // callers up the stack may still hold it
  LoopStream* s = dead_streams.back().get();
  s->ex->rr.pool->counters->cancelled.fetch_add(1, std::memory_order_relaxed);
  DropUpstream(*s, false);
  s->ex->rr.lease.Release();
  s->ex->tokens = s->counter.tokens();
  Finish(*s->ex);
}

int64_t Gateway::Impl::StreamDeadline(const LoopStream& s) const {
  const TimeoutSpec& t = s.ex->rr.pool->spec->timeouts;
  const int64_t read_ns = std::max(t.first_token_ms, t.idle_ms) * 1000000;
  int64_t d = 0;
  switch (s.phase) {
    case LoopStream::Phase::kConnecting:
      d = s.phase_start_ns + t.connect_ms * 1000000;
      break;
    case LoopStream::Phase::kSending:
      d = s.phase_start_ns + std::max<int64_t>(t.connect_ms, 10000) * 1000000;
      break;
    case LoopStream::Phase::kHead:
    case LoopStream::Phase::kErrorBody:
    case LoopStream::Phase::kBody:
      d = s.paused ? 0 : s.last_upstream_ns + read_ns;
      break;
  }
  if (s.headers_sent && s.sse && s.ex->keepalive_ms > 0) {
    const int64_t k = s.last_client_write_ns + s.ex->keepalive_ms * 1000000;
    if (d == 0 || k < d) d = k;
  }
  return d;
}

void Gateway::Impl::OnStreamDeadline(ClientConn* c, int64_t now) {
  LoopStream& s = *c->stream;
  const TimeoutSpec& t = s.ex->rr.pool->spec->timeouts;
  const int64_t read_ms = std::max(t.first_token_ms, t.idle_ms);
  if (s.headers_sent && s.sse && s.ex->keepalive_ms > 0 &&
      now >= s.last_client_write_ns + s.ex->keepalive_ms * 1000000) {
    // An SSE comment between events: clients ignore it, and writing it is how
    // a departed client is noticed while the model prefills.
    if (s.tail[0] == '\n' && s.tail[1] == '\n') {
      StreamWrite(c, ": keepalive\n\n");
      if (c->dead) return;
    } else {
      s.last_client_write_ns = now;
    }
  }
  switch (s.phase) {
    case LoopStream::Phase::kConnecting:
      if (now >= s.phase_start_ns + t.connect_ms * 1000000)
        UpstreamTransportFailure(c, DeadlineExceededError("connecting timed out after " +
                                                          std::to_string(t.connect_ms) + " ms"));
      return;
    case LoopStream::Phase::kSending:
      if (now >= s.phase_start_ns + std::max<int64_t>(t.connect_ms, 10000) * 1000000)
        UpstreamTransportFailure(c, DeadlineExceededError("sending the request timed out"));
      return;
    case LoopStream::Phase::kHead:
    case LoopStream::Phase::kErrorBody:
      if (now >= s.last_upstream_ns + read_ms * 1000000)
        UpstreamTransportFailure(c, DeadlineExceededError("no response from the upstream within " +
                                                          std::to_string(read_ms) + " ms"));
      return;
    case LoopStream::Phase::kBody:
      if (!s.paused && now >= s.last_upstream_ns + read_ms * 1000000)
        BodyFailure(c, "no data for " + std::to_string(read_ms) + " ms");
      return;
  }
}


GatewayOptions GatewayOptionsFromPolicy(const GatewaySpec& spec) {
  GatewayOptions o;
  o.host = spec.host;
  o.port = spec.port;
  o.threads = spec.threads;
  return o;
}

Gateway::Gateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Gateway::~Gateway() { Stop(); }

int Gateway::port() const { return impl_->port; }
const std::string& Gateway::host() const { return impl_->options.host; }

namespace {

// A listening socket on host:port (port 0: any free port); *bound_port is the port.
Result<int> Listen(const std::string& host, int port, int* bound_port) {
  const std::string where = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(),
                             &hints, &found);
      rc != 0 || !found)
    return UnavailableError("gateway: cannot resolve " + where + ": " + ::gai_strerror(rc));
  std::string last_error = "no address";
  for (addrinfo* ai = found; ai; ai = ai->ai_next) {
    const int fd =
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 1024) != 0) {
      last_error = std::strerror(errno);
      ::close(fd);
      continue;
    }
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    *bound_port = addr.ss_family == AF_INET6
                      ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                      : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    ::freeaddrinfo(found);
    return fd;
  }
  ::freeaddrinfo(found);
  return UnavailableError("gateway: cannot bind " + where + " (" + last_error +
                          "; in use, or not an address here)");
}

}  // namespace

Result<std::unique_ptr<Gateway>> Gateway::Start(Router* router, const GatewayOptions& options) {
  // A client that disconnects must cost a failed write, not the process.
  std::signal(SIGPIPE, SIG_IGN);
  auto impl = std::make_unique<Impl>();
  impl->router = router;
  impl->core = &router->core();
  impl->options = options;
  impl->options.max_header_bytes = std::max<size_t>(options.max_header_bytes, 1024);
  impl->workers.set_max_threads(static_cast<size_t>(std::max(4, options.threads)));
  OCTET_ASSIGN_OR_RETURN(impl->listen_fd, Listen(options.host, options.port, &impl->port));
  impl->epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  impl->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl->epoll_fd < 0 || impl->wake_fd < 0) {
    const std::string why = std::strerror(errno);
    ::close(impl->listen_fd);
    if (impl->epoll_fd >= 0) ::close(impl->epoll_fd);
    if (impl->wake_fd >= 0) ::close(impl->wake_fd);
    return UnavailableError("gateway: cannot create its event loop: " + why);
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = Impl::kListenToken;
  ::epoll_ctl(impl->epoll_fd, EPOLL_CTL_ADD, impl->listen_fd, &ev);
  ev.data.u64 = Impl::kWakeToken;
  ::epoll_ctl(impl->epoll_fd, EPOLL_CTL_ADD, impl->wake_fd, &ev);
  Impl* raw = impl.get();
  impl->loop_thread = std::thread([raw] {
    ::pthread_setname_np(::pthread_self(), "octet-gw-loop");  // for top/perf
    raw->Loop();
  });
  OCTET_LOG(INFO) << "router gateway listening on http://" << options.host << ":" << impl->port;
  return std::unique_ptr<Gateway>(new Gateway(std::move(impl)));
}

void Gateway::Stop() {
  if (!impl_ || impl_->stopped) return;
  impl_->stopped = true;
  impl_->stopping.store(true);
  {
    std::lock_guard<std::mutex> lock(impl_->active_mu);
    for (const auto& ex : impl_->active) Impl::Cancel(*ex);
  }
  impl_->Wake();
  if (impl_->loop_thread.joinable()) impl_->loop_thread.join();
  // Workers see their clients gone (CloseConn) and finish; a worker blocked in
  // an upstream exchange finishes within that exchange's timeouts.
  impl_->workers.Shutdown();
  impl_->upstream_threads.Shutdown();
  ::close(impl_->listen_fd);
  ::close(impl_->epoll_fd);
  ::close(impl_->wake_fd);
}

}  // namespace octet::router
