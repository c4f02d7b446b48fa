// The gateway as the HTTP core's handler, on the loop thread: each complete
// request is authenticated and routed to its answer (at once by WriteSimple,
// by a loop stream, or by a worker); the core's connection events reach the
// loop stream of the connection (flushed output resumes a paused upstream,
// deadlines, upstream socket events, the client leaving).
#include <sys/epoll.h>

#include <atomic>
#include <cstdio>
#include <random>

#include "gateway_impl.h"
#include "octet/base/api_key.h"
#include "octet/base/deadline.h"
#include "octet/base/log.h"

namespace octet::router {
namespace {

// The request's X-Request-Id when the client sent a printable one of at most
// 128 bytes; otherwise a new one, added to `req`'s headers (so that it is
// forwarded to the replica, which logs it too).
std::string AssignRequestId(http::Request* req) {
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
  req->SetHeader("X-Request-Id", buf);
  return buf;
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

uint64_t Gateway::Impl::MaxBodyBytes() {
  auto snap = core->Snapshot();
  return snap ? static_cast<uint64_t>(snap->policy->gateway.max_body_bytes) : (16u << 20);
}

bool Gateway::Impl::OnHead(http::Connection* c) {
  StateOf(c).request_id = AssignRequestId(&c->request());
  return true;
}

void Gateway::Impl::OnRefused(http::Connection*, int status) {
  if (status == 413) core->CountBadRequest();
}

void Gateway::Impl::OnClose(http::Connection* c) {
  if (c->ext && StateOf(c).stream) CancelStream(c);
}

// The client drained below half the high-water mark: a paused loop stream
// reads its upstream again.
void Gateway::Impl::OnFlushed(http::Connection* c) {
  if (!c->ext) return;
  LoopStream* s = StateOf(c).stream.get();
  if (!s || !s->paused || c->unsent() >= kClientHighWater / 2) return;
  s->paused = false;
  s->up_events = EPOLLIN | EPOLLRDHUP;
  server->SetWatchEvents(s->up_token, s->up->fd(), s->up_events);
  PumpUpstream(c);
}

int64_t Gateway::Impl::ConnectionDeadline(const http::Connection* c) {
  if (!c->ext) return 0;
  const LoopStream* s = static_cast<const ConnState&>(*c->ext).stream.get();
  return s ? StreamDeadline(*s) : 0;
}

void Gateway::Impl::OnConnectionDeadline(http::Connection* c, int64_t now) {
  if (c->ext && StateOf(c).stream) OnStreamDeadline(c, now);
}

void Gateway::Impl::WriteSimple(http::Connection* c, int status, const std::string& content_type,
                                const std::string& body, const http::Headers& extra, bool close) {
  http::Headers headers;
  if (!content_type.empty()) headers.emplace_back("Content-Type", content_type);
  const std::string& id = StateOf(c).request_id;
  if (!id.empty()) headers.emplace_back("x-request-id", id);
  headers.insert(headers.end(), extra.begin(), extra.end());
  server->Respond(c, status, headers, body, close);
}

void Gateway::Impl::OnRequest(http::Connection* c) {
  const http::Request& req = c->request();
  const std::string& request_id = StateOf(c).request_id;
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
                  {{"WWW-Authenticate", "Bearer"}}, false);
      return;
    }
  }
  if (req.path.rfind("/v1/", 0) == 0 && req.path.rfind("/v1/router/", 0) != 0) {
    OCTET_LOG(INFO) << "http " << req.method << " " << req.path << " request_id=" << request_id
                    << " from " << c->peer();
  }
  if (post && (req.path == "/v1/chat/completions" || req.path == "/v1/completions")) {
    auto ex = std::make_shared<Exchange>();
    int status = 0;
    std::string body;
    if (!Admit(req, c->peer(), ex.get(), &status, &body)) {
      WriteSimple(c, status, "application/json", body,
                  status == 429 ? http::Headers{{"Retry-After", "1"}} : http::Headers{}, false);
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
                {}, false);
    return;
  }
  SubmitWorker(c, std::move(handler));
}

}  // namespace octet::router
