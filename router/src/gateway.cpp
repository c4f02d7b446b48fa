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
// threads running httplib-typed handlers (gateway_worker.cpp,
// gateway_admin.cpp); their response goes back
// through the loop (WorkerReply). A worker stream runs the blocking
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

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>

#include "gateway_impl.h"
#include "octet/base/deadline.h"
#include "octet/base/log.h"

namespace octet::router {
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
