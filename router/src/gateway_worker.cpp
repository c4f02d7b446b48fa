// The gateway's worker-thread path. Requests the loop does not relay itself
// (non-streaming completions, streams to https replicas or with
// direct_streaming off, and the admin and info endpoints) run as
// httplib-typed handlers on the `workers` pool (SubmitWorker); a completion's
// upstream exchange runs through httplib::Client (RunUpstream), for a stream
// on an `upstream_threads` thread that writes through the response's DataSink
// (RunCompletion). The response goes back through the HTTP core's
// Responder (http::SendHttplibResponse), which blocks the worker while the client's
// backlog is full.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>

#include "gateway_impl.h"
#include "octet/base/deadline.h"
#include "octet/base/http/client_error.h"
#include "octet/base/http/httplib_adapter.h"
#include "octet/base/log.h"

namespace octet::router {
namespace {

uint64_t UnaryTokens(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return 0;
  auto u = j.find("usage");
  if (u == j.end() || !u->is_object()) return 0;
  // An upstream's count that is not an integer counts as none (not cast).
  const std::optional<int64_t> t = IntegerMember(*u, "completion_tokens", 0);
  return t && *t > 0 ? static_cast<uint64_t>(*t) : 0;
}

void SetDecisionHeaders(httplib::Response& res, const RouteDecision& d) {
  if (!d.route.empty()) res.set_header("X-Octet-Route", d.route);
  if (!d.pool.empty()) res.set_header("X-Octet-Pool", d.pool);
  if (!d.replica.empty()) res.set_header("X-Octet-Replica", d.replica);
}

// Marks the exchange as answered with `status` and a body of its own (an
// error, or an upstream error passed through). After our 2xx headers went out,
// it becomes an SSE error event instead.
void AnswerWith(Exchange& ex, int status, const std::string& content_type, std::string body,
                const std::string& message) {
  MutexLock lock(ex.mu);
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
  MutexLock lock(ex.sink_mu);
  ex.body_started = true;
  if (!ex.sink) {
    ex.pending.emplace_back(data, n);
    return true;
  }
  if (WriteLocked(ex, std::string_view(data, n))) return true;
  MutexLock state(ex.mu);
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
      MutexLock lock(ex.mu);
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
        MutexLock lock(ex.mu);
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
      MutexLock lock(ex.mu);
      if (ex.cancelled) break;
      ex.active_client = client.get();
    }
    httplib::Response upstream_res;
    httplib::Error err = httplib::Error::Success;
    const bool ok = client->send(req, upstream_res, err);
    bool cancelled;
    {
      MutexLock lock(ex.mu);
      ex.active_client = nullptr;
      cancelled = ex.cancelled;
    }
    if (cancelled) break;

    if (ok && !buffering) {  // a complete 2xx response
      core->ReportSuccess(replica, spec);
      replica->ReleaseClient(std::move(client));
      MutexLock lock(ex.mu);
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
      MutexLock lock(ex.sink_mu);
      body_started = ex.body_started;
    }
    const std::string what = http::ClientErrorText(err);
    if (body_started) {
      // Tokens already reached the client: end the stream with an error event.
      const std::string message = MidStreamFailure(replica, pool, what);
      MutexLock lock(ex.mu);
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
  MutexLock lock(ex.mu);
  ex.upstream_done = true;
  ex.cv.notify_all();
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
    MutexLock lock(ex->mu);
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
    Exchange& e = *ex;
    MutexLock lock(e.mu);
    timed_out = !lock.WaitUntil(e.cv, deadline.at(), [&e]() REQUIRES(e.mu) {
      return e.headers_ready || e.upstream_done;
    });
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
  std::string content_type;
  {
    MutexLock lock(ex->mu);
    done = ex->upstream_done;
    res.status = ex->status;
    content_type = ex->content_type;
  }
  SetDecisionHeaders(res, ex->rr.decision);
  if (done) {
    // The whole exchange is over already (an error, or a very short stream).
    Unregister(ex);
    ex->rr.pool->counters->ttft.Record(NowNs() - t0);
    Finish(*ex);
    std::string body, error_event;
    {
      MutexLock lock(ex->mu);
      body = ex->unary_body;
      if (ex->failed_after_headers) error_event = SseError(ex->error_message);
    }
    {
      MutexLock sl(ex->sink_mu);
      for (auto& ch : ex->pending) body += ch;
    }
    res.set_content(body + error_event, content_type);
    return;
  }
  const bool sse = content_type.find("text/event-stream") != std::string::npos;
  if (sse) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
  }
  res.set_chunked_content_provider(
      content_type,
      [this, ex, sse](size_t, httplib::DataSink& sink) {
        // Flush what came before, then let the upstream thread write directly.
        auto unpublish = [&] {
          MutexLock lock(ex->sink_mu);
          ex->sink = nullptr;
        };
        {
          MutexLock lock(ex->sink_mu);
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
        Exchange& e = *ex;
        MutexLock lock(e.mu);
        while (true) {
          if (e.cancelled || stopping.load()) {
            lock.Unlock();
            unpublish();
            Cancel(e);
            return false;
          }
          if (e.upstream_done) {
            const bool failed = e.failed_after_headers;
            const std::string message = e.error_message;
            lock.Unlock();
            MutexLock sl(e.sink_mu);
            if (failed && sse) {
              if (e.tail[0] != '\n' || e.tail[1] != '\n') WriteLocked(e, "\n\n");
              WriteLocked(e, SseError(message));
            }
            e.sink = nullptr;
            sink.done();
            return true;
          }
          const bool woke = lock.WaitFor(e.cv, keepalive, [this, &e]() REQUIRES(e.mu) {
            return e.upstream_done || e.cancelled || stopping.load();
          });
          if (!woke && sse && e.keepalive_ms > 0) {
            // An SSE comment between events: clients ignore it, and writing it
            // is how a departed client is noticed while the model prefills.
            lock.Unlock();
            bool ok = true;
            {
              MutexLock sl(e.sink_mu);
              if (e.tail[0] == '\n' && e.tail[1] == '\n') ok = WriteLocked(e, ": keepalive\n\n");
            }
            if (!ok) {
              unpublish();
              Cancel(e);
              return false;
            }
            lock.Lock();
          }
        }
      },
      [this, ex](bool success) {
        {
          MutexLock lock(ex->sink_mu);
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

// ---- Worker responses ---------------------------------------------------------

void Gateway::Impl::SubmitWorker(http::Connection* c,
                                 std::function<void(httplib::Request&, httplib::Response&)> fn) {
  server->HandToWorker(c, [fn = std::move(fn), request_id = StateOf(c).request_id](
                              http::Request& req, http::Responder& out) {
    httplib::Request hreq = http::ToHttplibRequest(req);
    if (!req.query.empty()) {
      for (const char* key : {"apply"}) {
        const std::string v = http::QueryParam(req.query, key);
        if (!v.empty()) hreq.params.emplace(key, v);
      }
    }
    httplib::Response res;
    try {
      fn(hreq, res);
    } catch (const std::exception& e) {
      OCTET_LOG(ERROR) << "gateway handler failed: " << e.what();
      res = httplib::Response();
      res.status = 500;
      res.set_content(
          OpenAiError(std::string("internal router error: ") + e.what(), "internal_error", 500),
          "application/json");
    }
    if (!request_id.empty()) {
      res.headers.erase("x-request-id");  // an upstream's copy: ours is the same id
      res.set_header("x-request-id", request_id);
    }
    http::SendHttplibResponse(res, out);
  });
}

}  // namespace octet::router
