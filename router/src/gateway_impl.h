// The gateway's internals, shared by its files and by nothing else: one
// proxied request (Exchange), a streaming completion relayed by the loop
// (LoopStream), what the gateway keeps per client connection (ConnState) and
// Gateway::Impl, the handler of the shared HTTP core (octet/base/http/server.h),
// which owns the event loop, the connections, parsing, limits and deadlines.
// Impl's members are defined by responsibility:
//   gateway.cpp         start, stop; admission; the retry decisions both stream paths share
//   gateway_conn.cpp    the core's callbacks: dispatch, simple answers, stream hooks
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
#include <ctime>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "octet/base/http/request.h"
#include "octet/base/http/response.h"
#include "octet/base/http/server.h"
#include "octet/base/json.h"
#include "octet/base/log.h"
#include "octet/base/task_threads.h"
#include "octet/base/thread_annotations.h"
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
// its upstream (loop streams); workers' writes block at the same mark.
constexpr size_t kClientHighWater = http::Server::kHighWater;

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

  // The hand-off between the worker, the upstream thread and the releaser,
  // and the final figures (the loop thread, alone on a loop stream, takes the
  // lock too: uncontended, and once or twice a stream).
  Mutex mu;
  std::condition_variable cv;
  bool headers_ready GUARDED_BY(mu) = false;  // status and content type are decided (2xx, or final)
  bool upstream_done GUARDED_BY(mu) = false;  // the upstream thread has finished
  bool cancelled GUARDED_BY(mu) = false;      // the client left or the gateway stops
  bool failed_after_headers GUARDED_BY(mu) = false;  // ended badly after our headers went out
  int status GUARDED_BY(mu) = 0;
  std::string content_type GUARDED_BY(mu);
  std::string error_message GUARDED_BY(mu);  // for the SSE error event when failed_after_headers
  std::string unary_body GUARDED_BY(mu);     // non-streaming: the whole response
  httplib::Client* active_client GUARDED_BY(mu) = nullptr;
  uint64_t tokens GUARDED_BY(mu) = 0;  // final figures, read by Finish
  bool error GUARDED_BY(mu) = false;

  // The sink, pending bytes and everything written to the client.
  Mutex sink_mu ACQUIRED_BEFORE(mu);                      // Deliver holds both, in this order
  httplib::DataSink* sink GUARDED_BY(sink_mu) = nullptr;  // set while the provider runs
  std::deque<std::string> pending GUARDED_BY(sink_mu);
  bool body_started GUARDED_BY(sink_mu) = false;  // a body byte was forwarded (or queued)
  bool wrote_any GUARDED_BY(sink_mu) = false;
  char tail[2] GUARDED_BY(sink_mu) = {'\n', '\n'};  // last two bytes written (SSE boundaries)
};

// A streaming completion relayed by the event loop (plain-http pools).
struct LoopStream {
  std::shared_ptr<Exchange> ex;  // request fields, the routed request, final figures
  enum class Phase { kConnecting, kSending, kHead, kErrorBody, kBody } phase = Phase::kConnecting;
  std::unique_ptr<UpstreamConn> up;
  uint64_t up_token = 0;   // the upstream socket's epoll token (0: none registered)
  uint32_t up_events = 0;  // its epoll interest
  bool reused = false;     // `up` came from the idle keep-alive list
  std::string request;     // the upstream request bytes
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

// What the gateway keeps per client connection (the core's Connection::ext).
struct ConnState : http::Connection::Extension {
  std::unique_ptr<LoopStream> stream;  // a loop stream in progress
  std::string
      request_id;  // of the request: the client's X-Request-Id or ours (sent back, forwarded)
};
inline ConnState& StateOf(http::Connection* c) {
  if (!c->ext) c->ext = std::make_unique<ConnState>();
  return static_cast<ConnState&>(*c->ext);
}
// The request body for `spec`'s pool: the client's, with the model renamed
// when the pool names one (gateway.cpp).
std::string UpstreamBody(const Exchange& ex, const PoolSpec& spec);

struct Gateway::Impl : http::Handler {
  Router* router = nullptr;
  RouterCore* core = nullptr;
  GatewayOptions options;
  std::unique_ptr<http::Server> server;  // the event loop, connections and workers
  TaskThreads upstream_threads;          // httplib::Client exchanges of worker streams

  Mutex active_mu;
  std::set<std::shared_ptr<Exchange>> active GUARDED_BY(active_mu);  // worker streams in progress
  std::atomic<bool> stopping{false};
  bool stopped = false;
  const int64_t started_at = static_cast<int64_t>(std::time(nullptr));  // /v1/models "created"

  // Loop thread only.
  std::vector<std::unique_ptr<LoopStream>> dead_streams;  // ended this round of events

  void Register(const std::shared_ptr<Exchange>& ex) {
    MutexLock lock(active_mu);
    active.insert(ex);
  }
  void Unregister(const std::shared_ptr<Exchange>& ex) {
    MutexLock lock(active_mu);
    active.erase(ex);
  }

  static void Cancel(Exchange& ex) {
    MutexLock lock(ex.mu);
    ex.cancelled = true;
    if (ex.active_client) ex.active_client->stop();
    ex.cv.notify_all();
  }
  // Waits for the upstream thread to finish (it does promptly once cancelled:
  // every upstream read has a timeout).
  static void AwaitUpstream(Exchange& ex) {
    MutexLock lock(ex.mu);
    const auto& t = ex.rr.pool->spec->timeouts;
    const auto limit =
        std::chrono::milliseconds(t.connect_ms + std::max(t.first_token_ms, t.idle_ms) + 10000);
    if (!lock.WaitFor(ex.cv, limit, [&ex]() REQUIRES(ex.mu) { return ex.upstream_done; })) {
      OCTET_LOG(ERROR) << "upstream exchange did not finish in time; leaving it to its timeouts";
    }
  }

  // ---- Shared by both stream paths.
  // Admits a completion request: parses, routes, fills `ex`. On refusal,
  // returns false with the answer in *status / *body / *retry_after.
  bool Admit(const http::Request& req, const std::string& peer, Exchange* ex, int* status,
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

  // ---- Worker-side handlers (httplib types; run on the core's workers).
  void RunCompletion(const std::shared_ptr<Exchange>& ex, const httplib::Request& req,
                     httplib::Response& res);
  void HandleRoute(const httplib::Request& req, httplib::Response& res);
  void HandleModels(httplib::Response& res);
  static json ReplicaGenerationDefaults(ReplicaState& replica, const PoolSpec& spec,
                                        const std::string& model, int64_t now_ms);
  void HandleHealth(httplib::Response& res);
  void HandlePolicy(const httplib::Request& req, httplib::Response& res);
  void HandleInstances(const httplib::Request& req, httplib::Response& res);
  bool AdminAllowed(const httplib::Request& req) const;
  void RunUpstream(const std::shared_ptr<Exchange>& ex);
  bool Deliver(Exchange& ex, const char* data, size_t n);
  static bool WriteLocked(Exchange& ex, std::string_view data) REQUIRES(ex.sink_mu);
  void Finish(Exchange& ex);

  // ---- The core's callbacks (loop thread; gateway_conn.cpp).
  uint64_t MaxBodyBytes() override;
  bool OnHead(http::Connection* c) override;
  void OnRequest(http::Connection* c) override;
  void OnRefused(http::Connection* c, int status) override;
  void OnClose(http::Connection* c) override;
  void OnFlushed(http::Connection* c) override;
  int64_t ConnectionDeadline(const http::Connection* c) override;
  void OnConnectionDeadline(http::Connection* c, int64_t now) override;
  void OnWatched(http::Connection* c, uint64_t token, uint32_t events) override;
  void AfterEvents() override { dead_streams.clear(); }

  // ---- Loop thread.
  void SubmitWorker(http::Connection* c,
                    std::function<void(httplib::Request&, httplib::Response&)> fn);
  // A whole answer with the request id and `extra` headers.
  void WriteSimple(http::Connection* c, int status, const std::string& content_type,
                   const std::string& body, const http::Headers& extra, bool close);

  // Loop streams.
  void StartStream(http::Connection* c, std::shared_ptr<Exchange> ex);
  void StartAttempt(http::Connection* c, bool fresh_connection);
  void PumpUpstream(http::Connection* c);
  void OnUpstreamHead(http::Connection* c);
  void DecideOnErrorBody(http::Connection* c);
  void PumpBody(http::Connection* c);
  void UpstreamTransportFailure(http::Connection* c, const Status& st);
  void BodyFailure(http::Connection* c,
                   std::string what);  // by value: it may be the upstream's error()
  void StreamAnswer(http::Connection* c, int status, const std::string& content_type,
                    const std::string& body, const std::string& message);
  void StreamWrite(http::Connection* c, std::string_view data);
  void EndStream(http::Connection* c);
  void DropUpstream(LoopStream& s, bool reuse);
  void CancelStream(http::Connection* c);
  void OnStreamDeadline(http::Connection* c, int64_t now);
  int64_t StreamDeadline(const LoopStream& s) const;
};

}  // namespace octet::router
