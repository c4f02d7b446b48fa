// Loop streams: a streaming completion to a pool of plain-http replicas,
// relayed by the event loop thread without a worker (see gateway.cpp).
//
// The state machine of one streaming completion on the loop thread:
//   kConnecting -> kSending -> kHead -> kBody            (2xx: relay the body)
//                                   \-> kErrorBody        (non-2xx: read it, then
//                                        retry / escalate / pass it on)
// A transport failure before any body byte moves to another replica (a reused
// keep-alive connection first gets one fresh connection to the same replica).
#include <sys/epoll.h>

#include <algorithm>
#include <cstring>

#include "gateway_impl.h"
#include "octet/base/deadline.h"
#include "octet/base/log.h"

namespace octet::router {

void Gateway::Impl::StartStream(http::Connection* c, std::shared_ptr<Exchange> ex) {
  StateOf(c).stream = std::make_unique<LoopStream>();
  StateOf(c).stream->ex = std::move(ex);
  StartAttempt(c, false);
}

void Gateway::Impl::DropUpstream(LoopStream& s, bool reuse) {
  if (!s.up) return;
  if (s.up_token) {
    server->Unwatch(s.up_token, s.up->fd());
    s.up_token = 0;
  }
  s.up_events = 0;
  if (reuse && s.up->reusable() && s.ex->rr.lease) s.ex->rr.lease->ReleaseConn(std::move(s.up));
  s.up.reset();  // an unfinished response: closing the connection cancels it upstream
}

void Gateway::Impl::StartAttempt(http::Connection* c, bool fresh_connection) {
  LoopStream& s = *StateOf(c).stream;
  Exchange& ex = *s.ex;
  DropUpstream(s, false);
  if (stopping.load()) {
    StreamAnswer(c, 503, "application/json",
                 OpenAiError("the router is shutting down", "upstream_error", 503),
                 "the router is shutting down");
    return;
  }
  ReplicaState* replica = ex.rr.lease.get();
  const PoolSpec& spec = *ex.rr.pool->spec;
  const ReplicaUrl& url = replica->parsed();

  const std::string body = UpstreamBody(ex, spec);
  std::string& request = s.request;
  request.clear();
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
  s.sent = 0;
  s.error_body.clear();

  s.up = fresh_connection ? nullptr : replica->AcquireConn();
  s.reused = s.up != nullptr;
  if (!s.up) {
    auto conn = UpstreamConn::StartConnect(url.host, url.port);
    if (!conn.ok()) {
      UpstreamTransportFailure(c, conn.status());
      return;
    }
    s.up = std::move(*conn);
  }
  s.phase = s.up->connecting() ? LoopStream::Phase::kConnecting : LoopStream::Phase::kSending;
  s.phase_start_ns = NowNs();
  s.up_events = EPOLLOUT;
  s.up_token = server->Watch(c, s.up->fd(), s.up_events);
  if (s.phase == LoopStream::Phase::kSending) PumpUpstream(c);
}

void Gateway::Impl::OnWatched(http::Connection* c, uint64_t, uint32_t events) {
  if (!c->ext || !StateOf(c).stream) return;
  LoopStream& s = *StateOf(c).stream;
  if (s.phase == LoopStream::Phase::kConnecting) {
    if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return;
    Status st = s.up->FinishConnect();
    if (!st.ok()) {
      UpstreamTransportFailure(c, st);
      return;
    }
    s.phase = LoopStream::Phase::kSending;
    s.phase_start_ns = NowNs();
  }
  PumpUpstream(c);
}

// Advances the exchange with what the upstream socket allows now.
void Gateway::Impl::PumpUpstream(http::Connection* c) {
  LoopStream& s = *StateOf(c).stream;
  if (s.phase == LoopStream::Phase::kSending) {
    Status st = s.up->SendNow(s.request, &s.sent);
    if (!st.ok()) {
      UpstreamTransportFailure(c, st);
      return;
    }
    if (s.sent < s.request.size()) return;  // EPOLLOUT again
    s.phase = LoopStream::Phase::kHead;
    s.phase_start_ns = NowNs();
    s.last_upstream_ns = s.phase_start_ns;
    s.up_events = EPOLLIN | EPOLLRDHUP;
    server->SetWatchEvents(s.up_token, s.up->fd(), s.up_events);
  }
  if (s.phase == LoopStream::Phase::kHead) {
    bool complete = false;
    Status st = s.up->ReadHeadNow(&complete);
    if (!st.ok()) {
      UpstreamTransportFailure(c, st);
      return;
    }
    if (!complete) return;
    OnUpstreamHead(c);
    return;
  }
  if (s.phase == LoopStream::Phase::kErrorBody) {
    while (true) {
      const auto r = s.up->ReadBodyNow(&s.error_body);
      if (r == UpstreamConn::ReadResult::kWouldBlock && s.error_body.size() <= kMaxErrorBodyBytes)
        return;  // more later
      if (r == UpstreamConn::ReadResult::kData && s.error_body.size() <= kMaxErrorBodyBytes)
        continue;
      if (s.error_body.size() > kMaxErrorBodyBytes) s.error_body.resize(kMaxErrorBodyBytes);
      DropUpstream(s, r == UpstreamConn::ReadResult::kDone);
      DecideOnErrorBody(c);
      return;
    }
  }
  if (s.phase == LoopStream::Phase::kBody) PumpBody(c);
}

void Gateway::Impl::OnUpstreamHead(http::Connection* c) {
  LoopStream& s = *StateOf(c).stream;
  Exchange& ex = *s.ex;
  s.up_status = s.up->status();
  s.up_content_type = s.up->content_type();
  if (s.up_content_type.empty()) s.up_content_type = "application/json";
  s.last_upstream_ns = NowNs();
  if (s.up_status < 200 || s.up_status >= 300) {
    s.phase = LoopStream::Phase::kErrorBody;
    PumpUpstream(c);
    return;
  }
  s.phase = LoopStream::Phase::kBody;
  if (!s.headers_sent) {
    // Our response starts now, while the model may still be prefilling.
    s.headers_sent = true;
    s.sse = s.up_content_type.find("text/event-stream") != std::string::npos;
    const RouteDecision& d = ex.rr.decision;
    const http::Request& req = c->request();
    http::Headers headers = {{"Content-Type", s.up_content_type}};
    const std::string& id = StateOf(c).request_id;
    if (!id.empty()) headers.emplace_back("x-request-id", id);
    if (!d.route.empty()) headers.emplace_back("X-Octet-Route", d.route);
    if (!d.pool.empty()) headers.emplace_back("X-Octet-Pool", d.pool);
    if (!d.replica.empty()) headers.emplace_back("X-Octet-Replica", d.replica);
    if (s.sse) {
      headers.emplace_back("Cache-Control", "no-cache");
      headers.emplace_back("X-Accel-Buffering", "no");
    }
    // An HTTP/1.0 client's body ends when the connection closes.
    s.last_client_write_ns = NowNs();
    server->Write(
        c, http::ResponseHead(s.up_status, headers,
                              req.http11 ? http::BodyFraming::kChunked : http::BodyFraming::kClose,
                              0, !req.http11 || !req.keep_alive));
    if (c->closed()) return;
  }
  PumpBody(c);
}

// Relays what the upstream has sent: one read, one write to the client.
void Gateway::Impl::PumpBody(http::Connection* c) {
  LoopStream& s = *StateOf(c).stream;
  while (!s.paused && s.up) {
    s.piece.clear();
    const auto r = s.up->ReadBodyNow(&s.piece);
    if (!s.piece.empty()) {
      s.last_upstream_ns = NowNs();
      s.counter.Feed(s.piece);
      s.body_started = true;
      StreamWrite(c, s.piece);
      if (c->closed()) return;
      if (c->unsent() >= kClientHighWater) {
        // Back-pressure: leave the bytes in the upstream's socket until the client drains.
        s.paused = true;
        s.up_events = 0;
        server->SetWatchEvents(s.up_token, s.up->fd(), 0);
      }
    }
    switch (r) {
      case UpstreamConn::ReadResult::kData:
        return;  // epoll says when more arrives (level-triggered)
      case UpstreamConn::ReadResult::kWouldBlock:
        return;
      case UpstreamConn::ReadResult::kDone:
        core->ReportSuccess(s.ex->rr.lease.get(), *s.ex->rr.pool->spec);
        DropUpstream(s, true);
        EndStream(c);
        return;
      case UpstreamConn::ReadResult::kError:
        BodyFailure(c, s.up->error());
        return;
    }
  }
}

void Gateway::Impl::StreamWrite(http::Connection* c, std::string_view data) {
  LoopStream& s = *StateOf(c).stream;
  if (data.empty()) return;
  if (!s.wrote_any) {
    s.wrote_any = true;
    s.ex->rr.pool->counters->ttft.Record(NowNs() - s.ex->start_ns);
  }
  if (data.size() >= 2) {
    s.tail[0] = data[data.size() - 2];
    s.tail[1] = data[data.size() - 1];
  } else {
    s.tail[0] = s.tail[1];
    s.tail[1] = data[0];
  }
  s.last_client_write_ns = NowNs();
  server->Write(c, c->request().http11 ? http::ChunkFrame(data) : std::string(data));
}

// A transport failure before the body (connect, send, no head, broken head).
void Gateway::Impl::UpstreamTransportFailure(http::Connection* c, const Status& st) {
  LoopStream& s = *StateOf(c).stream;
  Exchange& ex = *s.ex;
  const bool reused = s.reused;
  DropUpstream(s, false);
  // A reused keep-alive connection the server closed meanwhile gets one more
  // try on a fresh connection to the same replica (not the replica's fault).
  if (reused && st.code() != StatusCode::kDeadlineExceeded) {
    StartAttempt(c, true);
    return;
  }
  ReplicaState* replica = ex.rr.lease.get();
  const std::string what = st.message();
  if (MoveOnAfterTransportFailure(ex.rr, replica, what)) {
    StartAttempt(c, false);
    return;
  }
  const bool timeout = st.code() == StatusCode::kDeadlineExceeded;
  const std::string reason =
      "pool '" + ex.rr.pool->spec->name + "' replica " + replica->url() + ": " + what;
  StreamAnswer(c, timeout ? 504 : 502, "application/json",
               OpenAiError("upstream failed: " + reason, "upstream_error", timeout ? 504 : 502),
               "upstream failed: " + reason);
}

void Gateway::Impl::BodyFailure(http::Connection* c, std::string what) {
  LoopStream& s = *StateOf(c).stream;
  Exchange& ex = *s.ex;
  DropUpstream(s, false);
  ReplicaState* replica = ex.rr.lease.get();
  if (s.body_started) {
    // Tokens already reached the client: end the stream with an error event.
    const std::string message = MidStreamFailure(replica, *ex.rr.pool, what);
    {
      MutexLock lock(ex.mu);
      ex.failed_after_headers = true;
      ex.error = true;
      ex.error_message = message;
    }
    EndStream(c);
    return;
  }
  // Nothing forwarded yet: another replica may still answer.
  if (MoveOnAfterTransportFailure(ex.rr, replica, what)) {
    StartAttempt(c, false);
    return;
  }
  const std::string reason =
      "pool '" + ex.rr.pool->spec->name + "' replica " + replica->url() + ": " + what;
  StreamAnswer(c, 502, "application/json",
               OpenAiError("upstream failed: " + reason, "upstream_error", 502),
               "upstream failed: " + reason);
}

void Gateway::Impl::DecideOnErrorBody(http::Connection* c) {
  LoopStream& s = *StateOf(c).stream;
  Exchange& ex = *s.ex;
  ReplicaState* replica = ex.rr.lease.get();
  if (MoveOnAfterStatus(ex.rr, replica, *ex.rr.pool->spec, s.up_status)) {
    StartAttempt(c, false);
    return;
  }
  const std::string message = "upstream " + replica->url() + " answered " +
                              std::to_string(s.up_status) + ": " + s.error_body.substr(0, 500);
  StreamAnswer(c, s.up_status, s.up_content_type, s.error_body, message);
}

// The stream ends with an answer of its own (an error, or an upstream's
// non-2xx passed through): a whole response when our headers have not gone
// out, else an SSE error event.
void Gateway::Impl::StreamAnswer(http::Connection* c, int status, const std::string& content_type,
                                 const std::string& body, const std::string& message) {
  LoopStream& s = *StateOf(c).stream;
  Exchange& ex = *s.ex;
  {
    MutexLock lock(ex.mu);
    ex.error = ex.error || status >= 500;
    if (s.headers_sent) {
      ex.failed_after_headers = true;
      ex.error = true;
      ex.error_message = message;
    }
  }
  if (s.headers_sent) {
    EndStream(c);
    return;
  }
  DropUpstream(s, false);
  ex.rr.lease.Release();
  ex.rr.pool->counters->ttft.Record(NowNs() - ex.start_ns);
  Finish(ex);
  const RouteDecision& d = ex.rr.decision;
  http::Headers extra;
  if (!d.route.empty()) extra.emplace_back("X-Octet-Route", d.route);
  if (!d.pool.empty()) extra.emplace_back("X-Octet-Pool", d.pool);
  if (!d.replica.empty()) extra.emplace_back("X-Octet-Replica", d.replica);
  dead_streams.push_back(std::move(StateOf(c).stream));  // `body` may live in it
  WriteSimple(c, status, content_type, body, extra, false);
}

// Ends a stream whose headers went out: the SSE error event when it failed,
// the last chunk, the metrics.
void Gateway::Impl::EndStream(http::Connection* c) {
  LoopStream& s = *StateOf(c).stream;
  Exchange& ex = *s.ex;
  bool failed;
  std::string message;
  {
    MutexLock lock(ex.mu);
    failed = ex.failed_after_headers;
    message = ex.error_message;
    ex.tokens = s.counter.tokens();
  }
  if (failed && s.sse) {
    if (s.tail[0] != '\n' || s.tail[1] != '\n') StreamWrite(c, "\n\n");
    if (c->closed()) return;
    StreamWrite(c, SseError(message));
    if (c->closed()) return;
  }
  DropUpstream(s, false);
  ex.rr.lease.Release();  // the upstream is done: its load drops now
  Finish(ex);
  const http::Request& req = c->request();
  const bool close = !req.http11 || !req.keep_alive;
  dead_streams.push_back(std::move(StateOf(c).stream));  // callers up the stack may still hold it
  if (req.http11) server->Write(c, http::kLastChunk);
  server->Finish(c, close);
}

// The client left (or the gateway stops) during a stream: the upstream
// request is cancelled by closing its connection.
void Gateway::Impl::CancelStream(http::Connection* c) {
  dead_streams.push_back(std::move(StateOf(c).stream));  // callers up the stack may still hold it
  LoopStream* s = dead_streams.back().get();
  s->ex->rr.pool->counters->cancelled.fetch_add(1, std::memory_order_relaxed);
  DropUpstream(*s, false);
  s->ex->rr.lease.Release();
  {
    MutexLock lock(s->ex->mu);
    s->ex->tokens = s->counter.tokens();
  }
  Finish(*s->ex);
}

int64_t Gateway::Impl::StreamDeadline(const LoopStream& s) const {
  const TimeoutSpec& t = s.ex->rr.pool->spec->timeouts;
  const int64_t read_ns = std::max(t.first_token_ms, t.idle_ms) * 1000000;
  int64_t d = 0;
  switch (s.phase) {
    case LoopStream::Phase::kConnecting:
      d = s.phase_start_ns + t.connect_ms * 1000000;
      break;
    case LoopStream::Phase::kSending:
      d = s.phase_start_ns + std::max<int64_t>(t.connect_ms, 10000) * 1000000;
      break;
    case LoopStream::Phase::kHead:
    case LoopStream::Phase::kErrorBody:
    case LoopStream::Phase::kBody:
      d = s.paused ? 0 : s.last_upstream_ns + read_ns;
      break;
  }
  if (s.headers_sent && s.sse && s.ex->keepalive_ms > 0) {
    const int64_t k = s.last_client_write_ns + s.ex->keepalive_ms * 1000000;
    if (d == 0 || k < d) d = k;
  }
  return d;
}

void Gateway::Impl::OnStreamDeadline(http::Connection* c, int64_t now) {
  LoopStream& s = *StateOf(c).stream;
  const TimeoutSpec& t = s.ex->rr.pool->spec->timeouts;
  const int64_t read_ms = std::max(t.first_token_ms, t.idle_ms);
  if (s.headers_sent && s.sse && s.ex->keepalive_ms > 0 &&
      now >= s.last_client_write_ns + s.ex->keepalive_ms * 1000000) {
    // An SSE comment between events: clients ignore it, and writing it is how
    // a departed client is noticed while the model prefills.
    if (s.tail[0] == '\n' && s.tail[1] == '\n') {
      StreamWrite(c, ": keepalive\n\n");
      if (c->closed()) return;
    } else {
      s.last_client_write_ns = now;
    }
  }
  switch (s.phase) {
    case LoopStream::Phase::kConnecting:
      if (now >= s.phase_start_ns + t.connect_ms * 1000000)
        UpstreamTransportFailure(c, DeadlineExceededError("connecting timed out after " +
                                                          std::to_string(t.connect_ms) + " ms"));
      return;
    case LoopStream::Phase::kSending:
      if (now >= s.phase_start_ns + std::max<int64_t>(t.connect_ms, 10000) * 1000000)
        UpstreamTransportFailure(c, DeadlineExceededError("sending the request timed out"));
      return;
    case LoopStream::Phase::kHead:
    case LoopStream::Phase::kErrorBody:
      if (now >= s.last_upstream_ns + read_ms * 1000000)
        UpstreamTransportFailure(c, DeadlineExceededError("no response from the upstream within " +
                                                          std::to_string(read_ms) + " ms"));
      return;
    case LoopStream::Phase::kBody:
      if (!s.paused && now >= s.last_upstream_ns + read_ms * 1000000)
        BodyFailure(c, "no data for " + std::to_string(read_ms) + " ms");
      return;
  }
}

}  // namespace octet::router
