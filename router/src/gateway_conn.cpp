// A client connection's request state machine on the loop thread:
// kHead (parse the head, with its size limit; 100-continue) -> kBody (read
// Content-Length bytes) -> kBusy (answered: at once by WriteSimple, by a loop
// stream, or by a worker) -> kHead again (keep-alive, pipelined requests) or
// kClosing. Dispatch authenticates and routes each request to its answer.
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

// True when every replica the policy can send to speaks plain http (a loop
// stream's UpstreamConn has no TLS).
bool AllPlainHttp(const PolicyRuntime& snapshot) {
  for (const auto& pool : snapshot.pools)
    for (const auto& r : pool->replicas)
      if (r->parsed().scheme != "http") return false;
  return true;
}

}  // namespace

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

}  // namespace octet::router
