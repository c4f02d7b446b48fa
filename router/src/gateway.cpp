// The gateway's request path: parse -> RouterCore::Route (classify + pick
// replica) -> forward with retries -> pass the response through.
//
// Streams from plain-http pools (the usual case) run on their HTTP worker
// thread alone: OpenDirect() connects (a keep-alive UpstreamConn when one is
// idle), sends the request and reads the upstream's head, with the retries;
// httplib writes our headers after the handler returns and then calls the
// content provider, StreamDirect(), which reads the body from the same
// connection and writes it to the client, one recv(2) per token.
//
// When the policy has an https replica, a streaming request uses its HTTP
// worker thread (which owns the client socket) and an upstream thread from a
// reusable pool that runs the blocking httplib::Client exchange. The handler
// returns once the upstream has sent 2xx headers; the upstream thread then
// writes each body chunk straight to the client through the provider's sink.
//
// Either way, retries (another replica, the fallback pool, escalation) happen
// as long as no body byte has reached the client.
#include "octet/router/gateway.h"

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <deque>
#include <mutex>
#include <set>
#include <thread>

#include "octet/base/deadline.h"
#include "octet/base/file_util.h"
#include "octet/base/log.h"
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
    size_t start = 0;
    while (start < data.size()) {
      const size_t nl = data.find('\n', start);
      if (nl == std::string_view::npos) {
        if (line_.size() < (1u << 20)) line_.append(data.substr(start));
        return;
      }
      line_.append(data.substr(start, nl - start));
      Line(line_);
      line_.clear();
      start = nl + 1;
    }
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
  void Line(std::string_view line) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.substr(0, 5) != "data:") return;
    std::string_view payload = line.substr(5);
    while (!payload.empty() && payload.front() == ' ') payload.remove_prefix(1);
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
  std::string line_;
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

bool IsLoopback(const std::string& addr) {
  return addr == "127.0.0.1" || addr == "::1" || addr.rfind("127.", 0) == 0 ||
         addr.rfind("::ffff:127.", 0) == 0;
}

// Upstream exchanges run on these threads. Threads are started on demand and
// kept for reuse (a stream costs a thread handoff, not a thread creation).
class UpstreamThreads {
 public:
  ~UpstreamThreads() { Shutdown(); }
  void Submit(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(fn));
    if (idle_ >= static_cast<int>(tasks_.size())) {
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
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;  // guarded by mu_
  std::vector<std::thread> threads_;         // guarded by mu_
  int idle_ = 0;                             // threads waiting for a task; guarded by mu_
  bool shutdown_ = false;                    // guarded by mu_
};

}  // namespace

// One proxied request, shared by the HTTP worker (handler, then content
// provider), the upstream thread, and the response's releaser.
//
// Streaming hand-off: the handler returns as soon as the upstream has answered
// 2xx headers, so our headers go out while the model is still prefilling. The
// provider then publishes its DataSink and blocks; the upstream thread writes
// every body chunk straight to the client socket through it (one thread wake
// per token, not two). Bytes that arrive before the sink is published wait in
// `pending`. Nothing is retried once a body byte has been forwarded.
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
  UpstreamConn* active_conn = nullptr;  // direct path: the connection a read may block on

  // Direct streaming path (plain-http pools): the HTTP worker thread owns these.
  bool direct = false;
  std::unique_ptr<UpstreamConn> conn;  // positioned at the body of a 2xx response
  SseTokenCounter sse;

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

struct Gateway::Impl {
  Router* router = nullptr;
  RouterCore* core = nullptr;
  GatewayOptions options;
  httplib::Server server;
  std::thread listener;
  UpstreamThreads upstream_threads;
  int port = 0;
  int listen_fd = -1;

  std::mutex active_mu;
  std::set<std::shared_ptr<Exchange>> active;  // streams in progress; guarded by active_mu
  std::atomic<bool> stopping{false};
  bool stopped = false;

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
    if (ex.active_conn) ex.active_conn->Abort();
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

  void SetupRoutes();
  void HandleCompletion(const httplib::Request& req, httplib::Response& res,
                        const std::string& path);
  void HandleRoute(const httplib::Request& req, httplib::Response& res);
  void HandleModels(httplib::Response& res);
  void HandleHealth(httplib::Response& res);
  void HandlePolicy(const httplib::Request& req, httplib::Response& res);
  bool AdminAllowed(const httplib::Request& req) const;
  void RunUpstream(const std::shared_ptr<Exchange>& ex);
  bool OpenDirect(Exchange& ex);
  bool StreamDirect(Exchange& ex, httplib::DataSink& sink, bool sse);
  void HandleDirectStream(const std::shared_ptr<Exchange>& ex, httplib::Response& res);
  bool Deliver(Exchange& ex, const char* data, size_t n);
  static bool WriteLocked(Exchange& ex, std::string_view data);
  void Finish(Exchange& ex);
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

// True when every replica the policy can send to speaks plain http (the direct
// streaming path's UpstreamConn has no TLS).
bool AllPlainHttp(const PolicyRuntime& snapshot) {
  for (const auto& pool : snapshot.pools)
    for (const auto& r : pool->replicas)
      if (r->parsed().scheme != "http") return false;
  return true;
}

}  // namespace

// Writes to the client through the published sink; sink_mu must be held.
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
      bool escalate_status = false;
      if (ex.rr.route) {
        const auto& codes = ex.rr.route->escalate.on_status;
        escalate_status = std::find(codes.begin(), codes.end(), status) != codes.end();
      }
      if (escalate_status && core->Escalate(ex.rr)) {
        core->ReportSuccess(replica, spec);
        replica->ReleaseClient(std::move(client));
        continue;
      }
      const bool server_error = status >= 500;
      if (server_error || status == 429) {
        if (core->Retry(ex.rr, server_error ? FailureKind::kStatus5xx : FailureKind::kStatus429)) {
          replica->ReleaseClient(std::move(client));
          continue;
        }
      } else {
        core->ReportSuccess(replica, spec);  // a 4xx is the client's problem, not the replica's
      }
      replica->ReleaseClient(std::move(client));
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
      core->ReportFailure(replica, pool, FailureKind::kMidStream);
      OCTET_LOG(WARNING) << "upstream " << replica->url() << " failed mid-stream: " << what;
      std::lock_guard<std::mutex> lock(ex.mu);
      ex.failed_after_headers = true;
      ex.error = true;
      ex.error_message = "the upstream failed mid-stream (" + what + ")";
      ex.tokens = sse.tokens();
      break;
    }
    if (core->Retry(ex.rr, FailureKind::kConnect)) {
      OCTET_LOG(DEBUG) << "upstream " << replica->url() << ": " << what << "; retrying on "
                       << ex.rr.decision.replica;
      continue;
    }
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

// ---- Direct streaming path (plain-http pools) --------------------------------
//
// The HTTP worker thread does the whole exchange: OpenDirect() in the handler
// (connect, send, read the upstream's head, retries), then StreamDirect() in
// the content provider reads the body and writes it to the client, on the same
// thread. A token costs one recv(2) and one write to the client; no thread
// hand-off. Several upstream events that arrived together go out as one write.

bool Gateway::Impl::OpenDirect(Exchange& ex) {
  while (true) {
    if (stopping.load()) return false;  // unanswered: the caller says 503
    ReplicaState* replica = ex.rr.lease.get();
    const PoolRuntime& pool = *ex.rr.pool;
    const PoolSpec& spec = *pool.spec;
    const TimeoutSpec& t = spec.timeouts;
    const int64_t read_ms = std::max(t.first_token_ms, t.idle_ms);
    const int64_t write_ms = std::max<int64_t>(t.connect_ms, 10000);
    const ReplicaUrl& url = replica->parsed();

    const std::string body = UpstreamBody(ex, spec);
    std::string request;
    request.reserve(body.size() + 512);
    const bool v6 = url.host.find(':') != std::string::npos;
    request += "POST " + url.prefix + ex.path +
               " HTTP/1.1\r\nHost: " + (v6 ? "[" + url.host + "]" : url.host) + ":" +
               std::to_string(url.port) + "\r\n";
    for (const auto& [name, value] : ex.forward_headers) request += name + ": " + value + "\r\n";
    if (!replica->api_key().empty())
      request += "Authorization: Bearer " + replica->api_key() + "\r\n";
    request += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
               "\r\n\r\n";
    request += body;

    // A reused keep-alive connection the server closed meanwhile gets one more
    // try on a fresh connection to the same replica (not the replica's fault).
    std::unique_ptr<UpstreamConn> conn = replica->AcquireConn();
    Status st;
    for (int attempt = 0; attempt < 2; ++attempt) {
      const bool reused = conn != nullptr;
      if (!conn) {
        auto c = UpstreamConn::Connect(url.host, url.port, t.connect_ms);
        if (!c.ok()) {
          st = c.status();
          break;
        }
        conn = std::move(*c);
      }
      {
        std::lock_guard<std::mutex> lock(ex.mu);
        if (ex.cancelled) return false;
        ex.active_conn = conn.get();
      }
      st = conn->Send(request, write_ms);
      if (st.ok()) st = conn->ReadHead(read_ms);
      bool cancelled;
      {
        std::lock_guard<std::mutex> lock(ex.mu);
        ex.active_conn = nullptr;
        cancelled = ex.cancelled;
      }
      if (cancelled) return false;
      // A timeout is the replica's answer, not a stale connection's.
      if (st.ok() || !reused || st.code() == StatusCode::kDeadlineExceeded) break;
      conn.reset();
    }

    if (!st.ok()) {  // transport failure (connect, send, no head in time)
      const std::string what = st.message();
      if (core->Retry(ex.rr, FailureKind::kConnect)) {
        OCTET_LOG(DEBUG) << "upstream " << replica->url() << ": " << what << "; retrying on "
                         << ex.rr.decision.replica;
        continue;
      }
      const bool timeout = st.code() == StatusCode::kDeadlineExceeded;
      const std::string reason = "pool '" + spec.name + "' replica " + replica->url() + ": " + what;
      AnswerWith(ex, timeout ? 504 : 502, "application/json",
                 OpenAiError("upstream failed: " + reason, "upstream_error", timeout ? 504 : 502),
                 "upstream failed: " + reason);
      return false;
    }

    const int status = conn->status();
    std::string content_type = conn->content_type();
    if (content_type.empty()) content_type = "application/json";
    if (status >= 200 && status < 300) {
      std::lock_guard<std::mutex> lock(ex.mu);
      ex.conn = std::move(conn);
      if (!ex.headers_ready) {
        ex.status = status;
        ex.content_type = content_type;
        ex.headers_ready = true;
      }
      return true;
    }

    // A non-2xx answer: read its body (bounded), then retry, escalate or pass it on.
    std::string error_body;
    {
      std::lock_guard<std::mutex> lock(ex.mu);
      if (ex.cancelled) return false;
      ex.active_conn = conn.get();
    }
    UpstreamConn::ReadResult r = UpstreamConn::ReadResult::kData;
    while (r == UpstreamConn::ReadResult::kData && error_body.size() <= kMaxErrorBodyBytes)
      r = conn->ReadBody(read_ms, &error_body);
    {
      std::lock_guard<std::mutex> lock(ex.mu);
      ex.active_conn = nullptr;
      if (ex.cancelled) return false;
    }
    if (error_body.size() > kMaxErrorBodyBytes) error_body.resize(kMaxErrorBodyBytes);
    if (r == UpstreamConn::ReadResult::kDone && conn->reusable())
      replica->ReleaseConn(std::move(conn));
    bool escalate_status = false;
    if (ex.rr.route) {
      const auto& codes = ex.rr.route->escalate.on_status;
      escalate_status = std::find(codes.begin(), codes.end(), status) != codes.end();
    }
    if (escalate_status && core->Escalate(ex.rr)) {
      core->ReportSuccess(replica, spec);
      continue;
    }
    const bool server_error = status >= 500;
    if (server_error || status == 429) {
      if (core->Retry(ex.rr, server_error ? FailureKind::kStatus5xx : FailureKind::kStatus429))
        continue;
    } else {
      core->ReportSuccess(replica, spec);  // a 4xx is the client's problem, not the replica's
    }
    const std::string message = "upstream " + replica->url() + " answered " +
                                std::to_string(status) + ": " + error_body.substr(0, 500);
    AnswerWith(ex, status, content_type, std::move(error_body), message);
    return false;
  }
}

// The content provider of a direct stream: true when the response ended as it
// should (completely, or with an SSE error event), false when the client left
// or the gateway stops.
bool Gateway::Impl::StreamDirect(Exchange& ex, httplib::DataSink& sink, bool sse) {
  {
    std::lock_guard<std::mutex> lock(ex.sink_mu);
    ex.sink = &sink;
  }
  auto end_stream = [&](bool ok) {
    std::lock_guard<std::mutex> lock(ex.sink_mu);
    if (ok) {
      if (ex.failed_after_headers && sse) {
        if (ex.tail[0] != '\n' || ex.tail[1] != '\n') WriteLocked(ex, "\n\n");
        WriteLocked(ex, SseError(ex.error_message));
      }
      sink.done();
    }
    ex.sink = nullptr;
    return ok;
  };
  auto client_gone = [&] {
    Cancel(ex);
    return end_stream(false);
  };
  std::string piece;
  int64_t last_ns = NowNs();  // the last upstream byte (or the head)
  while (true) {
    {
      std::lock_guard<std::mutex> lock(ex.mu);
      if (ex.cancelled) return end_stream(false);
      ex.active_conn = ex.conn.get();
    }
    if (stopping.load()) return client_gone();
    ReplicaState* replica = ex.rr.lease.get();
    const PoolRuntime& pool = *ex.rr.pool;
    const PoolSpec& spec = *pool.spec;
    const int64_t read_ms = std::max(spec.timeouts.first_token_ms, spec.timeouts.idle_ms);
    const int64_t waited_ms = (NowNs() - last_ns) / 1000000;
    int64_t wait_ms = std::max<int64_t>(read_ms - waited_ms, 1);
    if (sse && ex.keepalive_ms > 0) wait_ms = std::min(wait_ms, ex.keepalive_ms);
    piece.clear();
    const UpstreamConn::ReadResult r = ex.conn->ReadBody(wait_ms, &piece);
    {
      std::lock_guard<std::mutex> lock(ex.mu);
      ex.active_conn = nullptr;
      if (ex.cancelled) return end_stream(false);
    }
    if (!piece.empty()) {
      last_ns = NowNs();
      ex.sse.Feed(piece);
      std::lock_guard<std::mutex> lock(ex.sink_mu);
      ex.body_started = true;
      if (!WriteLocked(ex, piece)) {
        ex.sink = nullptr;
        Cancel(ex);
        return false;
      }
    }
    if (r == UpstreamConn::ReadResult::kData) continue;
    if (r == UpstreamConn::ReadResult::kDone) {
      core->ReportSuccess(replica, spec);
      std::unique_ptr<UpstreamConn> conn;
      {
        std::lock_guard<std::mutex> lock(ex.mu);
        conn = std::move(ex.conn);
      }
      if (conn->reusable()) replica->ReleaseConn(std::move(conn));
      ex.rr.lease.Release();  // the upstream is done: its load drops now
      return end_stream(true);
    }
    if (r == UpstreamConn::ReadResult::kTimedOut && (NowNs() - last_ns) / 1000000 < read_ms) {
      // An SSE comment between events: clients ignore it, and writing it is
      // how a departed client is noticed while the model prefills.
      std::lock_guard<std::mutex> lock(ex.sink_mu);
      if (ex.tail[0] == '\n' && ex.tail[1] == '\n' && !WriteLocked(ex, ": keepalive\n\n")) {
        ex.sink = nullptr;
        Cancel(ex);
        return false;
      }
      continue;
    }
    // The upstream failed: timed out past read_ms, dropped, or broke the framing.
    const std::string what = r == UpstreamConn::ReadResult::kTimedOut
                                 ? "no data for " + std::to_string(read_ms) + " ms"
                                 : ex.conn->error();
    {
      std::lock_guard<std::mutex> lock(ex.mu);
      ex.conn.reset();
    }
    bool body_started;
    {
      std::lock_guard<std::mutex> lock(ex.sink_mu);
      body_started = ex.body_started;
    }
    if (body_started) {
      // Tokens already reached the client: end the stream with an error event.
      core->ReportFailure(replica, pool, FailureKind::kMidStream);
      OCTET_LOG(WARNING) << "upstream " << replica->url() << " failed mid-stream: " << what;
      {
        std::lock_guard<std::mutex> lock(ex.mu);
        ex.failed_after_headers = true;
        ex.error = true;
        ex.error_message = "the upstream failed mid-stream (" + what + ")";
      }
      ex.rr.lease.Release();
      return end_stream(true);
    }
    // Nothing forwarded yet: another replica may still answer.
    if (core->Retry(ex.rr, FailureKind::kConnect)) {
      OCTET_LOG(DEBUG) << "upstream " << replica->url() << ": " << what << "; retrying on "
                       << ex.rr.decision.replica;
      if (OpenDirect(ex)) {
        last_ns = NowNs();
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(ex.mu);
        if (ex.cancelled || stopping.load()) return end_stream(false);
      }
    } else {
      const std::string reason = "pool '" + spec.name + "' replica " + replica->url() + ": " + what;
      AnswerWith(ex, 502, "application/json", "", "upstream failed: " + reason);
    }
    ex.rr.lease.Release();
    return end_stream(true);
  }
}

void Gateway::Impl::HandleDirectStream(const std::shared_ptr<Exchange>& ex,
                                       httplib::Response& res) {
  ex->direct = true;
  Register(ex);
  if (!OpenDirect(*ex)) {
    // Answered without a stream (an error, passed through or ours), or cancelled.
    Unregister(ex);
    ex->rr.lease.Release();
    ex->rr.pool->counters->ttft.Record(NowNs() - ex->start_ns);
    Finish(*ex);
    SetDecisionHeaders(res, ex->rr.decision);
    std::lock_guard<std::mutex> lock(ex->mu);
    if (ex->status == 0) {  // cancelled before any answer: the gateway is stopping
      res.status = 503;
      res.set_content(OpenAiError("the router is shutting down", "upstream_error", 503),
                      "application/json");
      return;
    }
    res.status = ex->status;
    res.set_content(ex->unary_body, ex->content_type);
    return;
  }
  res.status = ex->status;
  SetDecisionHeaders(res, ex->rr.decision);
  const bool sse = ex->content_type.find("text/event-stream") != std::string::npos;
  if (sse) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
  }
  res.set_chunked_content_provider(
      ex->content_type,
      [this, ex, sse](size_t, httplib::DataSink& sink) { return StreamDirect(*ex, sink, sse); },
      [this, ex](bool success) {
        {
          std::lock_guard<std::mutex> lock(ex->sink_mu);
          ex->sink = nullptr;  // the sink dies with this response
        }
        if (!success) {  // the client did not get the whole response: it left (or we stop)
          ex->rr.pool->counters->cancelled.fetch_add(1, std::memory_order_relaxed);
          Cancel(*ex);
        }
        {
          std::lock_guard<std::mutex> lock(ex->mu);
          ex->conn.reset();  // an unfinished upstream response: closing it cancels it
          ex->tokens = ex->sse.tokens();
        }
        ex->rr.lease.Release();
        Unregister(ex);
        Finish(*ex);
      });
}

void Gateway::Impl::Finish(Exchange& ex) {
  PoolCounters& c = *ex.rr.pool->counters;
  c.tokens.fetch_add(ex.tokens, std::memory_order_relaxed);
  if (ex.error) c.errors.fetch_add(1, std::memory_order_relaxed);
  c.duration.Record(NowNs() - ex.start_ns);
}

void Gateway::Impl::HandleCompletion(const httplib::Request& req, httplib::Response& res,
                                     const std::string& path) {
  const int64_t t0 = NowNs();
  core->CountRequest();
  auto snapshot = core->Snapshot();
  const GatewaySpec& gw = snapshot->policy->gateway;
  if (static_cast<int64_t>(req.body.size()) > gw.max_body_bytes) {
    core->CountBadRequest();
    res.status = 413;
    res.set_content(OpenAiError("request body is larger than gateway.max_body_bytes",
                                "invalid_request_error", 413),
                    "application/json");
    return;
  }
  auto ex = std::make_shared<Exchange>();
  ex->body = json::parse(req.body, nullptr, false);
  if (ex->body.is_discarded() || !ex->body.is_object()) {
    core->CountBadRequest();
    res.status = 400;
    res.set_content(
        OpenAiError("the request body is not a JSON object", "invalid_request_error", 400),
        "application/json");
    return;
  }
  const RequestFeatures features = ExtractFeatures(ex->body);
  const HeaderLookup headers = [&req](std::string_view name) {
    return req.get_header_value(std::string(name));
  };
  auto routed = core->Route(ex->body, features, headers);
  core->RecordOverhead(NowNs() - t0);
  if (!routed.ok()) {
    const bool busy = routed.status().code() == StatusCode::kResourceExhausted;
    res.status = busy ? 429 : 503;
    if (busy) res.set_header("Retry-After", "1");
    res.set_content(OpenAiError(routed.status().message(),
                                busy ? "rate_limit_error" : "unavailable", res.status),
                    "application/json");
    return;
  }
  ex->rr = std::move(*routed);
  ex->original_body = req.body;
  ex->path = path;
  ex->stream = features.stream;
  ex->start_ns = t0;
  ex->keepalive_ms = gw.stream_keepalive_ms;
  for (const char* h : {"Accept", "X-Request-Id", "Traceparent"})
    if (req.has_header(h)) ex->forward_headers.emplace(h, req.get_header_value(h));
  const std::string& session_header = snapshot->policy->stickiness.header;
  if (!session_header.empty() && req.has_header(session_header))
    ex->forward_headers.emplace(session_header, req.get_header_value(session_header));
  ex->forward_headers.emplace("X-Forwarded-For", req.remote_addr);

  if (!ex->stream) {
    RunUpstream(ex);
    ex->rr.pool->counters->ttft.Record(NowNs() - t0);
    Finish(*ex);
    res.status = ex->status;
    SetDecisionHeaders(res, ex->rr.decision);
    res.set_content(ex->unary_body, ex->content_type);
    return;
  }

  if (options.direct_streaming && AllPlainHttp(*snapshot)) {
    HandleDirectStream(ex, res);
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

void Gateway::Impl::SetupRoutes() {
  server.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleCompletion(req, res, "/v1/chat/completions");
  });
  server.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleCompletion(req, res, "/v1/completions");
  });
  server.Post("/v1/route", [this](const httplib::Request& req, httplib::Response& res) {
    HandleRoute(req, res);
  });
  server.Get("/v1/models",
             [this](const httplib::Request&, httplib::Response& res) { HandleModels(res); });
  server.Get("/health",
             [this](const httplib::Request&, httplib::Response& res) { HandleHealth(res); });
  server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(router->MetricsText(), "text/plain; version=0.0.4");
  });
  server.Get("/v1/router/stats", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(Dump(router->Stats().ToJson()), "application/json");
  });
  server.Get("/v1/router/policy", [this](const httplib::Request& req, httplib::Response& res) {
    HandlePolicy(req, res);
  });
  server.Post("/v1/router/policy", [this](const httplib::Request& req, httplib::Response& res) {
    HandlePolicy(req, res);
  });
  server.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown error";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        OCTET_LOG(ERROR) << "gateway handler failed: " << what;
        res.status = 500;
        res.set_content(OpenAiError("internal router error: " + what, "internal_error", 500),
                        "application/json");
      });
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

Result<std::unique_ptr<Gateway>> Gateway::Start(Router* router, const GatewayOptions& options) {
  // A client that disconnects must cost a failed write, not the process.
  std::signal(SIGPIPE, SIG_IGN);
  auto impl = std::make_unique<Impl>();
  impl->router = router;
  impl->core = &router->core();
  impl->options = options;
  const int threads = std::max(4, options.threads);
  impl->server.new_task_queue = [threads] {
    return new httplib::ThreadPool(static_cast<size_t>(threads));
  };
  impl->server.set_tcp_nodelay(true);
  impl->server.set_keep_alive_timeout(5);
  impl->server.set_read_timeout(std::chrono::seconds(60));
  impl->server.set_write_timeout(std::chrono::seconds(30));
  auto snap = impl->core->Snapshot();
  if (snap)
    impl->server.set_payload_max_length(static_cast<size_t>(snap->policy->gateway.max_body_bytes));
  Impl* raw = impl.get();
  impl->server.set_socket_options([raw](int fd) {
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    raw->listen_fd = fd;
  });
  impl->SetupRoutes();
  if (options.port == 0) {
    impl->port = impl->server.bind_to_any_port(options.host);
    if (impl->port <= 0)
      return UnavailableError("gateway: cannot bind " + options.host + " (any port)");
  } else {
    if (!impl->server.bind_to_port(options.host, options.port))
      return UnavailableError("gateway: cannot bind " + options.host + ":" +
                              std::to_string(options.port) + " (in use, or not an address here)");
    impl->port = options.port;
  }
  // httplib listens with a backlog of 5; a burst of hundreds of clients needs
  // more, and listen(2) on a listening socket just updates it.
  if (impl->listen_fd >= 0) ::listen(impl->listen_fd, 1024);
  impl->listener = std::thread([raw] { raw->server.listen_after_bind(); });
  // Wait (bounded) until the accept loop runs, so callers can connect at once.
  const Deadline deadline = Deadline::AfterMs(5000);
  while (!impl->server.is_running() && !deadline.expired())
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  OCTET_LOG(INFO) << "router gateway listening on http://" << options.host << ":" << impl->port;
  return std::unique_ptr<Gateway>(new Gateway(std::move(impl)));
}

void Gateway::Stop() {
  if (!impl_ || impl_->stopped) return;
  impl_->stopped = true;
  impl_->stopping.store(true);
  impl_->server.stop();
  {
    std::lock_guard<std::mutex> lock(impl_->active_mu);
    for (const auto& ex : impl_->active) Impl::Cancel(*ex);
  }
  if (impl_->listener.joinable()) impl_->listener.join();
  impl_->upstream_threads.Shutdown();
}

}  // namespace octet::router
