// Gateway: the router's OpenAI-compatible HTTP front end (cpp-httplib).
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
//
// Behaviour: a request is retried on another replica (then the fallback pool)
// after a connection error, 5xx or 429, and escalated on the route's statuses,
// as long as no body byte has reached the client. A stream's headers go out as
// soon as an upstream answers 2xx; a failure after that but before the first
// token is still retried, and one that cannot be ends the stream with an SSE
// error event ("data: {"error": ...}"). When a streaming client disconnects, the
// next write fails and the upstream request is cancelled (its connection
// closed). A waiting streaming client gets an SSE comment (": keepalive") every
// gateway.stream_keepalive_ms between events, which also notices a disconnect
// while the model is still prefilling.
//
// Limitation (cpp-httplib 0.11-0.14): a non-streaming client's disconnect is not
// visible to the handler, so a unary upstream request runs to completion.
//
// A stream from a pool of plain-http replicas runs on its HTTP worker thread
// alone: the handler connects (reusing keep-alive connections), sends and reads
// the upstream's head; the content provider then reads the body and writes it
// to the client on the same thread (one recv per token, no thread hand-off).
// When any replica of the policy is https, each stream holds one HTTP worker
// thread and one upstream thread (pooled) running cpp-httplib's client.
// `threads` bounds concurrent client connections (more wait in the queue).
#pragma once

#include <memory>
#include <string>

#include "octet/base/status.h"
#include "octet/router/router.h"

namespace octet::router {

struct GatewayOptions {
  std::string host = "127.0.0.1";
  int port = 0;             // 0: any free port (see port())
  int threads = 320;        // HTTP worker threads
  std::string admin_token;  // bearer token for /v1/router/policy from non-loopback peers
  // Streams from plain-http pools run on the HTTP worker thread alone (see the
  // header comment); false sends every stream through an upstream thread, as
  // https pools always do.
  bool direct_streaming = true;
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
