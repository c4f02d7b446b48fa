// The gateway's HTTP/1.1 server as a client and an upstream see it on raw
// sockets: a slow-loris client is cut off after the header timeout while
// others are served; pipelined and keep-alive requests on one connection are
// answered in order; an oversized head or body gets 431 / 413 with an
// OpenAI-style error body; a client that stops reading does not make the
// gateway buffer its stream without bound (the upstream is left unread), and
// when that client leaves, the upstream sees its connection closed.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <QtTest>
#include <atomic>
#include <cstring>
#include <map>
#include <thread>

#include "octet/base/deadline.h"
#include "octet/base/json.h"
#include "octet/router/gateway.h"
#include "octet/router/router.h"
#include "openai_upstream.h"
#include "router_client.h"

using namespace octet;
using namespace octet::router;
using namespace octet::test;
using nlohmann::json;

namespace {

std::string Fill(std::string yaml, const std::map<std::string, std::string>& vars) {
  for (const auto& [k, v] : vars)
    for (size_t p; (p = yaml.find("@" + k + "@")) != std::string::npos;)
      yaml.replace(p, k.size() + 2, v);
  return yaml;
}

struct Gw {
  std::unique_ptr<Router> router;
  std::unique_ptr<Gateway> gateway;
  int port() const { return gateway->port(); }
};

Gw StartGateway(const std::string& yaml, const GatewayOptions& o = GatewayOptions()) {
  auto parsed = ParsePolicy(yaml, "test-policy.yaml");
  if (!parsed.ok()) qFatal("%s", parsed.status().message().c_str());
  Gw g;
  auto r = Router::Create(parsed.policy);
  if (!r.ok()) qFatal("%s", r.status().message().c_str());
  g.router = std::move(*r);
  auto gw = Gateway::Start(g.router.get(), o);
  if (!gw.ok()) qFatal("%s", gw.status().message().c_str());
  g.gateway = std::move(*gw);
  return g;
}

const char* kOnePool = R"(version: 1
gateway: {max_body_bytes: 4096}
pools:
  - name: p
    replicas: [@U@]
    health_check: {enabled: false}
routes:
  - name: all
    pool: p
)";

// A blocking loopback client socket with a receive timeout.
int Connect(int port, int rcvbuf = 0) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (rcvbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) qFatal("connect failed");
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

void SendAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

// One HTTP response read from `fd` (bytes left over stay in *buf).
struct RawResponse {
  int status = 0;
  std::string head;
  std::string body;  // de-chunked
  bool ok = false;   // complete
};

bool Fill(int fd, std::string* buf) {
  char tmp[16384];
  const ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
  if (n <= 0) return false;
  buf->append(tmp, static_cast<size_t>(n));
  return true;
}

RawResponse ReadResponse(int fd, std::string* buf) {
  RawResponse r;
  size_t end;
  while ((end = buf->find("\r\n\r\n")) == std::string::npos)
    if (!Fill(fd, buf)) return r;
  r.head = buf->substr(0, end + 2);
  buf->erase(0, end + 4);
  r.status = std::atoi(r.head.c_str() + 9);
  std::string lower = r.head;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.find("transfer-encoding: chunked") != std::string::npos) {
    while (true) {
      size_t eol;
      while ((eol = buf->find("\r\n")) == std::string::npos)
        if (!Fill(fd, buf)) return r;
      const size_t size = std::strtoul(buf->c_str(), nullptr, 16);
      while (buf->size() < eol + 2 + size + 2)
        if (!Fill(fd, buf)) return r;
      r.body += buf->substr(eol + 2, size);
      buf->erase(0, eol + 2 + size + 2);
      if (size == 0) break;
    }
  } else {
    const size_t at = lower.find("content-length: ");
    const size_t len =
        at == std::string::npos ? 0 : std::strtoul(lower.c_str() + at + 16, nullptr, 10);
    while (buf->size() < len)
      if (!Fill(fd, buf)) return r;
    r.body = buf->substr(0, len);
    buf->erase(0, len);
  }
  r.ok = true;
  return r;
}

// True when the peer closed `fd` (recv returns 0 or an error) before `ms` pass;
// the bytes received meanwhile are appended to *got.
bool ClosedWithin(int fd, int ms, std::string* got) {
  const Deadline d = Deadline::AfterMs(ms);
  while (!d.expired()) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(d.poll_timeout_ms())) <= 0) continue;
    char tmp[4096];
    const ssize_t n = ::recv(fd, tmp, sizeof tmp, MSG_DONTWAIT);
    if (n <= 0) return true;
    got->append(tmp, static_cast<size_t>(n));
  }
  return false;
}

std::string ChatRequestBytes(const std::string& text, bool stream, const std::string& extra = "") {
  const std::string body = ChatRequest(text, stream).dump();
  return "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n" +
         extra + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// An upstream that answers one streaming request with as many bytes as it can
// write (up to `limit`), counting them; it stops when a write has been
// blocked for 1 s (its peer does not read) or fails (its peer closed).
class FloodUpstream {
 public:
  explicit FloodUpstream(size_t limit) : limit_(limit) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listen_fd_, 8) != 0)
      qFatal("bind failed");
    socklen_t len = sizeof a;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FloodUpstream() {
    stop_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    ::close(listen_fd_);
  }
  int port() const { return port_; }
  size_t sent() const { return sent_.load(); }
  bool blocked() const { return blocked_.load(); }  // a write waited 1 s: nobody reads
  bool peer_closed() const { return peer_closed_.load(); }

 private:
  void Serve() {
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) return;
    std::string buf;
    while (buf.find("\r\n\r\n") == std::string::npos && Fill(fd, &buf)) {
    }
    SendAll(fd,
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: "
            "chunked\r\n\r\n");
    timeval tv{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    const std::string event =
        "data: {\"choices\":[{\"delta\":{\"content\":\"" + std::string(16000, 'x') + "\"}}]}\n\n";
    char size[16];
    std::snprintf(size, sizeof size, "%zx\r\n", event.size());
    const std::string chunk = size + event + "\r\n";
    while (!stop_ && sent_.load() < limit_) {
      size_t off = 0;
      while (off < chunk.size()) {
        const ssize_t n = ::send(fd, chunk.data() + off, chunk.size() - off, MSG_NOSIGNAL);
        if (n > 0) {
          off += static_cast<size_t>(n);
          sent_ += static_cast<size_t>(n);
          continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
          blocked_ = true;
          if (stop_) break;
          continue;  // keep trying: the test decides when it has seen enough
        }
        peer_closed_ = true;
        ::close(fd);
        return;
      }
    }
    // Wait for the peer to close (the gateway cancelling us), bounded.
    const Deadline d = Deadline::AfterMs(10000);
    while (!stop_ && !d.expired()) {
      pollfd p{fd, POLLIN, 100};
      if (::poll(&p, 1, 100) > 0) {
        char c;
        if (::recv(fd, &c, 1, MSG_DONTWAIT) <= 0) {
          peer_closed_ = true;
          break;
        }
      }
    }
    ::close(fd);
  }
  size_t limit_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> sent_{0};
  std::atomic<bool> blocked_{false};
  std::atomic<bool> peer_closed_{false};
};

std::unique_ptr<OpenAiUpstream> StartUpstream(const std::string& name) {
  UpstreamOptions o;
  o.name = name;
  o.tokens = 4;
  o.threads = 16;
  auto u = OpenAiUpstream::Start(o);
  if (!u.ok()) qFatal("%s", u.status().message().c_str());
  return std::move(*u);
}

}  // namespace

class TestRouterGatewayHttp : public QObject {
  Q_OBJECT
 private slots:
  void slowLorisIsCutOffWhileOthersAreServed() {
    auto up = StartUpstream("U");
    GatewayOptions o;
    o.header_timeout_ms = 300;
    Gw g = StartGateway(Fill(kOnePool, {{"U", up->url()}}), o);
    const int slow = Connect(g.port());
    SendAll(slow, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Le");
    // Others are served meanwhile, streaming and not.
    for (bool stream : {true, false, true}) {
      ClientResult r = Chat(g.port(), "q", stream);
      QVERIFY2(r.status == 200, (r.error + r.body).c_str());
    }
    std::string got;
    QVERIFY2(ClosedWithin(slow, 5000, &got), got.c_str());
    QVERIFY2(got.rfind("HTTP/1.1 408 ", 0) == 0, got.c_str());
    QVERIFY(got.find("\"error\"") != std::string::npos);
    ::close(slow);
    // A body that never completes is cut off too.
    GatewayOptions ob;
    ob.body_timeout_ms = 300;
    Gw gb = StartGateway(Fill(kOnePool, {{"U", up->url()}}), ob);
    const int dribble = Connect(gb.port());
    SendAll(dribble,
            "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 100\r\n\r\n{\"mo");
    got.clear();
    QVERIFY2(ClosedWithin(dribble, 5000, &got), got.c_str());
    QVERIFY2(got.rfind("HTTP/1.1 408 ", 0) == 0, got.c_str());
    ::close(dribble);
  }

  void pipelinedAndKeepAliveRequestsOnOneConnection() {
    auto up = StartUpstream("U");
    Gw g = StartGateway(Fill(kOnePool, {{"U", up->url()}}));
    const int fd = Connect(g.port());
    // Four requests in one write: a stream, a unary one, a GET, another stream.
    SendAll(fd, ChatRequestBytes("one", true) + ChatRequestBytes("two", false) +
                    "GET /health HTTP/1.1\r\nHost: gw\r\n\r\n" + ChatRequestBytes("three", true));
    std::string buf;
    RawResponse a = ReadResponse(fd, &buf);
    QVERIFY(a.ok);
    QCOMPARE(a.status, 200);
    QVERIFY2(a.head.find("X-Octet-Pool: p\r\n") != std::string::npos, a.head.c_str());
    QCOMPARE(ParseSse(a.body).text, ExpectedTokens("U", 4));
    QVERIFY(ParseSse(a.body).done);
    RawResponse b = ReadResponse(fd, &buf);
    QVERIFY(b.ok);
    QCOMPARE(b.status, 200);
    QCOMPARE(json::parse(b.body)["choices"][0]["message"]["content"].get<std::string>(),
             ExpectedTokens("U", 4));
    RawResponse c = ReadResponse(fd, &buf);
    QVERIFY(c.ok);
    QCOMPARE(c.status, 200);
    QCOMPARE(json::parse(c.body)["status"].get<std::string>(), std::string("ok"));
    RawResponse d = ReadResponse(fd, &buf);
    QVERIFY(d.ok);
    QCOMPARE(ParseSse(d.body).text, ExpectedTokens("U", 4));
    // Keep-alive: the connection carries a later request too.
    SendAll(fd, ChatRequestBytes("four", true));
    RawResponse e = ReadResponse(fd, &buf);
    QVERIFY(e.ok);
    QCOMPARE(ParseSse(e.body).text, ExpectedTokens("U", 4));
    QCOMPARE(up->requests(), 4);
    // "Connection: close" is honoured: answered, then closed.
    SendAll(fd, ChatRequestBytes("five", true, "Connection: close\r\n"));
    RawResponse f = ReadResponse(fd, &buf);
    QVERIFY(f.ok);
    QCOMPARE(ParseSse(f.body).text, ExpectedTokens("U", 4));
    std::string rest;
    QVERIFY(ClosedWithin(fd, 5000, &rest));
    QVERIFY(rest.empty() && buf.empty());
    ::close(fd);
  }

  void oversizedHeadOrBodyIsRefused() {
    auto up = StartUpstream("U");
    GatewayOptions o;
    o.max_header_bytes = 8192;
    Gw g = StartGateway(Fill(kOnePool, {{"U", up->url()}}), o);
    {
      const int fd = Connect(g.port());
      SendAll(fd,
              "GET /health HTTP/1.1\r\nHost: gw\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n");
      std::string buf;
      RawResponse r = ReadResponse(fd, &buf);
      QVERIFY(r.ok);
      QCOMPARE(r.status, 431);
      const json j = json::parse(r.body, nullptr, false);
      QVERIFY2(j.is_object() && j["error"]["code"] == 431 && j["error"]["message"].is_string(),
               r.body.c_str());
      std::string rest;
      QVERIFY(ClosedWithin(fd, 5000, &rest));
      ::close(fd);
    }
    {
      // gateway.max_body_bytes is 4096: refused from the Content-Length alone.
      const int fd = Connect(g.port());
      SendAll(fd,
              "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: "
              "application/json\r\nContent-Length: 100000\r\n\r\n{\"model\":");
      std::string buf;
      RawResponse r = ReadResponse(fd, &buf);
      QVERIFY(r.ok);
      QCOMPARE(r.status, 413);
      const json j = json::parse(r.body, nullptr, false);
      QVERIFY2(j.is_object() && j["error"]["type"] == "invalid_request_error", r.body.c_str());
      std::string rest;
      QVERIFY(ClosedWithin(fd, 5000, &rest));
      ::close(fd);
    }
    QCOMPARE(up->requests(), 0);
    // The gateway still serves.
    QCOMPARE(Chat(g.port(), "q", true).status, 200);
  }

  void clientThatDoesNotReadIsNotBufferedWithoutBound() {
    // The upstream would send 256 MiB as fast as it can; the client reads
    // nothing. The gateway reads the upstream only while the client's backlog
    // is small, so the upstream's writes block after what the sockets' kernel
    // buffers and the gateway's cap (256 KiB) hold.
    constexpr size_t kFlood = 256u << 20;
    FloodUpstream up(kFlood);
    Gw g = StartGateway(Fill(kOnePool, {{"U", "http://127.0.0.1:" + std::to_string(up.port())}}));
    const int fd = Connect(g.port(), 64 * 1024);
    SendAll(fd, ChatRequestBytes("flood", true));
    QVERIFY2(WaitFor([&] { return up.blocked(); }, 20000), std::to_string(up.sent()).c_str());
    const size_t at_block = up.sent();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const size_t later = up.sent();
    qInfo("upstream wrote %zu bytes before blocking (%zu after 300 ms more)", at_block, later);
    // Kernel socket buffers on loopback are at most a few MiB each way.
    QVERIFY2(later < 48u << 20, std::to_string(later).c_str());
    // The client leaves: the upstream sees its connection closed.
    ::close(fd);
    QVERIFY(WaitFor([&] { return up.peer_closed(); }, 10000));
    QVERIFY(WaitFor([&] { return g.router->Stats().pools[0].in_flight == 0; }));
  }
};

QTEST_APPLESS_MAIN(TestRouterGatewayHttp)
#include "test_router_gateway_http.moc"
