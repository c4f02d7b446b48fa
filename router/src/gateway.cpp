// The gateway's request path: parse -> RouterCore::Route (classify + pick
// replica) -> forward with retries -> pass the response through.
//
// Streaming uses two threads per request: the HTTP worker that owns the client
// socket (httplib writes headers only after the handler returns, then calls our
// chunked content provider), and an upstream "pump" thread that runs the
// blocking httplib::Client exchange and queues body chunks. The handler waits
// for the first upstream byte (or the final failure) before it returns, so
// every retry happens before the client has seen anything.
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

constexpr size_t kMaxQueuedBytes = 8u << 20;   // pump waits when the client lags this much
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

}  // namespace

// One proxied request. Shared by the handler, the pump thread and the
// response's content provider/releaser; all mutable fields below `mu` are
// guarded by it.
struct Exchange {
  RoutedRequest rr;
  json body;                 // the client's request (model rewritten per pool)
  std::string original_body; // sent as-is when the pool does not rename the model
  std::string path;
  httplib::Headers forward_headers;
  bool stream = false;
  int64_t start_ns = 0;
  int64_t keepalive_ms = 0;

  std::mutex mu;
  std::condition_variable cv;
  bool committed = false;        // the response (status + first bytes) is decided
  bool upstream_done = false;    // the pump has finished
  bool cancelled = false;        // the client left or the gateway stops
  bool failed_mid_stream = false;
  int status = 0;
  std::string content_type;
  std::deque<std::string> chunks;
  size_t queued_bytes = 0;
  std::string final_reason;      // set when the exchange failed before committing
  httplib::Client* active_client = nullptr;

  // Final figures (written by the pump before upstream_done).
  uint64_t tokens = 0;
  bool error = false;

  // Owned by the provider thread only.
  bool wrote_any = false;
  char tail[2] = {'\n', '\n'};  // last two bytes forwarded, for SSE event boundaries

  std::thread pump;
};

struct Gateway::Impl {
  Router* router = nullptr;
  RouterCore* core = nullptr;
  GatewayOptions options;
  httplib::Server server;
  std::thread listener;
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
    ex.cv.notify_all();
  }

  void SetupRoutes();
  void HandleCompletion(const httplib::Request& req, httplib::Response& res, const std::string& path);
  void HandleRoute(const httplib::Request& req, httplib::Response& res);
  void HandleModels(httplib::Response& res);
  void HandleHealth(httplib::Response& res);
  void HandlePolicy(const httplib::Request& req, httplib::Response& res);
  bool AdminAllowed(const httplib::Request& req) const;
  void RunUpstream(const std::shared_ptr<Exchange>& ex);
  void Deliver(Exchange& ex, const char* data, size_t n);
  void Finish(Exchange& ex);
};

namespace {

void SetDecisionHeaders(httplib::Response& res, const RouteDecision& d) {
  if (!d.route.empty()) res.set_header("X-Octet-Route", d.route);
  if (!d.pool.empty()) res.set_header("X-Octet-Pool", d.pool);
  if (!d.replica.empty()) res.set_header("X-Octet-Replica", d.replica);
}

}  // namespace

void Gateway::Impl::Deliver(Exchange& ex, const char* data, size_t n) {
  std::unique_lock<std::mutex> lock(ex.mu);
  if (ex.stream) {
    // Backpressure: a client that reads slower than the upstream writes holds
    // the pump (and so the upstream connection) once 8 MiB are queued.
    const auto idle = std::chrono::milliseconds(ex.rr.pool->spec->timeouts.idle_ms);
    ex.cv.wait_for(lock, idle, [&] { return ex.queued_bytes < kMaxQueuedBytes || ex.cancelled; });
  }
  ex.chunks.emplace_back(data, n);
  ex.queued_bytes += n;
  ex.committed = true;
  ex.cv.notify_all();
}

void Gateway::Impl::RunUpstream(const std::shared_ptr<Exchange>& exp) {
  Exchange& ex = *exp;
  SseTokenCounter sse;
  std::string unary_body;
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
    if (!spec.model.empty() && ex.body.value("model", std::string()) != spec.model) {
      json b = ex.body;
      b["model"] = spec.model;
      req.body = Dump(b);
    } else {
      req.body = ex.original_body;
    }

    int status = 0;
    bool buffering = false;  // non-2xx: collect the body, decide after
    std::string error_body;
    std::string content_type;
    bool forwarded = false;  // this attempt delivered bytes
    req.response_handler = [&](const httplib::Response& r) {
      status = r.status;
      content_type = r.get_header_value("Content-Type");
      buffering = !(status >= 200 && status < 300);
      if (!buffering) {
        std::lock_guard<std::mutex> lock(ex.mu);
        ex.status = status;
        ex.content_type = content_type.empty() ? "application/json" : content_type;
      }
      return true;
    };
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      {
        std::lock_guard<std::mutex> lock(ex.mu);
        if (ex.cancelled) return false;
      }
      if (buffering) {
        if (error_body.size() + n <= kMaxErrorBodyBytes) error_body.append(data, n);
        return true;
      }
      forwarded = true;
      if (ex.stream) {
        sse.Feed(std::string_view(data, n));
        Deliver(ex, data, n);
      } else {
        unary_body.append(data, n);
      }
      return true;
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
      client->set_keep_alive(true);
      replica->ReleaseClient(std::move(client));
      if (ex.stream) {
        ex.tokens = sse.tokens();
        if (!forwarded) Deliver(ex, "", 0);  // an empty body still commits
      } else {
        ex.tokens = UnaryTokens(unary_body);
        std::lock_guard<std::mutex> lock(ex.mu);
        ex.chunks.push_back(std::move(unary_body));
        ex.committed = true;
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
      std::lock_guard<std::mutex> lock(ex.mu);
      ex.status = status;
      ex.content_type = content_type.empty() ? "application/json" : content_type;
      ex.chunks.push_back(std::move(error_body));
      ex.committed = true;
      ex.error = server_error;
      break;
    }
    // Transport failure (connect, send, read, timeout).
    bool committed;
    {
      std::lock_guard<std::mutex> lock(ex.mu);
      committed = ex.committed;
    }
    if (committed) {
      // Bytes already reached the client: the stream ends with an error event.
      core->ReportFailure(replica, pool, FailureKind::kMidStream);
      std::lock_guard<std::mutex> lock(ex.mu);
      ex.failed_mid_stream = true;
      ex.error = true;
      ex.tokens = sse.tokens();
      OCTET_LOG(WARNING) << "upstream " << replica->url() << " failed mid-stream: "
                         << httplib::to_string(err);
      break;
    }
    const std::string what = httplib::to_string(err);
    if (core->Retry(ex.rr, FailureKind::kConnect)) {
      OCTET_LOG(DEBUG) << "upstream " << replica->url() << ": " << what << "; retrying on "
                       << ex.rr.decision.replica;
      continue;
    }
    std::lock_guard<std::mutex> lock(ex.mu);
    const bool timeout = err == httplib::Error::ConnectionTimeout || err == httplib::Error::Read;
    ex.status = timeout ? 504 : 502;
    ex.content_type = "application/json";
    ex.final_reason = "pool '" + spec.name + "' replica " + replica->url() + ": " + what;
    ex.chunks.push_back(OpenAiError("upstream failed: " + ex.final_reason, "upstream_error",
                                    ex.status));
    ex.committed = true;
    ex.error = true;
    break;
  }
  ex.rr.lease.Release();  // the upstream is done: its load drops now
  std::lock_guard<std::mutex> lock(ex.mu);
  ex.upstream_done = true;
  ex.cv.notify_all();
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
    res.set_content(OpenAiError("the request body is not a JSON object", "invalid_request_error", 400),
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
    res.set_content(OpenAiError(routed.status().message(), busy ? "rate_limit_error" : "unavailable",
                                res.status),
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
    PoolCounters& c = *ex->rr.pool->counters;
    c.ttft.Record(NowNs() - t0);
    Finish(*ex);
    res.status = ex->status;
    SetDecisionHeaders(res, ex->rr.decision);
    std::string body;
    for (auto& ch : ex->chunks) body += ch;
    res.set_content(body, ex->content_type);
    return;
  }

  // Streaming: the pump runs the upstream exchange; this thread waits for the
  // first byte (every retry happens before it) and then hands over to the
  // content provider.
  Register(ex);
  ex->pump = std::thread([this, ex] { RunUpstream(ex); });
  const TimeoutSpec& t = ex->rr.pool->spec->timeouts;
  const int attempts = 2 + ex->rr.pool->spec->retries.attempts + static_cast<int>(
                                                                       snapshot->pools.size());
  const Deadline deadline = Deadline::AfterMs((t.connect_ms + t.first_token_ms) * attempts);
  bool timed_out = false;
  {
    std::unique_lock<std::mutex> lock(ex->mu);
    timed_out = !ex->cv.wait_until(lock, deadline.at(),
                                   [&] { return ex->committed || ex->upstream_done; });
  }
  if (timed_out || stopping.load()) {
    Cancel(*ex);
    ex->pump.join();
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
    // The whole response is already here (an error, or a very short stream).
    ex->pump.join();
    Unregister(ex);
    ex->rr.pool->counters->ttft.Record(NowNs() - t0);
    Finish(*ex);
    std::string body;
    for (auto& ch : ex->chunks) body += ch;
    if (ex->failed_mid_stream)
      body += "data: " + OpenAiError("the upstream failed mid-stream", "upstream_error", 502) + "\n\n";
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
        auto write = [&](const std::string& s) {
          if (s.empty()) return true;
          if (!sink.write(s.data(), s.size())) return false;
          if (!ex->wrote_any) {
            ex->wrote_any = true;
            ex->rr.pool->counters->ttft.Record(NowNs() - ex->start_ns);
          }
          if (s.size() >= 2) {
            ex->tail[0] = s[s.size() - 2];
            ex->tail[1] = s[s.size() - 1];
          } else {
            ex->tail[0] = ex->tail[1];
            ex->tail[1] = s[0];
          }
          return true;
        };
        const auto keepalive = std::chrono::milliseconds(ex->keepalive_ms > 0 ? ex->keepalive_ms : 1000);
        std::unique_lock<std::mutex> lock(ex->mu);
        while (true) {
          if (ex->cancelled || stopping.load()) return false;
          if (!ex->chunks.empty()) {
            std::deque<std::string> batch;
            batch.swap(ex->chunks);
            ex->queued_bytes = 0;
            ex->cv.notify_all();
            lock.unlock();
            for (const auto& c : batch) {
              if (!write(c)) {
                Cancel(*ex);
                return false;
              }
            }
            lock.lock();
            continue;
          }
          if (ex->upstream_done) {
            const bool failed = ex->failed_mid_stream;
            lock.unlock();
            if (failed && sse) {
              if (ex->tail[0] != '\n' || ex->tail[1] != '\n') write("\n\n");
              write("data: " + OpenAiError("the upstream failed mid-stream", "upstream_error", 502) +
                    "\n\n");
            }
            sink.done();
            return true;
          }
          const bool woke = ex->cv.wait_for(lock, keepalive, [&] {
            return !ex->chunks.empty() || ex->upstream_done || ex->cancelled;
          });
          if (!woke && sse && ex->keepalive_ms > 0 && ex->tail[0] == '\n' && ex->tail[1] == '\n') {
            // An SSE comment between events: clients ignore it, and writing it
            // is how a departed client is noticed while the upstream thinks.
            lock.unlock();
            if (!write(": keepalive\n\n")) {
              Cancel(*ex);
              return false;
            }
            lock.lock();
          }
        }
      },
      [this, ex](bool success) {
        if (!success) {
          bool was_done;
          {
            std::lock_guard<std::mutex> lock(ex->mu);
            was_done = ex->upstream_done && ex->chunks.empty();
          }
          if (!was_done) ex->rr.pool->counters->cancelled.fetch_add(1, std::memory_order_relaxed);
          Cancel(*ex);
        }
        if (ex->pump.joinable()) ex->pump.join();
        Unregister(ex);
        Finish(*ex);
      });
}

void Gateway::Impl::HandleRoute(const httplib::Request& req, httplib::Response& res) {
  json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    res.status = 400;
    res.set_content(OpenAiError("the request body is not a JSON object", "invalid_request_error", 400),
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
  server.Post("/v1/route",
              [this](const httplib::Request& req, httplib::Response& res) { HandleRoute(req, res); });
  server.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) { HandleModels(res); });
  server.Get("/health", [this](const httplib::Request&, httplib::Response& res) { HandleHealth(res); });
  server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(router->MetricsText(), "text/plain; version=0.0.4");
  });
  server.Get("/v1/router/stats", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(Dump(router->Stats().ToJson()), "application/json");
  });
  server.Get("/v1/router/policy",
             [this](const httplib::Request& req, httplib::Response& res) { HandlePolicy(req, res); });
  server.Post("/v1/router/policy",
              [this](const httplib::Request& req, httplib::Response& res) { HandlePolicy(req, res); });
  server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
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
  impl->server.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  impl->server.set_tcp_nodelay(true);
  impl->server.set_keep_alive_timeout(5);
  impl->server.set_read_timeout(std::chrono::seconds(60));
  impl->server.set_write_timeout(std::chrono::seconds(30));
  auto snap = impl->core->Snapshot();
  if (snap) impl->server.set_payload_max_length(static_cast<size_t>(snap->policy->gateway.max_body_bytes));
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
}

}  // namespace octet::router
