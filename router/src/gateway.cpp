// The gateway's request path: parse -> RouterCore::Route (classify + pick
// replica) -> forward with retries -> pass the response through.
//
// The shared HTTP core (octet/base/http/server.h, also under `octet serve`)
// runs one event-loop thread (epoll, non-blocking sockets) that owns every
// client connection: it accepts, reads and parses HTTP/1.1 requests
// (keep-alive and pipelining, with limits on head and body size and a
// deadline on every wait), and writes every response; the gateway is its
// Handler. A streaming completion from a pool of
// plain-http replicas (the usual case) runs on the loop as a state machine
// (LoopStream): connect (or reuse an idle keep-alive UpstreamConn), send,
// read the upstream's head, retry on another replica / the fallback pool
// while no body byte has reached the client, then relay each upstream read to
// the client as it arrives. Back-pressure: while a client's unsent bytes
// exceed kClientHighWater the loop stops reading its upstream.
//
// Everything else (non-streaming completions, streams when a replica is
// https or options.direct_streaming is false, /metrics, /health, /v1/models,
// /v1/route, the admin endpoints) is handed to the core's bounded pool of
// worker threads running httplib-typed handlers (gateway_worker.cpp,
// gateway_admin.cpp); their response goes back through the loop
// (http::Responder). A worker stream runs the blocking
// httplib::Client exchange on an upstream thread (RunUpstream) and writes its
// body through a DataSink that blocks while the client's backlog is full.
//
// Either way, retries (another replica, the fallback pool, escalation) happen
// as long as no body byte has reached the client.
//
// This file: Gateway's public API (start, stop), admission of a completion
// request, and the retry / failure decisions both stream paths share. The
// rest of the gateway is split by responsibility; gateway_impl.h lists the files.
#include "octet/router/gateway.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "gateway_impl.h"
#include "octet/base/deadline.h"
#include "octet/base/log.h"

namespace octet::router {
namespace {}  // namespace

std::string UpstreamBody(const Exchange& ex, const PoolSpec& spec) {
  if (!spec.model.empty() && ex.body.value("model", std::string()) != spec.model) {
    json b = ex.body;
    b["model"] = spec.model;
    return Dump(b);
  }
  return ex.original_body;
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

bool Gateway::Impl::Admit(const http::Request& req, const std::string& peer, Exchange* ex,
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
    *body =
        OpenAiError(routed.status().message(), busy ? "rate_limit_error" : "unavailable", *status);
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
  MutexLock lock(ex.mu);
  c.tokens.fetch_add(ex.tokens, std::memory_order_relaxed);
  if (ex.error) c.errors.fetch_add(1, std::memory_order_relaxed);
  c.duration.Record(NowNs() - ex.start_ns);
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

int Gateway::port() const { return impl_->server->port(); }
const std::string& Gateway::host() const { return impl_->options.host; }

Result<std::unique_ptr<Gateway>> Gateway::Start(Router* router, const GatewayOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->router = router;
  impl->core = &router->core();
  impl->options = options;
  http::ServerOptions core;
  core.name = "gateway";
  core.max_head_bytes = options.max_header_bytes;
  core.head_timeout_ms = options.header_timeout_ms;
  core.body_timeout_ms = options.body_timeout_ms;
  core.keep_alive_timeout_ms = options.keep_alive_timeout_ms;
  core.write_timeout_ms = options.write_timeout_ms;
  core.max_workers = static_cast<size_t>(std::max(4, options.threads));
  core.error_body = [](int status, const std::string& message) {
    return OpenAiError(message, "invalid_request_error", status);
  };
  impl->server = std::make_unique<http::Server>(std::move(core), impl.get());
  OCTET_RETURN_IF_ERROR(impl->server->Start(options.host, options.port));
  OCTET_LOG(INFO) << "router gateway listening on http://" << options.host << ":"
                  << impl->server->port();
  return std::unique_ptr<Gateway>(new Gateway(std::move(impl)));
}

void Gateway::Stop() {
  if (!impl_ || impl_->stopped) return;
  impl_->stopped = true;
  impl_->stopping.store(true);
  {
    MutexLock lock(impl_->active_mu);
    for (const auto& ex : impl_->active) Impl::Cancel(*ex);
  }
  // Closes every connection (loop streams are cancelled upstream); workers
  // see their clients gone and finish; a worker blocked in an upstream
  // exchange finishes within that exchange's timeouts.
  impl_->server->Stop();
  impl_->upstream_threads.Shutdown();
}

}  // namespace octet::router
