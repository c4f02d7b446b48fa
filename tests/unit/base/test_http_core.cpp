// The server-side HTTP/1.1 core (octet/base/http/) that `octet route` and
// `octet serve` share: the request-head parser and the chunked-body decoder
// on bytes an attacker chooses, response and SSE framing read back by an
// independent reader, and the event loop over real loopback sockets —
// pipelining, HTTP/1.0, 100-continue, limits, deadlines, worker streams, and
// the listening socket's busy-port rule.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <QtTest>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "octet/base/deadline.h"
#include "octet/base/http/listener.h"
#include "octet/base/http/request.h"
#include "octet/base/http/response.h"
#include "octet/base/http/server.h"
#include "octet/base/sse.h"

using namespace octet;
using namespace octet::http;

namespace {

bool Parse(const std::string& head, Request* req, ParseError* err, uint64_t max_body = 1000) {
  return ParseRequestHead(head, max_body, req, err);
}

// A blocking loopback client with a deadline on every read.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }
  bool Send(const std::string& s) {
    return ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size());
  }
  // Reads until `pred(received)` holds, the peer closes, or `ms` pass.
  std::string ReadUntil(const std::function<bool(const std::string&)>& pred, int ms = 5000) {
    const Deadline d = Deadline::AfterMs(ms);
    while (!pred(in_) && !d.expired()) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, d.poll_timeout_ms()) <= 0) break;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      in_.append(buf, static_cast<size_t>(n));
    }
    return in_;
  }
  // Reads until the peer closes (or `ms` pass); true when it closed.
  bool WaitClosed(int ms = 5000) {
    ReadUntil([](const std::string&) { return false; }, ms);
    return closed_;
  }
  static size_t Count(const std::string& s, const std::string& what) {
    size_t n = 0;
    for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
    return n;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool closed_ = false;
  std::string in_;
};

// Echoes the request as "METHOD PATH BODY" at once; /slow and /stream go
// through a worker (a streamed reply of three SSE events for /stream).
class EchoHandler : public Handler {
 public:
  explicit EchoHandler(Server** server) : server_(server) {}
  uint64_t MaxBodyBytes() override { return 1000; }
  bool OnHead(Connection* c) override {
    if (c->request().path == "/refuse-early") {
      (*server_)->RespondError(c, 401, "no");
      return false;
    }
    return true;
  }
  void OnRequest(Connection* c) override {
    Request& r = c->request();
    if (r.path == "/stream") {
      (*server_)->HandToWorker(c, [](Request&, Responder& out) {
        if (!out.BeginStream(200, {{"Content-Type", "text/event-stream"}})) return;
        for (const char* piece : {"one", "two\nlines", "[DONE]"}) out.Write(SseEvent(piece));
        out.End(true);
      });
      return;
    }
    if (r.path == "/held") {  // answers once the test releases it
      (*server_)->HandToWorker(c, [this](Request&, Responder& out) {
        held_started.store(true);
        for (const Deadline d = Deadline::AfterMs(10'000); !release.load() && !d.expired();) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        out.Send(200, {{"Content-Type", "text/plain"}}, "held");
      });
      return;
    }
    if (r.path == "/slow") {
      (*server_)->HandToWorker(c, [](Request& req, Responder& out) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        out.Send(200, {{"Content-Type", "text/plain"}}, "slow " + req.body);
      });
      return;
    }
    ++answered;
    (*server_)->Respond(c, 200, {{"Content-Type", "text/plain"}},
                        r.method + " " + r.path + " " + r.body);
  }
  std::atomic<int> answered{0};
  std::atomic<bool> held_started{false}, release{false};

 private:
  Server** server_;
};

struct Fixture {
  explicit Fixture(ServerOptions o = {}) : handler(&server_ptr) {
    o.name = "test-http";
    server = std::make_unique<Server>(o, &handler);
    server_ptr = server.get();
    status = server->Start("127.0.0.1", 0);
  }
  Server* server_ptr = nullptr;
  EchoHandler handler;
  std::unique_ptr<Server> server;
  Status status;
};

bool HasResponses(const std::string& s, size_t n) { return RawClient::Count(s, "HTTP/1.1 ") >= n; }

// A thread that calls Stop(drain_ms), joined when the test function returns
// (a failed check too), after the held worker is released.
class Stopper {
 public:
  Stopper(Fixture& f, int64_t drain_ms)
      : f_(f), thread_([this, drain_ms] {
          f_.server->Stop(drain_ms);
          stopped = true;
        }) {}
  ~Stopper() {
    f_.handler.release = true;
    thread_.join();
  }
  std::atomic<bool> stopped{false};

 private:
  Fixture& f_;
  std::thread thread_;
};

}  // namespace

class TestHttpCore : public QObject {
  Q_OBJECT
 private slots:
  // ---- The head parser.
  void parsesARequestHead() {
    Request r;
    ParseError e;
    QVERIFY(
        Parse("POST /v1/x?model=a%20b&k HTTP/1.1\r\nHost: h\r\ncontent-length: 12\r\n"
              "X-Thing:  spaced \t",
              &r, &e));
    QCOMPARE(r.method, std::string("POST"));
    QCOMPARE(r.path, std::string("/v1/x"));
    QCOMPARE(QueryParam(r.query, "model"), std::string("a b"));
    QCOMPARE(r.content_length, uint64_t{12});
    QCOMPARE(r.Header("x-thing"), std::string("spaced"));
    QVERIFY(r.http11 && r.keep_alive && !r.chunked);
  }

  void refusesTwoContentLengthHeadersEvenWhenEqual() {
    for (const char* second : {"5", "7"}) {
      Request r;
      ParseError e;
      QVERIFY(
          !Parse(std::string("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: ") + second,
                 &r, &e));
      QCOMPARE(e.status, 400);
      QVERIFY2(e.message.find("Content-Length") != std::string::npos, e.message.c_str());
    }
  }

  void refusesAmbiguousOrUnknownFraming() {
    Request r;
    ParseError e;
    QVERIFY(!Parse("POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked", &r, &e));
    QCOMPARE(e.status, 400);
    QVERIFY(!Parse("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked", &r, &e));
    QCOMPARE(e.status, 501);
    QVERIFY(!Parse("POST / HTTP/1.1\r\nContent-Length: -1", &r, &e));
    QCOMPARE(e.status, 400);
    QVERIFY(!Parse("POST / HTTP/1.1\r\nContent-Length: 1001", &r, &e));
    QCOMPARE(e.status, 413);
    QVERIFY(!Parse("GET / HTTP/2.0", &r, &e));
    QCOMPARE(e.status, 505);
    QVERIFY(!Parse("GET / HTTP/1.1\r\nExpect: 200-ok", &r, &e));
    QCOMPARE(e.status, 417);
    QVERIFY(!Parse("GET / HTTP/1.1\r\nBad Name: x", &r, &e));
    QCOMPARE(e.status, 400);
    QVERIFY(!Parse("GET http://x/ HTTP/1.1", &r, &e));
    QCOMPARE(e.status, 400);
  }

  void http10KeepAliveOnlyWhenAsked() {
    Request r;
    ParseError e;
    QVERIFY(Parse("GET / HTTP/1.0", &r, &e));
    QVERIFY(!r.http11 && !r.keep_alive);
    QVERIFY(Parse("GET / HTTP/1.0\r\nConnection: Keep-Alive", &r, &e));
    QVERIFY(r.keep_alive);
    QVERIFY(Parse("GET / HTTP/1.1\r\nConnection: foo, close", &r, &e));
    QVERIFY(!r.keep_alive);
  }

  void decodesAChunkedBodySplitAnywhere() {
    const std::string wire = "5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nTrailer: x\r\n\r\nNEXT";
    for (size_t step = 1; step <= wire.size(); ++step) {
      ChunkedDecoder d(1000);
      std::string body, pending;
      ChunkedDecoder::State st = ChunkedDecoder::State::kNeedMore;
      size_t fed = 0;
      while (st == ChunkedDecoder::State::kNeedMore && fed < wire.size()) {
        pending += wire.substr(fed, step);
        fed += step;
        size_t used = 0;
        st = d.Feed(pending, &used, &body);
        pending.erase(0, used);
      }
      QCOMPARE(int(st), int(ChunkedDecoder::State::kDone));
      QCOMPARE(body, std::string("hello, world"));
      QCOMPARE(pending + (fed < wire.size() ? wire.substr(fed) : ""), std::string("NEXT"));
    }
  }

  void refusesBadOrOversizeChunks() {
    struct Case {
      std::string wire;
      int status;
    };
    for (const Case& c : {Case{"zz\r\n", 400}, Case{"5\r\nhelloXX\r\n", 400}, Case{"400\r\n", 413},
                          Case{"5\nhello", 400}, Case{std::string(9000, '1'), 400}}) {
      ChunkedDecoder d(1000);
      std::string body;
      size_t used = 0;
      QCOMPARE(int(d.Feed(c.wire, &used, &body)), int(ChunkedDecoder::State::kError));
      QCOMPARE(d.error().status, c.status);
    }
  }

  // ---- Response framing.
  void framesResponsesAndEvents() {
    const std::string head =
        ResponseHead(404, {{"Content-Type", "a/b"}, {"Content-Length", "99"}, {"Connection", "x"}},
                     BodyFraming::kLength, 3, true);
    QCOMPARE(head, std::string("HTTP/1.1 404 Not Found\r\nContent-Type: a/b\r\n"
                               "Content-Length: 3\r\nConnection: close\r\n\r\n"));
    QCOMPARE(ResponseHead(200, {}, BodyFraming::kChunked, 0, false),
             std::string("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"));
    QCOMPARE(ChunkFrame(std::string(26, 'a')), "1a\r\n" + std::string(26, 'a') + "\r\n");
    QCOMPARE(ChunkFrame(""), std::string());
    // The events read back by the SSE reader the clients use.
    SseReader reader;
    std::vector<std::string> got, types;
    const std::vector<std::string> sent = {"{\"a\":1}", "two\nlines", "crlf\r\nend", ""};
    for (const std::string& s : sent)
      reader.Feed(SseEvent(s, s.empty() ? "ping" : ""), [&](const SseReader::Event& e) {
        got.push_back(e.data);
        types.push_back(e.type);
      });
    QCOMPARE(got, (std::vector<std::string>{"{\"a\":1}", "two\nlines", "crlf\nend", ""}));
    QCOMPARE(types.back(), std::string("ping"));
  }

  // ---- The event loop.
  void answersPipelinedRequestsInOrder() {
    Fixture f;
    QVERIFY2(f.status.ok(), f.status.ToString().c_str());
    RawClient c(f.server->port());
    QVERIFY(c.connected());
    // Three requests in one write, the middle one through a worker, the last
    // with a chunked body.
    QVERIFY(
        c.Send("POST /a HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi"
               "POST /slow HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
               "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nxy\r\n0\r\n\r\n"));
    const std::string got = c.ReadUntil([](const std::string& s) {
      return HasResponses(s, 3) && s.find("POST /c xy") != std::string::npos;
    });
    const size_t a = got.find("POST /a hi"), b = got.find("slow abc"), d = got.find("POST /c xy");
    QVERIFY2(a != std::string::npos && b != std::string::npos && d != std::string::npos,
             got.c_str());
    QVERIFY(a < b && b < d);
  }

  void http10GetsItsAnswerThenTheConnectionCloses() {
    Fixture f;
    RawClient c(f.server->port());
    QVERIFY(c.Send("GET /old HTTP/1.0\r\n\r\n"));
    QVERIFY(c.WaitClosed());
    const std::string got = c.ReadUntil([](const std::string&) { return true; });
    QVERIFY2(got.find("GET /old") != std::string::npos, got.c_str());
    QVERIFY(got.find("Connection: close") != std::string::npos);
  }

  void expectContinueGetsA100BeforeTheBody() {
    Fixture f;
    RawClient c(f.server->port());
    QVERIFY(c.Send("POST /e HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n"));
    std::string got = c.ReadUntil(
        [](const std::string& s) { return s.find("100 Continue\r\n\r\n") != std::string::npos; });
    QVERIFY2(got.rfind("HTTP/1.1 100 Continue\r\n\r\n", 0) == 0, got.c_str());
    QVERIFY(c.Send("body"));
    got = c.ReadUntil(
        [](const std::string& s) { return s.find("POST /e body") != std::string::npos; });
    QVERIFY2(got.find("HTTP/1.1 200 OK") != std::string::npos, got.c_str());
  }

  void oversizeHeadAndBodyAreRefusedAndClosed() {
    ServerOptions o;
    o.max_head_bytes = 2048;
    Fixture f(o);
    {
      RawClient c(f.server->port());
      QVERIFY(c.Send("GET / HTTP/1.1\r\nX-Big: " + std::string(4000, 'a') + "\r\n\r\n"));
      QVERIFY(c.WaitClosed());
      const std::string got = c.ReadUntil([](const std::string&) { return true; });
      QVERIFY2(got.rfind("HTTP/1.1 431 ", 0) == 0, got.c_str());
    }
    {  // 413 before any of the body is sent, and nothing of it is taken for a request
      RawClient c(f.server->port());
      QVERIFY(c.Send("POST / HTTP/1.1\r\nContent-Length: 5000\r\n\r\n"));
      QVERIFY(c.WaitClosed());
      const std::string got = c.ReadUntil([](const std::string&) { return true; });
      QVERIFY2(got.rfind("HTTP/1.1 413 ", 0) == 0, got.c_str());
      QVERIFY(got.find("\"code\":413") != std::string::npos);
    }
    {  // a chunked body that grows past the limit
      RawClient c(f.server->port());
      QVERIFY(c.Send("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3e8\r\n" +
                     std::string(1000, 'a') + "\r\n1\r\n"));
      QVERIFY(c.WaitClosed());
      const std::string got = c.ReadUntil([](const std::string&) { return true; });
      QVERIFY2(got.rfind("HTTP/1.1 413 ", 0) == 0, got.c_str());
    }
    QCOMPARE(f.handler.answered.load(), 0);
  }

  void anEarlyAnswerClosesWithoutReadingTheBody() {
    Fixture f;
    RawClient c(f.server->port());
    QVERIFY(
        c.Send("POST /refuse-early HTTP/1.1\r\nContent-Length: 30\r\n\r\n"
               "GET /smuggled HTTP/1.1\r\n\r\n"));
    QVERIFY(c.WaitClosed());
    const std::string got = c.ReadUntil([](const std::string&) { return true; });
    QVERIFY2(got.rfind("HTTP/1.1 401 ", 0) == 0, got.c_str());
    QCOMPARE(RawClient::Count(got, "HTTP/1.1 "), size_t{1});
  }

  void aSlowHeadGets408WhileOthersAreServed() {
    ServerOptions o;
    o.head_timeout_ms = 300;
    Fixture f(o);
    RawClient slow(f.server->port());
    QVERIFY(slow.Send("GET / HTTP/1.1\r\nX-A: 1\r\n"));
    // Meanwhile another client is answered at once.
    RawClient other(f.server->port());
    QVERIFY(other.Send("GET /ok HTTP/1.1\r\n\r\n"));
    QVERIFY(
        other
            .ReadUntil([](const std::string& s) { return s.find("GET /ok") != std::string::npos; },
                       1000)
            .find("200 OK") != std::string::npos);
    QVERIFY(slow.WaitClosed(3000));
    const std::string got = slow.ReadUntil([](const std::string&) { return true; });
    QVERIFY2(got.rfind("HTTP/1.1 408 ", 0) == 0, got.c_str());
  }

  void anIdleConnectionIsClosed() {
    ServerOptions o;
    o.keep_alive_timeout_ms = 200;
    Fixture f(o);
    RawClient c(f.server->port());
    QVERIFY(c.WaitClosed(3000));
  }

  void aWorkerStreamsChunkedEvents() {
    Fixture f;
    RawClient c(f.server->port());
    QVERIFY(c.Send("GET /stream HTTP/1.1\r\n\r\nGET /after HTTP/1.1\r\n\r\n"));
    const std::string got =
        c.ReadUntil([](const std::string& s) { return s.find("GET /after") != std::string::npos; });
    const size_t body = got.find("\r\n\r\n");
    QVERIFY2(got.find("Transfer-Encoding: chunked") < body, got.c_str());
    // De-chunk the stream with the decoder and read its events.
    ChunkedDecoder d(1 << 20);
    std::string events;
    size_t used = 0;
    QCOMPARE(int(d.Feed(std::string_view(got).substr(body + 4), &used, &events)),
             int(ChunkedDecoder::State::kDone));
    std::vector<std::string> data;
    SseReader().Feed(events, [&](const SseReader::Event& e) { data.push_back(e.data); });
    QCOMPARE(data, (std::vector<std::string>{"one", "two\nlines", "[DONE]"}));
    QVERIFY(std::string_view(got).substr(body + 4 + used).rfind("HTTP/1.1 200 OK", 0) == 0);
  }

  void anHttp10StreamEndsWithTheConnection() {
    Fixture f;
    RawClient c(f.server->port());
    QVERIFY(c.Send("GET /stream HTTP/1.0\r\n\r\n"));
    QVERIFY(c.WaitClosed());
    const std::string got = c.ReadUntil([](const std::string&) { return true; });
    QVERIFY2(got.find("Transfer-Encoding") == std::string::npos, got.c_str());
    QVERIFY(got.find("data: [DONE]\n\n") != std::string::npos);
  }

  void aBusyPortIsAnError() {
    auto first = Listen("test", "127.0.0.1", 0);
    QVERIFY(first.ok());
    auto second = Listen("test", "127.0.0.1", first->port);
    QVERIFY(!second.ok());
    QVERIFY2(second.status().message().find(std::to_string(first->port)) != std::string::npos,
             second.status().ToString().c_str());
    ::close(first->fd);
  }

  void stopEndsConnectionsAndWorkers() {
    Fixture f;
    RawClient c(f.server->port());
    QVERIFY(c.Send("POST /slow HTTP/1.1\r\nContent-Length: 0\r\n\r\n"));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const int64_t t0 = NowNs();
    f.server->Stop();
    QVERIFY((NowNs() - t0) / 1'000'000 < 2000);
    QVERIFY(c.WaitClosed(2000));
  }

  // Stop with a drain (how `octet serve` stops): the answer a worker is
  // writing reaches its client, then that connection closes; an idle
  // keep-alive connection closes at once; nobody new is let in.
  void aDrainingStopDeliversTheAnswersInProgress() {
    Fixture f;
    const int port = f.server->port();
    RawClient idle(port);
    QVERIFY(idle.Send("GET /a HTTP/1.1\r\n\r\n"));
    QVERIFY(
        HasResponses(idle.ReadUntil([](const std::string& s) { return HasResponses(s, 1); }), 1));
    RawClient busy(port);
    QVERIFY(busy.Send("GET /held HTTP/1.1\r\n\r\n"));
    for (const Deadline d = Deadline::AfterMs(5000); !f.handler.held_started && !d.expired();) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    QVERIFY(f.handler.held_started);
    Stopper stopper(f, 10'000);
    QVERIFY(idle.WaitClosed(3000));
    RawClient late(port);
    QVERIFY(late.Send("GET /a HTTP/1.1\r\n\r\n"));
    QVERIFY(!HasResponses(late.ReadUntil([](const std::string&) { return false; }, 300), 1));
    QVERIFY(!stopper.stopped);  // still draining: the held answer is not written yet
    f.handler.release = true;
    const std::string got =
        busy.ReadUntil([](const std::string& s) { return s.find("held") != std::string::npos; });
    QVERIFY2(got.rfind("HTTP/1.1 200 OK", 0) == 0 && got.find("\r\n\r\nheld") != std::string::npos,
             got.c_str());
    QVERIFY(busy.WaitClosed(3000));
  }

  // The drain ends at its deadline: an answer still not written is cut.
  void aDrainEndsAtItsDeadline() {
    Fixture f;
    RawClient busy(f.server->port());
    QVERIFY(busy.Send("GET /held HTTP/1.1\r\n\r\n"));
    for (const Deadline d = Deadline::AfterMs(5000); !f.handler.held_started && !d.expired();) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    QVERIFY(f.handler.held_started);
    const int64_t t0 = NowNs();
    {
      Stopper stopper(f, 300);  // Stop waits for the worker: released as it goes
      QVERIFY(busy.WaitClosed(5000));
      const int64_t closed_ms = (NowNs() - t0) / 1'000'000;
      QVERIFY2(closed_ms >= 250 && closed_ms < 5000, std::to_string(closed_ms).c_str());
    }
    QVERIFY(!HasResponses(busy.ReadUntil([](const std::string&) { return true; }), 1));
  }
};

QTEST_APPLESS_MAIN(TestHttpCore)
#include "test_http_core.moc"
