// Gateway: the router's OpenAI-compatible HTTP/1.1 front end, a handler of the
// shared HTTP core: one event-loop thread (epoll; Linux) owns every client
// connection, plus a bounded pool of worker threads for the endpoints that block.
//
//   POST /v1/chat/completions, /v1/completions   routed to a pool replica;
//        "stream": true responses pass through chunk by chunk (token by token).
//        Response headers X-Octet-Route / X-Octet-Pool / X-Octet-Replica say
//        who answered.
//   GET  /v1/models          the router's model id plus each pool's model
//   POST /v1/route           decision only: {"route", "pool", "score", "reason"}
//   GET  /metrics            Prometheus text;  GET /health: 200 while a pool can serve
//   GET  /v1/router/stats    RouterStats as JSON
//   GET|POST /v1/router/policy  the running policy YAML / validate (?apply=false) or
//        apply a new one; only from loopback or with the admin bearer token.
//   GET|POST /v1/router/instances  {"instances": {NAME: [URL, ...]}}: the
//        endpoints of `instance: NAME` pools (octet deploy posts them); same access.
//
// Behaviour: a request is retried on another replica (then the fallback pool)
// after a connection error, 5xx or 429, and escalated on the route's statuses,
// as long as no body byte has reached the client. A stream's headers go out as
// soon as an upstream answers 2xx; a failure after that but before the first
// token is still retried, and one that cannot be ends the stream with an SSE
// error event ("data: {"error": ...}"). When a streaming client disconnects,
// the upstream request is cancelled (its connection closed). A waiting
// streaming client gets an SSE comment (": keepalive") every
// gateway.stream_keepalive_ms between events.
//
// HTTP (the core shared with `octet serve`, octet/base/http/server.h):
// keep-alive and pipelined requests; bodies framed by one Content-Length or
// chunked (two Content-Length headers are refused 400); a head larger than
// max_header_bytes is answered 431, a body larger than gateway.max_body_bytes
// 413 (OpenAI-style error bodies), a head or body that does not arrive within
// its timeout 408, and the connection closes. A client that does not read its
// response holds at most ~256 KiB in the gateway (the upstream is not read
// meanwhile) and is dropped after write_timeout_ms without progress.
//
// Streams from plain-http pools run on the event loop: connect (reusing
// keep-alive connections), send, read the upstream's head, then relay each
// upstream read to the client as it arrives (no thread hand-off). When any
// replica of the policy is https (or direct_streaming is false), a stream
// holds one worker thread and one upstream thread running cpp-httplib's
// client. Non-streaming completions hold a worker for the exchange; a
// non-streaming client's disconnect is not noticed until the answer is
// written. `threads` bounds the workers (more requests wait in the queue).
#pragma once

#include <memory>
#include <string>

#include "octet/base/status.h"
#include "octet/router/router.h"

namespace octet::router {

struct GatewayOptions {
  std::string host = "127.0.0.1";
  int port = 0;             // 0: any free port (see port())
  int threads = 320;        // worker threads (blocking endpoints; see the header comment)
  std::string admin_token;  // bearer token for /v1/router/policy from non-loopback peers
  // When set, every request but /health (unless api_key_health) needs
  // "Authorization: Bearer KEY" (the admin endpoints also take the admin
  // token); otherwise 401. The key is not forwarded to replicas.
  std::string api_key;
  bool api_key_health = false;
  // Streams from plain-http pools run on the event loop (see the header
  // comment); false sends every stream through a worker and an upstream
  // thread, as https pools always do.
  bool direct_streaming = true;
  // Limits on clients, in bytes and milliseconds.
  size_t max_header_bytes = 64 * 1024;   // request line + headers; more: 431
  int64_t header_timeout_ms = 10000;     // first byte of a request -> end of its head; then 408
  int64_t body_timeout_ms = 60000;       // end of the head -> end of the body; then 408
  int64_t keep_alive_timeout_ms = 5000;  // an idle keep-alive connection is closed after this
  int64_t write_timeout_ms = 30000;      // a client that reads nothing this long is dropped
};

GatewayOptions GatewayOptionsFromPolicy(const GatewaySpec& spec);

class Gateway {
 public:
  // Binds and starts serving on a background thread. `router` must outlive the gateway.
  static Result<std::unique_ptr<Gateway>> Start(Router* router, const GatewayOptions& options);
  ~Gateway();  // Stop()
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  int port() const;
  const std::string& host() const;
  // Stops accepting, cancels streams in progress, joins every thread.
  void Stop();

 private:
  struct Impl;
  explicit Gateway(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace octet::router
